"""Config: defaults, YAML + --set, unknown keys and bad values name the field and the fix."""

from pathlib import Path

import pytest

from flowgrpo.trainer.config import (
    ConfigError,
    TrainConfig,
    from_dict,
    load_config,
    save_config,
    to_dict,
)
from flowgrpo.trainer.loop.environment import build_environment


def test_defaults_are_the_documented_cpu_default():
    cfg = TrainConfig()
    assert cfg.model.name_or_path == "default"
    assert cfg.rollout.num_generations == 8
    assert cfg.algorithm.advantage == "dr_grpo"
    assert cfg.algorithm.loss.epsilon_high == 0.28 and cfg.algorithm.loss.beta == 0.0
    assert cfg.rollout.dynamic_sampling
    assert cfg.health.guard == "rollback"


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rollout:\n  num_generations: 16\n  task: arithmetic:easy\n")
    cfg = load_config(
        path, ("optim.lr=3e-5", "rollout.max_new_tokens=64", "lora.target_modules=[q_proj, v_proj]")
    )
    assert cfg.rollout.num_generations == 16 and cfg.rollout.task == "arithmetic:easy"
    assert cfg.optim.lr == 3e-5
    assert cfg.lora.target_modules == ("q_proj", "v_proj")
    assert cfg.algorithm.loss.max_new_tokens == 64, "Dr. GRPO normaliser follows max_new_tokens"


def test_resolved_config_round_trips_through_yaml(tmp_path):
    cfg = load_config(None, ("rewards.weights.diversity=0.2", "health.guard=warn"))
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.num_gens=8", "did you mean 'num_generations'"),
        ("rollout.num_generations=1", "at least 2 samples"),
        ("rollout.num_generations=2", "37 of 38 updates"),
        ("rollout.num_generations=abc", "expected an integer"),
        ("rollout.temperature=0", "greedy sampling makes every group identical"),
        ("algorithm.advantage=ppo", "choose one of"),
        ("optim.scheduler=linear", "choose one of constant, cosine"),
        ("model.dtype=int8", "model.dtype"),
        ("rewards.weights.bogus=1", "bogus"),
        ("health.guard=maybe", "guard"),
        ("nonsense=1", "unknown key nonsense"),
        ("rollout.num_generations", "section.key=value"),
        ("rollout.cache_max_entries=0", "rollout.cache_max_entries: must be an integer >= 1"),
        ("rollout.executions=0", "rollout.executions: must be an integer >= 1"),
        ("logging.save_every=-1", "logging.save_every: got -1"),  # once: every step
        ("logging.keep_checkpoints=-2", "logging.keep_checkpoints: got -2"),  # once: keep all
        ("logging.samples_per_step=-5", "logging.samples_per_step: got -5"),
        ("lora.alpha=0", "lora.alpha: must be >= 1"),  # scale 0: the adapter learns nothing
        ("lora.alpha=-32", "lora.alpha: must be >= 1"),
        ("optim.warmup_steps=-5", "optim.warmup_steps: must be >= 0"),
        ("optim.weight_decay=.nan", "optim.weight_decay: must be a number >= 0"),
        ("optim.weight_decay=-1", "optim.weight_decay: must be a number >= 0"),
        ("rollout.temperature=.inf", "rollout.temperature: must be a finite number"),
        ("rollout.train_size=0", "rollout.train_size: must be >= 1"),
    ],
)
def test_bad_values_name_the_field_and_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):  # registry names: when the run is built
        build_environment(load_config(None, (override,)), with_executor=False)


def test_small_groups_are_allowed_only_on_request():
    cfg = load_config(None, ("rollout.num_generations=2", "rollout.allow_small_groups=true"))
    assert cfg.rollout.num_generations == 2


def test_missing_or_broken_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_shipped_configs_load():
    from pathlib import Path

    for path in sorted(Path(__file__).parents[2].joinpath("configs").glob("*.yaml")):
        assert isinstance(load_config(path), TrainConfig), path


def test_setting_one_key_of_a_section_keeps_the_parents_other_defaults():
    """TrainConfig's health default uses guard=rollback; setting health.stop_on must not reset
    it to HealthConfig's own default."""
    cfg = load_config(None, ("health.stop_on=[deadlock]",))
    assert cfg.health.guard == "rollback" and cfg.health.stop_on == ("deadlock",)


def test_the_execution_cache_keeps_at_most_cache_max_entries(tmp_path):
    from flowgrpo.operators.state import ExecutionResult
    from flowgrpo.trainer.loop import setup

    cfg = load_config(None, ("rollout.cache_max_entries=2",))
    cache = setup.cache(cfg, tmp_path)
    for i in range(3):
        cache.put((f"w{i}", "p", "s", "l"), ExecutionResult(answer=str(i), correct=True, score=1.0))
    assert len(cache) == 2 and cache.get(("w0", "p", "s", "l")) is None  # the oldest went
    assert cache.get(("w2", "p", "s", "l")).answer == "2"


