"""The ``executor:`` section: old flat ``rollout.executor*`` keys are read for one release (moved
to the section with a deprecation message naming both keys), and runs saved with them load."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from click.testing import CliRunner

from flowgrpo.operators.executor import ExecutorConfig
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import ConfigError, load_config, save_config, to_dict
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.policy import wrap_lora

#: The keys of releases before the section, written out by hand: old rollout key -> new key.
OLD_TO_NEW = {
    "executor": "kind",
    "executor_model": "model",
    "executor_base_url": "base_url",
    "executor_max_new_tokens": "max_new_tokens",
    "executor_timeout_s": "timeout_s",
    "executor_max_retries": "max_retries",
    "executor_backoff_s": "backoff_s",
    "executor_max_calls": "max_calls",
    "executor_max_seconds": "max_seconds",
    "simulation": "simulation",
}
OLD_VALUES = {
    "executor": "openai",
    "executor_model": "served-model",
    "executor_base_url": "http://localhost:9/v1",
    "executor_max_new_tokens": 77,
    "executor_timeout_s": 3.5,
    "executor_max_retries": 1,
    "executor_backoff_s": 0.25,
    "executor_max_calls": 5,
    "executor_max_seconds": 42.0,
    "simulation": {"seed": 9, "params": {"review_false_alarm": 0.05}},
}


def write(path, data):
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_every_old_key_in_a_file_moves_to_the_section_with_a_message(tmp_path, caplog):
    path = write(tmp_path / "old.yaml", {"rollout": dict(OLD_VALUES)})
    with caplog.at_level(logging.WARNING):
        cfg = load_config(path)
    e = cfg.executor
    assert (e.kind, e.model, e.max_new_tokens) == ("openai", "served-model", 77)
    assert e.base_url == "http://localhost:9/v1"
    assert (e.timeout_s, e.max_retries, e.backoff_s) == (3.5, 1, 0.25)
    assert (e.max_calls, e.max_seconds) == (5, 42.0)
    assert e.simulation.seed == 9 and e.simulation.params.review_false_alarm == 0.05
    for old, new in OLD_TO_NEW.items():
        line = next(r.getMessage() for r in caplog.records if f"rollout.{old} " in r.getMessage())
        assert "deprecated" in line and f"executor.{new}" in line and str(path) in line


def test_old_keys_in_set_overrides_move_too(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config(
            None,
            (
                "rollout.executor=simulated",
                "rollout.executor_max_calls=3",
                "rollout.simulation.params.revise_fix=0.3",
                "rollout.simulation.seed=4",
            ),
        )
    assert cfg.executor.kind == "simulated" and cfg.executor.max_calls == 3
    assert cfg.executor.simulation.params.revise_fix == (0.3, 0.3, 0.3)
    assert cfg.executor.simulation.seed == 4
    text = caplog.text
    assert "rollout.executor is deprecated" in text and "executor.kind" in text
    assert "rollout.simulation is deprecated" in text and "executor.simulation" in text


def test_an_old_set_key_overrides_the_files_new_key(tmp_path):
    path = write(tmp_path / "new.yaml", {"executor": {"kind": "openai", "max_calls": 9}})
    cfg = load_config(path, ("rollout.executor_max_calls=2",))
    assert cfg.executor.kind == "openai" and cfg.executor.max_calls == 2


def test_old_and_new_key_with_different_values_is_an_error(tmp_path):
    data = {"rollout": {"executor_max_calls": 3}, "executor": {"max_calls": 4}}
    with pytest.raises(ConfigError, match=r"rollout\.executor_max_calls.*executor\.max_calls"):
        load_config(write(tmp_path / "both.yaml", data))
    same = {"rollout": {"executor_max_calls": 4}, "executor": {"max_calls": 4}}
    assert load_config(write(tmp_path / "same.yaml", same)).executor.max_calls == 4


def test_old_and_new_set_keys_with_different_values_is_an_error():
    """In one command, ``--set`` with an old key and with its new key: different values are an
    error (either order); the same value, or an old key set twice, is not."""
    for pair in [
        ("rollout.executor_max_calls=3", "executor.max_calls=4"),
        ("executor.max_calls=4", "rollout.executor_max_calls=3"),
        ("rollout.simulation.seed=1", "executor.simulation.seed=2"),
    ]:
        with pytest.raises(ConfigError, match=r"--set rollout\..*deprecated.*--set executor\."):
            load_config(None, pair)
    same = load_config(None, ("rollout.executor_max_calls=4", "executor.max_calls=4"))
    assert same.executor.max_calls == 4
    twice = load_config(None, ("rollout.executor_max_calls=4", "rollout.executor_max_calls=5"))
    assert twice.executor.max_calls == 5


def test_the_saved_config_has_the_section_and_no_old_key(tmp_path):
    cfg = load_config(None, ("executor.kind=hf", "executor.timeout_s=7"))
    save_config(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["executor"]["kind"] == "hf" and saved["executor"]["timeout_s"] == 7
    assert not set(OLD_TO_NEW) & set(saved["rollout"])
    assert load_config(tmp_path / "config.yaml") == cfg


def test_section_fields_are_checked_naming_the_field():
    for override, field in [
        ("executor.timeout_s=0", "executor.timeout_s"),
        ("executor.max_retries=-1", "executor.max_retries"),
        ("executor.max_calls=0", "executor.max_calls"),
        ("executor.kind=''", "executor.kind"),
        ("executor.timeot_s=1", "did you mean 'timeout_s'"),
    ]:
        with pytest.raises(ConfigError, match=field):
            load_config(None, (override,))
    assert ExecutorConfig().kind == "shared"  # the policy's own weights, as before


def old_run(run_dir):
    """A checkpoint whose config.yaml was written before the section: flat rollout keys (the
    simulated executor, programs always right, 3 calls per workflow)."""
    cfg = load_config(
        "configs/tiny-known-optimum.yaml",
        (f"logging.output_dir={run_dir}", "executor.max_calls=3",
         "executor.simulation.params.programmer_correct=1.0",
         "executor.simulation.params.programmer_crash=0.0"),
    )  # fmt: skip
    data = to_dict(cfg)
    section = data.pop("executor")
    data["rollout"].update({old: section[new] for old, new in OLD_TO_NEW.items()})
    run_dir.mkdir(parents=True)
    write(run_dir / "config.yaml", data)
    checkpoint = run_dir / "checkpoint-1"
    wrap_lora(build_tiny_model(seed=cfg.optim.seed)[0], cfg.lora).save_pretrained(
        checkpoint / "adapter"
    )
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    return checkpoint


@pytest.mark.slow
def test_eval_of_a_run_saved_with_the_old_keys(tmp_path):
    checkpoint = old_run(tmp_path / "run")
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(
        main,
        ["eval", "--adapter", str(checkpoint), "--task", "arithmetic", "--n", "1",
         "--max-new-tokens", "8", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["settings"]["executor"].startswith("simulated:seed=0")
    assert data["settings"]["executor_limits"]["max_llm_calls"] == 3
    assert data["sim/best_expected_accuracy"] == 1.0  # the old rollout.simulation was read


@pytest.mark.parametrize(("kind", "warned"), [("shared", True), ("simulated", False)])
def test_executions_warn_when_the_executor_cannot_answer_repeats_differently(caplog, kind, warned):
    model, tok = build_tiny_model(seed=0)
    cfg = load_config(None, (f"executor.kind={kind}", "rollout.executions=4"))
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.loop.setup"):
        llm, _ = setup.executor(cfg, model, tok)
    assert llm is not None
    assert ("decodes greedily: the repeats are identical" in caplog.text) is warned
