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
    assert existing_run(tmp_path) == ["checkpoint-1"]


class _NoOptimizer:
    def state_dict(self):
        return {}
