"""Run-directory details below the CLI: checkpoint folders follow the umask (mkdtemp's 0700
would hide them from the group); what a run folder holds is read without torch."""

import json
import os
import stat
import subprocess
import sys

import pytest

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import LoraSettings
from flowgrpo.trainer.loop.checkpoint import save_checkpoint
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.loop.rundir import (
    adapter_folder,
    checkpoint_folders,
    clear_run,
    existing_run,
    latest_checkpoint,
    list_checkpoints,
)


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


def _checkpoint(run_dir, name, state=True, weights=True):
    """A checkpoint folder laid out by hand (what a save writes, without saving)."""
    folder = run_dir / name
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    if weights:
        (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"w")
    if state:
        (folder / "trainer_state.pt").write_bytes(b"s")
    return folder


def test_the_listing_takes_whole_checkpoints_in_step_order(tmp_path):
    for step in (2, 10, 9):
        _checkpoint(tmp_path, f"checkpoint-{step}")
    _checkpoint(tmp_path, "checkpoint-11", weights=False)  # a delete cut short
    _checkpoint(tmp_path, "checkpoint-12", state=False)
    _checkpoint(tmp_path, ".checkpoint-13.abc_1xyz")  # a save in progress (mkdtemp)
    _checkpoint(tmp_path, "checkpoint-1-backup")  # the user's
    (tmp_path / "checkpoint-notes.txt").write_text("mine")
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 9, 10]  # 10 after 9, not 1
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    assert [p.name for p in checkpoint_folders(tmp_path)] == [
        ".checkpoint-13.abc_1xyz", "checkpoint-10", "checkpoint-11", "checkpoint-12",
        "checkpoint-2", "checkpoint-9",
    ]  # fmt: skip
    assert latest_checkpoint(tmp_path / "absent") is None


def test_an_adapter_is_found_in_its_folder_or_a_checkpoints(tmp_path):
    checkpoint = _checkpoint(tmp_path, "checkpoint-3")
    assert adapter_folder(checkpoint) == checkpoint / "adapter"
    assert adapter_folder(checkpoint / "adapter") == checkpoint / "adapter"
    assert adapter_folder(tmp_path) is None


def test_reading_a_run_folder_imports_no_torch():
    # `flowgrpo eval --all` and the reports list checkpoints; a listing is reading folders
    code = (
        "import sys, flowgrpo.trainer.loop.rundir\n"
        "print(sorted(m for m in ('torch', 'peft', 'safetensors') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _NoOptimizer:
    def state_dict(self):
        return {}


# ------------------------------------------------------- overwrite deletes only what runs wrote


def _old_run(run_dir):
    """A finished run's folder: its marker owns the run's names; checkpoints 1 and 2 saved."""
    run_dir.mkdir(exist_ok=True)
    (run_dir / "flowgrpo-run.json").write_text(
        json.dumps({"flowgrpo_run": 1, "owned": ["metrics.jsonl", "plots", "tensorboard"]})
    )
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    for step in (1, 2):
        _checkpoint(run_dir, f"checkpoint-{step}")
    return run_dir


def test_overwrite_keeps_a_users_file_in_the_runs_plots_folder(tmp_path, write_png):
    run = _old_run(tmp_path / "run")
    (run / "plots").mkdir()
    write_png(run / "plots" / "reward.png", b"flowgrpo\0plot")  # the report's
    (run / "plots" / "notes.txt").write_text("mine")
    clear_run(run)
    assert sorted(p.name for p in (run / "plots").iterdir()) == ["notes.txt"]


def test_overwrite_keeps_a_users_png_of_a_plots_name(tmp_path, write_png):
    run = _old_run(tmp_path / "run")
    (run / "plots").mkdir()
    write_png(run / "plots" / "reward.png", b"flowgrpo\0plot")  # the report's
    write_png(run / "plots" / "entropy.png", b"Software\0my own script")  # the user's
    clear_run(run)
    assert sorted(p.name for p in (run / "plots").iterdir()) == ["entropy.png"]


def test_overwrite_deletes_the_trackers_event_files_and_their_emptied_folders(tmp_path):
    run = _old_run(tmp_path / "run")
    (run / "tensorboard" / "flowgrpo").mkdir(parents=True)
    (run / "tensorboard" / "flowgrpo" / "events.out.tfevents.1.host").write_bytes(b"e")
    assert "tensorboard" in clear_run(run)
    assert not (run / "tensorboard").exists()


def test_overwrite_keeps_a_users_files_in_a_folder_named_like_a_checkpoint(tmp_path):
    run = _old_run(tmp_path / "run")
    (run / "checkpoint-99").mkdir()
    (run / "checkpoint-99" / "my_adapter.bin").write_bytes(b"mine")
    (run / "checkpoint-2" / "eval.json").write_text("{}")  # an eval written beside a save
    removed = clear_run(run)
    assert "checkpoint-1" in removed and not (run / "checkpoint-1").exists()
    assert (run / "checkpoint-99" / "my_adapter.bin").read_bytes() == b"mine"
    assert sorted(p.name for p in (run / "checkpoint-2").iterdir()) == ["eval.json"]


def test_a_folder_of_the_users_that_looks_like_a_save_in_progress_is_not_one(tmp_path):
    run = _old_run(tmp_path / "run")
    (run / ".checkpoint-5.mine").mkdir()
    (run / ".checkpoint-5.mine" / "x").write_text("mine")
    (run / ".checkpoint-5.k3j_9x2a").mkdir()  # what mkdtemp names a save cut short
    clear_run(run)
    assert (run / ".checkpoint-5.mine" / "x").is_file()
    assert not (run / ".checkpoint-5.k3j_9x2a").exists()


def test_pruning_keeps_a_users_file_in_an_old_checkpoint(tmp_path):
    model = wrap_lora(build_tiny_model()[0], LoraSettings(r=2, alpha=4))
    save_checkpoint(tmp_path, 1, model, _NoOptimizer(), None, {}, keep=1)
    (tmp_path / "checkpoint-1" / "notes.txt").write_text("mine")
    save_checkpoint(tmp_path, 2, model, _NoOptimizer(), None, {}, keep=1)
    assert sorted(p.name for p in (tmp_path / "checkpoint-1").iterdir()) == ["notes.txt"]
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2]
