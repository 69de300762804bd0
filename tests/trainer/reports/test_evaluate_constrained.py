"""Evaluation samples as the run trained: ``rollout.constrained: grammar`` reaches the eval."""

import pytest

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.reports.eval_run import EvalOptions, EvalSession
from flowgrpo.trainer.reports.evaluate import EvalSettings, evaluate, settings_of_run


def _validity(constrained: str) -> float:
    model, tok = build_tiny_model(seed=1)
    settings = EvalSettings(n=3, k=16, temperature=1.0, max_new_tokens=48, execute=False,
                            constrained=constrained)  # fmt: skip
    return evaluate(model, tok, settings, executor=None)["validity_rate"]


def test_a_constrained_eval_writes_valid_workflows_where_the_free_one_does_not():
    free, constrained = _validity("off"), _validity("grammar")
    assert free <= 0.05  # a random tiny model almost never writes the DSL by itself
    # the end game finishes every sample inside the token and call budgets
    assert constrained == 1.0


def test_settings_of_a_run_take_its_constrained_mode_unless_given():
    run = load_config(None, ("rollout.constrained=grammar",))
    assert settings_of_run(run).constrained == "grammar"
    assert settings_of_run(run, constrained="off").constrained == "off"
    assert settings_of_run(None).constrained == "off"


def test_eval_options_override_the_runs_mode():
    run = load_config(None, ("rollout.constrained=grammar",))
    assert EvalSession(run, EvalOptions()).settings.constrained == "grammar"
    assert EvalSession(run, EvalOptions(constrained="off")).settings.constrained == "off"


def test_an_unknown_mode_names_the_field():
    with pytest.raises(ValueError, match=r"eval\.constrained"):
        EvalSettings(constrained="regex")


def test_settings_of_a_run_take_its_packed_weights_switch():
    run = load_config(None, ("rollout.packed_weights=false",))
    assert settings_of_run(run).packed_weights is False
    assert settings_of_run(None).packed_weights is True
    assert settings_of_run(run, packed_weights=True).packed_weights is True
