"""Config of the SIMULATED executor (``executor.kind: simulated`` and its ``executor.options``,
read and checked by the plugin) and of model.init_adapter."""

import pytest

from flowgrpo.operators.simulation.settings import simulation_settings
from flowgrpo.trainer.config import (
    ConfigError,
    TrainConfig,
    from_dict,
    load_config,
    save_config,
    to_dict,
)
from flowgrpo.trainer.loop.environment import build_environment


def test_defaults():
    cfg = TrainConfig()
    assert cfg.executor.options == {}
    sim = simulation_settings(cfg.executor)  # what the plugin reads from no options
    assert sim.seed == 0 and sim.sandbox == "process"
    assert sim.params.review_false_alarm == 0.10  # the documented default
    assert cfg.model.init_adapter is None


def test_simulated_executor_with_params_in_any_per_difficulty_form():
    cfg = load_config(
        None,
        (
            "executor.kind=simulated",
            "executor.options.seed=7",
            "executor.options.params.review_false_alarm=0.05",
            "executor.options.params.programmer_correct=[0.9, 0.8, 0.6]",
            "executor.options.params.custom_correct={easy: 0.7, medium: 0.6, hard: 0.5}",
        ),
    )
    sim = simulation_settings(cfg.executor)
    assert cfg.executor.kind == "simulated" and sim.seed == 7
    assert sim.params.review_false_alarm == 0.05
    assert sim.params.programmer_correct == (0.9, 0.8, 0.6)
    assert sim.params.custom_correct == (0.7, 0.6, 0.5)
    assert sim.params.review_detect == (0.70, 0.60, 0.50)  # untouched fields keep defaults


def test_simulation_section_round_trips_through_the_saved_config(tmp_path):
    cfg = load_config(
        "configs/tiny-known-optimum.yaml",
        ("executor.options.params.revise_fix=0.3", "model.init_adapter=some/adapter"),
    )
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg
    saved = to_dict(cfg)["executor"]["options"]["params"]
    assert saved == {"revise_fix": 0.3}  # as written; the plugin reads it the same way again
    assert simulation_settings(cfg.executor).params.revise_fix == (0.3, 0.3, 0.3)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("executor.options.params.revew_detect=0.5", "did you mean 'review_detect'"),
        ("executor.options.params.review_detect=1.5", "executor.options.params"),
        ("executor.options.params.latent_shares=[0.5, 0.2, 0.2]", "sum to 1"),
        ("executor.options.sed=1", "did you mean 'seed'"),
        ("executor.options.seed=abc", "executor.options.seed: expected an integer"),
        ("executor.options.sandbox=docker", "executor.options.sandbox: use process"),
        ("executor.kind=simulatd", "executor.kind: .*simulated"),
        ("model.init_adapter=''", "model.init_adapter"),
    ],
)
def test_bad_simulation_settings_name_the_field_and_the_fix(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):  # or when built
        cfg = load_config(None, ("executor.kind=simulated", override))
        build_environment(cfg, with_executor=False)


def test_code_tasks_cannot_use_the_simulated_executor():
    code = load_config(None, ("executor.kind=simulated", "rollout.task=mbpp:data.jsonl"))
    with pytest.raises(ConfigError, match="math problems only"):  # before any problem loads
        build_environment(code, with_executor=False)
    math = load_config(None, ("executor.kind=simulated", "rollout.task=arithmetic:easy"))
    assert build_environment(math, with_executor=False).problems  # math: fine


def test_known_optimum_configs_use_the_simulated_executor():
    for name in ("configs/known-optimum.yaml", "configs/tiny-known-optimum.yaml"):
        cfg = load_config(name)
        assert cfg.executor.kind == "simulated"
        # 16 completions per step (the study's 2 x 8, then 4 x 4: issue 20 in RESULTS.md)
        assert cfg.rollout.problems_per_step * cfg.rollout.num_generations == 16
        assert cfg.rollout.num_generations >= 4
        assert cfg.rewards.weights["accuracy"] == max(cfg.rewards.weights.values())
    start = load_config("configs/known-optimum.yaml").model.init_adapter
    assert start == "runs/format-sft-full/adapter"
    assert load_config("configs/tiny-known-optimum.yaml").model.init_adapter is None
