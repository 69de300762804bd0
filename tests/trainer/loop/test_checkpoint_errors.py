"""A checkpoint that cannot be written: an error naming it, and the previous one still loads.

As root, a read-only directory does not stop writes, so the failure is made two ways: the
write raises ``OSError(ENOSPC)`` (monkeypatched, always), and a real full disk (a 2 MiB tmpfs
filled up; skipped where mounting is not permitted).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import pytest
import torch
from peft import get_peft_model_state_dict
from safetensors.torch import load_file
from trainer_fakes import FREE, mixed, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.checkpoint import CheckpointError, load_checkpoint
from flowgrpo.trainer.loop.rundir import latest_checkpoint, list_checkpoints
from flowgrpo.trainer.loop.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on 2 busy cores two threads spin against each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def config(run_dir, *extra):
    return load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={run_dir}",
            "logging.save_every=1",
            "optim.max_steps=3",
            FREE,
            *extra,
        ),
    )


def trainer_for(run_dir, monkeypatch, resume=False):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    executor = ScriptedBackend(lambda request: "5")
    return Trainer(config(run_dir), resume=resume, executor=executor)


def fail_on_call(monkeypatch, model, n: int, error: OSError) -> None:
    """The n-th ``save_pretrained`` of ``model`` (1-based) raises ``error``."""
    original, calls = model.save_pretrained, []

    def save_pretrained(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == n:
            raise error
        return original(path, *args, **kwargs)

    monkeypatch.setattr(model, "save_pretrained", save_pretrained)


def assert_previous_checkpoint_loads(run_dir, monkeypatch, step: int) -> None:
    """checkpoint-{step} is the latest, loads into a fresh trainer, and a resume finishes."""
    path = latest_checkpoint(run_dir)
    assert path == run_dir / f"checkpoint-{step}"
    assert not list(run_dir.glob(".checkpoint-*")), "the failed save left its temporary folder"
    saved = load_file(str(path / "adapter" / "adapter_model.safetensors"))
    fresh = trainer_for(run_dir.parent / "fresh", monkeypatch)
    before = {k: v.clone() for k, v in get_peft_model_state_dict(fresh.model).items()}
    state = load_checkpoint(path, fresh.model, fresh.optimizer, fresh.scheduler)
    assert state["step"] == step
    after = get_peft_model_state_dict(fresh.model)
    assert set(after) == set(saved) and all(torch.equal(after[k], saved[k]) for k in saved)
    assert any(not torch.equal(before[k], saved[k]) for k in saved), "step 1 trained nothing"
    resumed = trainer_for(run_dir, monkeypatch, resume=True)
    assert resumed.step == step
    assert resumed.train().steps == 3
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def test_no_space_left_is_an_error_naming_the_checkpoint(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    trainer = trainer_for(run_dir, monkeypatch)
    no_space = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    fail_on_call(monkeypatch, trainer.model, 2, no_space)  # the save of step 2
    with pytest.raises(CheckpointError) as info:
        trainer.train()
    message = str(info.value)
    assert str(run_dir / "checkpoint-2") in message and "No space left on device" in message
    assert f"previous checkpoint {run_dir / 'checkpoint-1'} is intact" in message
    assert "--resume" in message and info.value.path == run_dir / "checkpoint-2"
    assert [s for s, _ in list_checkpoints(run_dir)] == [1]
    assert_previous_checkpoint_loads(run_dir, monkeypatch, 1)


def test_a_missing_run_directory_is_an_error_naming_the_checkpoint(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    trainer = trainer_for(run_dir, monkeypatch)
    trainer.writer.close()
    trainer.writer = None
    shutil.rmtree(run_dir)  # e.g. the volume went away: the temporary folder cannot be made
    with pytest.raises(
        CheckpointError,
        match=f"could not write checkpoint {run_dir}/checkpoint-0: FileNotFoundError",
    ):
        trainer._save()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs (real ENOSPC once full), unmounted afterwards; skipped if not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def fill(directory) -> None:
    """Write zeros into ``directory/filler`` until the file system is full."""
    with open(directory / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_really_full_disk_keeps_the_previous_checkpoint(tiny_disk, monkeypatch):
    run_dir = tiny_disk / "run"
    trainer = trainer_for(run_dir, monkeypatch)
    # the disk fills up during step 2, after its metrics line, before its checkpoint
    trainer.on_step = lambda metrics: fill(tiny_disk) if metrics["step"] == 2 else None
    with pytest.raises(CheckpointError) as info:
        trainer.train()
    assert str(run_dir / "checkpoint-2") in str(info.value)
    assert "No space left on device" in str(info.value) or "write" in str(info.value)
    (tiny_disk / "filler").unlink()
    assert_previous_checkpoint_loads(run_dir, monkeypatch, 1)


def test_a_metrics_line_that_cannot_be_written_names_the_file_and_the_run_resumes(
    tmp_path, monkeypatch
):
    from flowgrpo.trainer.monitoring.metrics import RunFileError

    run_dir = tmp_path / "run"
    trainer = trainer_for(run_dir, monkeypatch)
    handle, writes = trainer.writer.metrics, []

    class Full:  # the metrics file refuses the line of step 2
        name = handle.name

        def write(self, text):
            writes.append(text)
            if len(writes) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return handle.write(text)

        def flush(self):
            handle.flush()

        def close(self):
            handle.close()

    trainer.writer.metrics = Full()
    with pytest.raises(RunFileError) as info:
        trainer.train()
    message = str(info.value)
    assert str(run_dir / "metrics.jsonl") in message and "No space left on device" in message
    assert "--resume" in message and info.value.path == run_dir / "metrics.jsonl"
    assert_previous_checkpoint_loads(run_dir, monkeypatch, 1)


def test_a_really_full_disk_while_writing_the_metrics_keeps_the_run_resumable(
    tiny_disk, monkeypatch
):
    from flowgrpo.trainer.monitoring.metrics import RunFileError

    run_dir = tiny_disk / "run"
    trainer = trainer_for(run_dir, monkeypatch)
    rollout, calls = step_mod.generate_rollout, []

    def filling(*args, **kwargs):  # the disk fills up while step 2 samples
        calls.append(1)
        if len(calls) == 2:
            fill(tiny_disk)
        return rollout(*args, **kwargs)

    monkeypatch.setattr(step_mod, "generate_rollout", filling)
    with pytest.raises(RunFileError) as info:
        trainer.train()
    assert str(run_dir) in str(info.value) and "--resume" in str(info.value)
    (tiny_disk / "filler").unlink()
    assert_previous_checkpoint_loads(run_dir, monkeypatch, 1)


def test_a_damaged_trainer_state_names_the_file(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    trainer_for(run_dir, monkeypatch).train()
    path = latest_checkpoint(run_dir)
    (path / "trainer_state.pt").write_bytes(b"\x00not a torch file")
    fresh = trainer_for(tmp_path / "fresh", monkeypatch)
    with pytest.raises(CheckpointError, match=r"trainer_state\.pt does not load .*damaged"):
        load_checkpoint(path, fresh.model, fresh.optimizer, fresh.scheduler)


def test_a_checkpoint_that_lost_its_weights_is_passed_over_for_the_one_before(tmp_path):
    # a delete of an old checkpoint-N cut short (a kill while a finished run re-saves it) once
    # made every --resume fail on it, the whole checkpoint before it untried
    from safetensors.torch import save_file

    for step in (3, 4):
        adapter = tmp_path / f"checkpoint-{step}" / "adapter"
        adapter.mkdir(parents=True)
        save_file({"x": torch.zeros(1)}, adapter / "adapter_model.safetensors")
        (adapter.parent / "trainer_state.pt").write_bytes(b"")
    assert latest_checkpoint(tmp_path).name == "checkpoint-4"
    (tmp_path / "checkpoint-4" / "adapter" / "adapter_model.safetensors").unlink()
    assert latest_checkpoint(tmp_path).name == "checkpoint-3"
