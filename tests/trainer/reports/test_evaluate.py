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


def test_format_eval_with_k_1_prints_pass_at_1_once():
    from flowgrpo.trainer.reports.evaluate import format_eval

    result = {
        "model": "m", "task": "arithmetic", "problems": 2, "k": 1, "seconds": 1.0,
        "validity_rate": 1.0, "fallback_rate": 0.0, "pass@1": 0.5, "distinct_workflows": 1,
        "executor_calls_per_problem": 1.0, "executor_tokens_per_problem": 3.0, "unscorable": 0,
        "top_workflows": [("Custom", 2)], "structures": {"linear": 2},
    }  # fmt: skip
    assert format_eval(result).count("pass@1") == 1
    assert format_eval({**result, "k": 2, "pass@2": 0.75}).count("pass@") == 2


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"temperature": 0.0}, r"eval\.temperature: must be > 0"),  # was: the run's 0.8, silently
        ({"max_new_tokens": 0}, r"eval\.max_new_tokens: must be >= 1"),  # was: 40
        ({"constrained": ""}, r"eval\.constrained: use off or grammar"),  # was: the run's
    ],
)
def test_a_value_given_to_an_evaluation_is_checked_not_replaced_by_the_runs(given, message):
    from flowgrpo.configuration import ConfigError
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.reports.evaluate import settings_of_run

    run = load_config("configs/tiny.yaml")
    for config in (run, None):
        with pytest.raises(ConfigError, match=message):
            settings_of_run(config, **given)
    assert settings_of_run(run).temperature == run.rollout.temperature  # None: the run's


def test_an_empty_task_or_model_name_is_not_replaced_by_a_default():
    from flowgrpo.trainer.reports.eval_run import EvalOptions, task_of
    from flowgrpo.trainer.reports.evaluate import ModelSpec

    assert task_of(None, "") == ("", "--task")  # the task loader names the empty spec
    assert task_of(None, None) == ("arithmetic", "the default")
    assert ModelSpec.of_run(None, model="").name_or_path == ""
    assert ModelSpec.of_run(None, dtype="").dtype == ""
    with pytest.raises(ValueError, match=r"eval\.n: expected an integer, got '5'"):
        EvalOptions(n="5")
