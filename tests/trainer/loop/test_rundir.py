"""Run-directory details below the CLI: checkpoint folders follow the umask (mkdtemp's 0700
would hide them from the group)."""

import os
import stat

import pytest

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import LoraSettings
from flowgrpo.trainer.loop.checkpoint import save_checkpoint
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.loop.rundir import existing_run


@pytest.mark.parametrize("umask, mode", [(0o027, 0o750), (0o022, 0o755)])
def test_checkpoint_folders_follow_the_umask(tmp_path, umask, mode):
    model = wrap_lora(build_tiny_model()[0], LoraSettings(r=2, alpha=4))
    previous = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path, 1, model, _NoOptimizer(), None, {}, keep=2)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert stat.S_IMODE((path / "adapter").stat().st_mode) == mode
    weights = path / "adapter" / "adapter_model.safetensors"  # safetensors writes it 0600
    assert stat.S_IMODE(weights.stat().st_mode) == mode & 0o666
    assert stat.S_IMODE((path / "trainer_state.pt").stat().st_mode) == mode & 0o666
    assert existing_run(tmp_path) == ["checkpoint-1"]


def test_pruning_a_checkpoint_is_logged(tmp_path, caplog):
    model = wrap_lora(build_tiny_model()[0], LoraSettings(r=2, alpha=4))
    with caplog.at_level("INFO", logger="flowgrpo.trainer.loop.checkpoint"):
        for step in (1, 2, 3):
            save_checkpoint(tmp_path, step, model, _NoOptimizer(), None, {}, keep=2)
    assert "deleted checkpoint-1: logging.keep_checkpoints keeps the last 2" in caplog.text
    assert existing_run(tmp_path) == ["checkpoint-2", "checkpoint-3"]


def test_saving_a_step_again_keeps_a_whole_copy_and_clears_a_prune_cut_short(tmp_path):
    model = wrap_lora(build_tiny_model()[0], LoraSettings(r=2, alpha=4))
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, _NoOptimizer(), None, {}, keep=2)
    (tmp_path / "checkpoint-1" / "trainer_state.pt").unlink()  # a prune killed part-way
    # a finished run saving its last step again: renamed aside, never deleted first
    path = save_checkpoint(tmp_path, 2, model, _NoOptimizer(), None, {}, keep=2)
    assert (path / "trainer_state.pt").is_file()
    assert (path / "adapter" / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


class _NoOptimizer:
    def state_dict(self):
        return {}
