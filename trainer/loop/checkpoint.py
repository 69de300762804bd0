"""Checkpoints: adapter, optimizer, scheduler, RNG states, step and trainer history.

Written atomically: everything goes into a temporary directory next to the final one, which is
renamed into place only when complete (``os.replace`` on the same file system), so a ``kill -9``
at any moment leaves the last good checkpoint usable. A save that fails (no space left, a
read-only or vanished directory, any write error) raises :class:`CheckpointError` naming the
checkpoint's path; its temporary directory is removed and earlier checkpoints stay as they were
(pruning happens only after a successful save). ``checkpoint-N/adapter`` loads with
``PeftModel.from_pretrained(base_model, path)``.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from peft import set_peft_model_state_dict
from safetensors.torch import load_file

from flowgrpo.trainer.loop.rundir import (
    ADAPTER_DIR,
    ADAPTER_WEIGHTS,
    CHECKPOINT_NAME,
    CHECKPOINT_TEMP,
    STATE_FILE,
    checkpoint_folders,
    latest_checkpoint,
    list_checkpoints,
    remove_checkpoint,
)

logger = logging.getLogger(__name__)


class CheckpointError(OSError):
    """A checkpoint could not be written; the message names it, the cause and the checkpoint
    a ``--resume`` would use (``path``: the checkpoint that was being written)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def rng_state() -> dict:

    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    run_dir: str | Path, step: int, model, optimizer, scheduler, trainer_state: dict, keep: int = 2
) -> Path:
    """Write ``run_dir/checkpoint-{step}`` atomically and prune old ones; returns its path."""

    run_dir = Path(run_dir)
    final = run_dir / f"checkpoint-{step}"
    tmp = _temp_dir(run_dir, step, final)
    os.chmod(tmp, _folder_mode())  # mkdtemp makes 0700; a checkpoint follows the umask
    try:
        # the trained adapter only (a frozen reference copy, if loaded, is the start's)
        model.save_pretrained(tmp / ADAPTER_DIR, selected_adapters=[model.active_adapter])
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng_state(),
                "step": step,
                "trainer": trainer_state,
            },
            tmp / STATE_FILE,
        )
        follow_umask(tmp)
        _fsync_dir(tmp)
        _swap_in(tmp, final)
        _fsync_dir(run_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception):  # not KeyboardInterrupt / a second stop signal
            raise _save_error(final, exc) from exc
        raise
    _prune(run_dir, keep)
    logger.info("saved %s", final)
    return final


def _folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder under the process umask (0o755 under 022, 0o750
    under 027), so the group can read checkpoints as it can the rest of the run directory."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def follow_umask(folder: Path, only: str | None = None) -> None:
    """Give every file and folder under ``folder`` (under ``folder / only`` and that path
    itself, when given) the mode a new one gets under the umask (safetensors writes its files
    0600, as a private temporary file), so a group that reads the run directory reads
    checkpoints, adapters and exported models too."""
    folders = _folder_mode()
    top = Path(folder) if only is None else Path(folder) / only
    paths = top.rglob("*") if only is None else [top, *top.rglob("*")]
    for path in paths:
        if not path.is_symlink():
            os.chmod(path, folders if path.is_dir() else folders & 0o666)


def _temp_dir(run_dir: Path, step: int, final: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}.", dir=run_dir))
    except OSError as exc:
        raise _save_error(final, exc) from exc


def _save_error(final: Path, exc: Exception) -> CheckpointError:
    previous = latest_checkpoint(final.parent)
    kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint"
    return CheckpointError(
        f"could not write checkpoint {final}: {type(exc).__name__}: {exc}; {kept}. Free space "
        f"on that disk or make {final.parent} writable, then continue with --resume",
        final,
    )


def _fsync_dir(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; a ``final`` already there (a finished run saving its last
    step again) is renamed aside first and removed after, so a kill leaves a whole copy under
    one of the two names (deleting it first could leave a half-deleted ``checkpoint-N``)."""
    aside = final.with_name(f".{final.name}.old-{os.getpid()}")  # CHECKPOINT_TEMP: pruned if left
    if final.exists():
        os.replace(final, aside)
    try:
        os.replace(tmp, final)
    except BaseException:
        if aside.exists() and not final.exists():
            os.replace(aside, final)
        raise
    if aside.exists():
        remove_checkpoint(aside)


def _prune(run_dir: Path, keep: int) -> None:
    whole = list_checkpoints(run_dir)
    for _, path in whole[:-keep] if keep > 0 else []:
        if remove_checkpoint(path):
            logger.info("deleted %s: logging.keep_checkpoints keeps the last %d", path.name, keep)
    newest, kept = (whole[-1][0] if whole else -1), {path for _, path in whole}
    for stale in checkpoint_folders(run_dir):  # leftovers of a killed save or prune
        match = CHECKPOINT_NAME.match(stale.name)
        older_part = match is not None and stale not in kept and int(match.group(1)) < newest
        if CHECKPOINT_TEMP.match(stale.name) or older_part:
            remove_checkpoint(stale)


def load_checkpoint(path: str | Path, model, optimizer, scheduler) -> dict:
    """Load adapter weights, optimizer, scheduler and RNG states; returns the trainer state."""

    path = Path(path)
    adapter_file = path / ADAPTER_DIR / ADAPTER_WEIGHTS
    if not adapter_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {adapter_file.name})")
    state_file = path / STATE_FILE
    try:
        weights = load_file(str(adapter_file))
    except Exception as exc:  # safetensors raises its own error types
        raise _unreadable(adapter_file, exc) from None
    try:
        state = torch.load(state_file, weights_only=False)
        step, trainer = state["step"], state["trainer"]
    except Exception as exc:  # unpickling, zip and key errors alike
        raise _unreadable(state_file, exc) from None
    set_peft_model_state_dict(model, weights)
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    return {"step": step, **trainer}


def _unreadable(file: Path, exc: Exception) -> CheckpointError:
    """The error of a checkpoint file that does not load: it names the file and what to do."""
    checkpoint = file.parent.parent if file.parent.name == ADAPTER_DIR else file.parent
    return CheckpointError(
        f"{file} does not load ({type(exc).__name__}: {str(exc)[:200]}): the checkpoint is "
        f"damaged; delete {checkpoint} to resume from the one before it, or start again",
        checkpoint,
    )
