"""sim/* metrics: means of the simulation's exact regret and accuracy over completions."""

import math

import pytest

from flowgrpo.operators.backends.simulated import (
    SIM_KEYS,
    RegretSettings,
    regret_settings,
    simulation_metrics,
)
from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import SimulationParams, analyze, best_workflow, regret
from flowgrpo.trainer.config import load_config

LIMITS = Limits(max_llm_calls=12)


def test_not_simulated_gives_every_key_as_none():
    assert simulation_metrics(["Custom"], ["easy"], None) == dict.fromkeys(SIM_KEYS)
    cfg = load_config(None)
    assert regret_settings(cfg, executor_limits(cfg.executor)) is None


def test_means_of_exact_regret_accuracy_and_best_over_completions():
    params = SimulationParams()
    settings = RegretSettings(params, LIMITS)
    best_easy = best_workflow(params, "easy", limits=LIMITS)
    workflows = [best_easy.workflow, "Custom", None, "Programmer -> Review ? Revise : done"]
    levels = ["easy", "medium", "hard", None]  # None: the default difficulty (medium)
    out = simulation_metrics(workflows, levels, settings)
    expected_regret = [
        regret(w, params, d, limits=LIMITS).regret for w, d in zip(workflows, levels)
    ]
    own = [
        0.0 if w is None else analyze(w, params, d, LIMITS).accuracy
        for w, d in zip(workflows, levels)
    ]
    best = [best_workflow(params, d, limits=LIMITS).stats.accuracy for d in levels]
    assert out["sim/regret"] == pytest.approx(sum(expected_regret) / 4)
    assert out["sim/expected_accuracy"] == pytest.approx(sum(own) / 4)
    assert out["sim/best_expected_accuracy"] == pytest.approx(sum(best) / 4)
    assert out["sim/best_share"] == 0.25
    valid = [r for r, w in zip(expected_regret, workflows) if w is not None]
    assert out["sim/valid_regret"] == pytest.approx(sum(valid) / 3)
    assert simulation_metrics([None], ["easy"], settings)["sim/valid_regret"] is None
    # a fallback's regret is the whole best reward; the best workflow's is 0
    assert expected_regret[0] == 0.0 and expected_regret[2] == pytest.approx(best[2])
    assert (
        out["sim/regret"] > 0 and out["sim/expected_accuracy"] < out["sim/best_expected_accuracy"]
    )


def test_the_call_budget_changes_the_best_workflow():
    params = SimulationParams()
    tight = simulation_metrics([None], ["medium"], RegretSettings(params, Limits(max_llm_calls=2)))
    loose = simulation_metrics([None], ["medium"], RegretSettings(params, LIMITS))
    assert tight["sim/best_expected_accuracy"] < loose["sim/best_expected_accuracy"]


def test_settings_follow_the_reward_weights_and_the_run_budget():
    cfg = load_config(
        "configs/tiny-known-optimum.yaml",
        ("rewards.weights.cost=0.5", "executor.max_calls=6",
         "executor.options.params.review_detect=0.9"),
    )  # fmt: skip
    s = regret_settings(cfg, executor_limits(cfg.executor))
    assert (s.tradeoff.accuracy_weight, s.tradeoff.cost_weight) == (1.0, 0.5)
    assert s.limits.max_llm_calls == 6 and s.params.review_detect == (0.9, 0.9, 0.9)
    # with a cost weight the best is cheaper than the accuracy-only best
    cheap = simulation_metrics([None], ["medium"], s)
    accurate = simulation_metrics([None], ["medium"], RegretSettings(s.params, s.limits))
    assert cheap["sim/best_expected_accuracy"] < accurate["sim/best_expected_accuracy"]


def test_validity_only_runs_measure_regret_in_accuracy():
    cfg = load_config("configs/tiny-known-optimum.yaml", ("rewards.weights:={validity: 1.0}",))
    s = regret_settings(cfg, executor_limits(cfg.executor))
    assert (s.tradeoff.accuracy_weight, s.tradeoff.cost_weight) == (1.0, 0.0)
    out = simulation_metrics(["Custom"], ["easy"], s)
    assert math.isclose(out["sim/best_expected_accuracy"] - out["sim/expected_accuracy"],
                        out["sim/regret"])  # fmt: skip
