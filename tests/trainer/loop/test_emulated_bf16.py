"""A bf16 switch on a CPU without bf16 matrix units is warned about, naming the field; on a CPU
with them, on a GPU, or where torch cannot tell, nothing is said."""

import logging

import pytest
import torch

from flowgrpo.operators import models
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.trainer import Trainer

AVX2_ONLY = {"avx2": True, "avx512_f": False, "avx512_bf16": False, "amx_bf16": False}


def _cpu(monkeypatch, **features):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {**AVX2_ONLY, **features})


def test_an_avx2_only_cpu_emulates_bf16(monkeypatch):
    _cpu(monkeypatch)
    assert models.bf16_emulated("cpu") is True


@pytest.mark.parametrize("feature", ["avx512_bf16", "amx_bf16", "bf16"])
def test_a_cpu_with_any_bf16_unit_does_not(monkeypatch, feature):
    _cpu(monkeypatch, **{feature: True})
    assert models.bf16_emulated("cpu") is False


def test_a_gpu_is_never_called_emulated(monkeypatch):
    _cpu(monkeypatch)
    assert models.bf16_emulated("cuda:0") is False


def test_a_torch_that_cannot_tell_is_not_called_emulated(monkeypatch):
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    assert models.bf16_emulated("cpu") is False


def test_the_warning_names_only_the_switches_that_are_on(monkeypatch, caplog):
    _cpu(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        warned = setup.warn_emulated_bf16({"optim.bf16": True, "sft.bf16": False}, "cpu")
    assert warned == ["optim.bf16"]
    (record,) = caplog.records
    assert "optim.bf16" in record.getMessage() and "sft.bf16" not in record.getMessage()
    assert "turn it off" in record.getMessage()


def test_no_switch_on_no_warning(monkeypatch, caplog):
    _cpu(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        assert setup.warn_emulated_bf16({"optim.bf16": False}, "cpu") == []
    assert not caplog.records


def test_a_cpu_with_bf16_units_gets_no_warning(monkeypatch, caplog):
    _cpu(monkeypatch, amx_bf16=True)
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        assert setup.warn_emulated_bf16({"optim.bf16": True}, "cpu") == []
    assert not caplog.records


def test_the_trainer_warns_about_both_rl_switches_on_such_a_cpu(tmp_path, monkeypatch, caplog):
    _cpu(monkeypatch)
    sets = (f"logging.output_dir={tmp_path / 'run'}", "optim.max_steps=1", "optim.bf16=true",
            "rollout.sample_dtype=bfloat16")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        Trainer(load_config("configs/tiny.yaml", sets), executor=ScriptedBackend(lambda r: "5"))
    (message,) = [r.getMessage() for r in caplog.records if "bf16 is emulated" in r.getMessage()]
    assert "rollout.sample_dtype=bfloat16, optim.bf16" in message and "turn them off" in message


def test_flowgrpo_sft_warns_about_sft_bf16_on_such_a_cpu(monkeypatch, caplog):
    from flowgrpo.trainer.loop.sft import prepare_sft

    _cpu(monkeypatch)
    cfg = load_config(
        "configs/tiny-known-optimum.yaml",
        ("sft.bf16=true", "sft.examples=4", "rollout.max_new_tokens=120"),
    )
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        prepare_sft(cfg)
    (message,) = [r.getMessage() for r in caplog.records if "bf16 is emulated" in r.getMessage()]
    assert message.startswith("sft.bf16:")
