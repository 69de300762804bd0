"""Step metrics that need their own checks."""

import numpy as np
import pytest

from flowgrpo.trainer.monitoring.metrics import reward_z_frac_extreme


@pytest.mark.parametrize(
    ("rewards", "k", "expected"),
    [
        ([0.2, 1.0], 2, 1.0),  # K=2: any gap gives z = ±1
        ([0.2, 0.21, 0.5, 0.5], 2, 0.5),  # the equal pair carries no signal
        ([0.3, 0.3, 0.3, 0.3], 4, 0.0),  # no spread, no signal
        ([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 8, 1 / 8),  # z: 2.65 and -0.38
        ([1.0, np.nan, 0.0, 0.5], 4, 2 / 4),  # NaN left out; z = ±1.22, 0
    ],
)
def test_reward_z_frac_extreme(rewards, k, expected):
    assert reward_z_frac_extreme(np.array(rewards), k) == pytest.approx(expected)
