"""The ``optim`` section: optimiser and schedule (:class:`OptimConfig`). Data only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from flowgrpo.configuration import check

__all__ = ["OptimConfig"]


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation.

    Attributes:
        lr: AdamW learning rate of the LoRA weights. warmup_steps: linear warmup.
        scheduler: constant or cosine (after warmup). weight_decay: AdamW decay.
        max_steps: optimizer steps. max_grad_norm: clipping threshold (0 = off).
        seed: initialisation seed (identical on every rank).
    """

    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    scheduler: Literal["constant", "cosine"] = "constant"
    max_steps: int = 30
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check(self.lr > 0 and math.isfinite(self.lr), "optim.lr", "must be a positive number")
        check(self.scheduler in ("constant", "cosine"), "optim.scheduler", "use constant or cosine")
        check(self.max_steps >= 1, "optim.max_steps", "must be >= 1")
        check(self.max_grad_norm >= 0, "optim.max_grad_norm", "must be >= 0 (0 disables)")
