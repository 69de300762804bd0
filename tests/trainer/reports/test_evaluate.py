"""pass@k and the evaluation summary on hand-made samples."""

import pytest

from flowgrpo.trainer.reports.evaluate import pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 0, 1, 0.0),
        (1, 1, 1, 1.0),
        (4, 1, 1, 0.25),
        (4, 2, 2, 1 - 1 / 6),
        (4, 0, 4, 0.0),
        (4, 1, 4, 1.0),
        (10, 3, 5, 1 - 21 / 252),
    ],
)
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    # 1 - C(n - c, k) / C(n, k): e.g. n=4, c=2, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(n, c, k) == pytest.approx(expected)
