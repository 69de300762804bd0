"""The ``executor:`` section: its fields checked naming the field; ``options`` are a plugin
kind's own settings, checked by that plugin when the run is built."""

from __future__ import annotations

import logging

import pytest
import yaml

from flowgrpo.operators.backends import BACKENDS, register_backend
from flowgrpo.operators.executor import ExecutorConfig, check_executor
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import ConfigError, load_config, save_config
from flowgrpo.trainer.loop import setup


def write(path, data):
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_options_of_a_built_in_kind_are_refused_at_load():
    with pytest.raises(ConfigError, match=r"executor\.options: kind hf takes no options"):
        load_config(None, ("executor.kind=hf", "executor.options.seed=1"))
    with pytest.raises(ConfigError, match=r"executor\.options: expected a mapping"):
        load_config(None, ("executor.kind=simulated", "executor.options=3"))


def test_a_plugin_kind_without_a_check_takes_no_options():
    def make(**kwargs):  # a user's backend that registered no check of options
        raise AssertionError("not built by a check")

    register_backend("no_options_kind", make)
    try:
        section = ExecutorConfig(kind="no_options_kind", options={"seed": 1})
        with pytest.raises(ValueError, match=r"executor\.options: .*registered no check"):
            check_executor(section)
        assert check_executor(ExecutorConfig(kind="no_options_kind")) == ("no_options_kind",)
    finally:
        BACKENDS.unregister("no_options_kind")


def test_a_plugin_kinds_check_sees_the_options_and_the_task():
    seen = []
    register_backend("checked_kind", lambda **kw: None, check=lambda s, t: seen.append((s, t)))
    try:
        section = ExecutorConfig(kind="checked_kind", options={"depth": 2})
        check_executor(section, "arithmetic:easy")
        assert seen == [(section, "arithmetic:easy")]
    finally:
        BACKENDS.unregister("checked_kind")


def test_a_backend_built_only_in_python_is_refused_as_a_kind_before_anything_runs():
    # scripted takes a table of answers: once a TypeError from deep inside the build
    with pytest.raises(ValueError, match=r"executor\.kind: the 'scripted' backend cannot be built"):
        check_executor(ExecutorConfig(kind="scripted"))
    register_backend("url_only_kind", lambda base_url: None)  # takes no max_new_tokens
    try:
        with pytest.raises(ValueError, match="unexpected keyword argument 'max_new_tokens'"):
            check_executor(ExecutorConfig(kind="url_only_kind", base_url="http://x"))
    finally:
        BACKENDS.unregister("url_only_kind")


def test_the_saved_config_has_the_section(tmp_path):
    cfg = load_config(None, ("executor.kind=hf", "executor.timeout_s=7"))
    save_config(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["executor"]["kind"] == "hf" and saved["executor"]["timeout_s"] == 7
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


def test_sampling_fields_are_checked_naming_the_field():
    for override, field in [
        ("executor.temperature=-0.1", r"executor\.temperature: must be a number >= 0"),
        ("executor.seed=-1", r"executor\.seed: must be an integer >= 0"),
        ("executor.seed=1.5", r"executor\.seed: expected an integer"),
    ]:
        with pytest.raises(ConfigError, match=field):
            load_config(None, ("executor.kind=hf", override))
    with pytest.raises(ConfigError, match=r"executor\.temperature: kind simulated is a plugin"):
        load_config(None, ("executor.kind=simulated", "executor.temperature=0.5"))
    with pytest.raises(ConfigError, match=r"executor\.seed: kind simulated is a plugin"):
        load_config(None, ("executor.kind=simulated", "executor.seed=2"))


def test_the_sampling_fields_reach_the_backends(monkeypatch):
    from flowgrpo.operators.backends.openai_http import OpenAIBackend
    from flowgrpo.operators.executor import build_executor

    model, tok = build_tiny_model(seed=0)
    section = ExecutorConfig(kind="shared", temperature=0.6, seed=9)
    llm, _ = build_executor(section, model, tok)
    assert (llm.temperature, llm.seed, llm.repeats_differ) == (0.6, 9, True)
    section = ExecutorConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m",
                             temperature=0.6, seed=9)  # fmt: skip
    llm, _ = build_executor(section)
    assert isinstance(llm, OpenAIBackend) and (llm.temperature, llm.seed) == (0.6, 9)


@pytest.mark.parametrize(("kind", "warned"), [("shared", True), ("simulated", False)])
def test_executions_warn_when_the_executor_cannot_answer_repeats_differently(caplog, kind, warned):
    model, tok = build_tiny_model(seed=0)
    cfg = load_config(None, (f"executor.kind={kind}", "rollout.executions=4"))
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.loop.setup"):
        llm, _ = setup.executor(cfg, model, tok)
    assert llm is not None
    assert ("decodes greedily: the repeats are identical" in caplog.text) is warned


def test_executions_do_not_warn_when_the_executor_samples(caplog):
    model, tok = build_tiny_model(seed=0)
    overrides = ("executor.kind=shared", "executor.temperature=0.7", "rollout.executions=4")
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.loop.setup"):
        setup.executor(load_config(None, overrides), model, tok)
    assert "decodes greedily" not in caplog.text