def _section(name: str):
    from flowgrpo.trainer.config import algorithm, model, optim, rollout

    modules = {"AlgorithmConfig": algorithm, "LoraSettings": model, "ModelConfig": model,
               "OptimConfig": optim, "RolloutConfig": rollout}  # fmt: skip
    return TrainConfig if name == "TrainConfig" else getattr(modules[name], name)


@pytest.mark.parametrize(
    ("section", "kwargs", "message"),
    [
        ("OptimConfig", {"max_steps": 2.5}, r"optim\.max_steps: expected an integer"),
        ("RolloutConfig", {"execute": "no"}, r"rollout\.execute: expected true or false"),
        ("ModelConfig", {"gradient_checkpointing": "false"}, r"model\.gradient_checkpointing: "),
        ("LoraSettings", {"target_modules": "q_proj"}, r"lora\.target_modules: expected a list"),
        ("ModelConfig", {"name_or_path": None}, r"model\.name_or_path: expected a string"),
        ("OptimConfig", {"lr": [1e-4]}, r"optim\.lr: expected a number"),
        ("AlgorithmConfig", {"loss": {"beta": 0.1}}, r"algorithm\.loss: expected an instance"),
        ("TrainConfig", {"optim": {"lr": 1}}, r"^optim: expected an instance of OptimConfig"),
    ],
)
def test_a_section_built_in_python_is_held_to_the_yaml_types(section, kwargs, message):
    """Built directly (``flowgrpo.train(TrainConfig(...))``, ``check_run``), a section is
    refused as the same value in a YAML file is: not used, not a TypeError from a comparison."""
    with pytest.raises(ConfigError, match=message):
        _section(section)(**kwargs)


def test_a_section_built_in_python_takes_numbers_paths_and_lists_not_yamls_repairs():
    """YAML 1.1's repairs (text read for a number, False for the word off) are for YAML: in
    Python the text is refused, not converted; numpy numbers and paths are what they are."""
    import numpy as np

    optim, lora = _section("OptimConfig"), _section("LoraSettings")
    with pytest.raises(ConfigError, match=r"optim\.lr: expected a number, got '3e-5'"):
        optim(lr="3e-5")
    from flowgrpo.trainer.config.logs import LoggingConfig

    with pytest.raises(ConfigError, match=r"logging\.run_name: expected a string, got False"):
        LoggingConfig(run_name=False)  # was: a tracker run named "off"
    assert lora(target_modules=["q_proj"]).target_modules == ("q_proj",)
    steps = optim(max_steps=np.int64(3), lr=np.float32(0.5))
    assert (steps.max_steps, type(steps.max_steps), steps.lr) == (3, int, 0.5)
    assert _section("ModelConfig")(name_or_path=Path("my_model")).name_or_path == "my_model"
    assert TrainConfig(optim=optim(max_steps=3)).optim.max_steps == 3
    assert load_config(None, ("optim.lr=3e-5",)).optim.lr == 3e-5  # from YAML: repaired


def test_a_changed_budget_derives_the_values_that_follow_it_again(tmp_path):
    """The cost normaliser follows executor.max_calls and Dr. GRPO's normaliser follows
    rollout.max_new_tokens, also when a built config (or a run's saved config.yaml) is given
    another budget; a normaliser set apart from its budget stays as set."""
    from flowgrpo.api import _config

    changed = _config(TrainConfig(), {"executor__max_calls": 4, "rollout__max_new_tokens": 64})
    assert changed.rewards.options.cost_max_calls == 4
    assert changed.algorithm.loss.max_new_tokens == 64
    save_config(TrainConfig(), tmp_path / "config.yaml")
    read = load_config(tmp_path / "config.yaml", ("executor.max_calls=4",))
    assert read.rewards.options.cost_max_calls == 4
    apart = load_config(None, ("rewards.options.cost_max_calls=20",))
    assert _config(apart, {"executor__max_calls": 4}).rewards.options.cost_max_calls == 20


def test_the_resolved_values_keep_what_config_yaml_writes_null(tmp_path):
    cfg = load_config(None, ("executor.max_calls=7", "rollout.max_new_tokens=33"))
    resolved = cfg.resolved()
    assert resolved["rewards"]["options"]["cost_max_calls"] == 7
    assert resolved["algorithm"]["loss"]["max_new_tokens"] == 33
    written = to_dict(cfg)
    assert written["rewards"]["options"]["cost_max_calls"] is None
    assert written["algorithm"]["loss"]["max_new_tokens"] is None
    assert {k: v for k, v in resolved.items() if k not in ("rewards", "algorithm")} == {
        k: v for k, v in written.items() if k not in ("rewards", "algorithm")
    }
