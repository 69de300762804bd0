"""The ``optim`` section: optimiser and schedule (:class:`OptimConfig`). Data only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from flowgrpo.configuration import check, check_types

__all__ = ["OptimConfig"]


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation.

    Attributes:
        lr: AdamW learning rate of the LoRA weights. warmup_steps: linear warmup.
        scheduler: constant or cosine (after warmup). weight_decay: AdamW decay.
        min_lr_rate: with ``cosine``, the floor the rate decays to, as a fraction of ``lr``
            (0: to zero; transformers' ``cosine_with_min_lr``, TRL's
            ``lr_scheduler_kwargs={"min_lr_rate": ...}``).
        max_steps: optimizer steps. max_grad_norm: clipping threshold (0 = off).
        seed: initialisation seed (identical on every rank).
        bf16: run the update's forward passes (policy, reference, scoring) under bfloat16
            autocast (mixed precision, Micikevicius et al. 2018, arXiv 1710.03740; TRL's
            ``bf16=True``) on bf16 copies of the frozen Linear weights, made once (on a CPU
            with eager attention): the model's weights, LoRA parameters, optimizer, log-probs
            and the loss stay float32. Faster only where the hardware has bf16 matrix units;
            sampling has its own switch (``rollout.sample_dtype``). Off by default: measured
            in two worlds of the study only (research/RECORD.md).
    """

    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    scheduler: Literal["constant", "cosine"] = "constant"
    min_lr_rate: float = 0.0
    max_steps: int = 30
    max_grad_norm: float = 1.0
    seed: int = 0
    bf16: bool = False

    def __post_init__(self):
        check_types(self, "optim.")
        check(self.lr > 0 and math.isfinite(self.lr), "optim.lr", "must be a positive number")
        check(
            math.isfinite(self.weight_decay) and self.weight_decay >= 0,
            "optim.weight_decay",
            "must be a number >= 0 (AdamW's decay; 0: none)",
        )
        check(self.warmup_steps >= 0, "optim.warmup_steps", "must be >= 0 (0: no warmup)")
        check(self.scheduler in ("constant", "cosine"), "optim.scheduler", "use constant or cosine")
        check(0 <= self.min_lr_rate <= 1, "optim.min_lr_rate", "must be a fraction of lr in [0, 1]")
        check(
            self.min_lr_rate == 0 or self.scheduler == "cosine",
            "optim.min_lr_rate",
            "is the floor of the cosine decay: set optim.scheduler=cosine, or leave it 0",
        )
        check(self.max_steps >= 1, "optim.max_steps", "must be >= 1")
        check(self.max_grad_norm >= 0, "optim.max_grad_norm", "must be >= 0 (0 disables)")
        check(isinstance(self.bf16, bool), "optim.bf16", "must be true or false")
