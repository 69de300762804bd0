"""In-memory snapshots of the trainable weights and optimizer state, for the collapse rollback.

Before each update the loop takes a :class:`Snapshot`; when the next rollout shows an
update → collapse (:mod:`.collapse`) and ``health.guard`` is ``rollback``, it restores
it and lowers the learning rate. Only parameters with ``requires_grad`` are copied (the LoRA
adapter: a few MB), plus a deep copy of the optimizer state (about twice that for AdamW).

NOT covered: frozen parameters and buffers (they do not change in an update), the random number
generators, gradient-accumulation buffers (restore between optimizer steps, with zeroed grads),
and anything on disk. Imports torch: only the training loop imports this module.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """Copies of the trainable parameters and of the optimizer state at one moment.

    Attributes:
        params: parameter name (as in ``model.named_parameters()``) -> detached clone.
        optimizer_state: a deep copy of ``optimizer.state_dict()`` (its tensors cloned).
        step: the training step it was taken before, when given (for logs).
    """

    params: dict[str, Any]
    optimizer_state: dict
    step: int | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the parameter copies (the optimizer state is not counted)."""
        return sum(t.numel() * t.element_size() for t in self.params.values())


def take_snapshot(model, optimizer, step: int | None = None) -> Snapshot:
    """Copy the trainable parameters of ``model`` and the state of ``optimizer`` into memory."""
    with torch.no_grad():
        params = {
            name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad
        }
    if not params:
        raise ValueError(
            "take_snapshot: the model has no parameter with requires_grad=True; attach the "
            "adapter (or unfreeze parameters) before training"
        )
    return Snapshot(params, copy.deepcopy(optimizer.state_dict()), step)


def restore_snapshot(
    model, optimizer, snapshot: Snapshot, lr_factor: float | None = None, scheduler=None
) -> None:
    """Put the parameters and optimizer state of ``snapshot`` back; optionally scale the lr.

    Args:
        model / optimizer: the objects the snapshot was taken from (same parameter names).
        snapshot: from :func:`take_snapshot`; it stays usable (its tensors are copied again).
        lr_factor: multiply every parameter group's learning rate by this (> 0) after
            restoring; None keeps the snapshot's learning rate.
        scheduler: a ``torch.optim.lr_scheduler`` driving ``optimizer``, if any: its
            ``base_lrs`` are scaled too, or the next ``scheduler.step()`` (e.g. LambdaLR)
            would undo the lowering. Its own step counter is not rewound.

    Gradients are zeroed (set to None): gradients of the offending update must not leak into
    the next one.
    """
    if lr_factor is not None and (isinstance(lr_factor, bool) or not lr_factor > 0):
        raise ValueError(f"lr_factor must be a number > 0 (or None), got {lr_factor!r}")
    current = {name: p for name, p in model.named_parameters() if p.requires_grad}
    missing = sorted(set(snapshot.params) - set(current))
    if missing:
        raise ValueError(
            f"restore_snapshot: the model has no trainable parameter(s) {missing[:3]} that the "
            "snapshot holds; restore into the model the snapshot was taken from"
        )
    with torch.no_grad():
        for name, saved in snapshot.params.items():
            current[name].copy_(saved)
            current[name].grad = None
    # load_state_dict keeps tensors that already match dtype/device as they are: copy first so
    # the next optimizer step does not write into the snapshot.
    optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer_state))
    optimizer.zero_grad(set_to_none=True)
    if lr_factor is not None:
        _scale_lr(optimizer, scheduler, float(lr_factor))
    logger.info(
        "restored %d parameter tensors and the optimizer state%s%s",
        len(snapshot.params),
        "" if snapshot.step is None else f" from before step {snapshot.step}",
        "" if lr_factor is None else f"; lr x {lr_factor:g}",
    )


def _scale_lr(optimizer, scheduler, factor: float) -> None:
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].mul_(factor)
        else:
            group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
