"""The ``sft`` section of the training configuration (:class:`SFTConfig`), part of
:class:`flowgrpo.trainer.config.TrainConfig` (re-exported there). Data only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from flowgrpo.configuration import check, check_types

__all__ = ["SFTConfig"]


@dataclass(frozen=True)
class SFTConfig:
    """Format SFT (``flowgrpo sft``): a LoRA adapter taught to write the DSL by plain
    cross-entropy on its completion tokens, to start RL from (``model.init_adapter``), as
    TRL's SFTTrainer / verl's SFT stage precede RL. The model, lora, task, prompt, temperature
    and max_new_tokens are the run's own sections, so the adapter fits the run.

    Attributes:
        data: ``grammar`` (workflows drawn from the run's operator table, stratified so that no
            workflow dominates: ``dsl.generate.stratified_workflow``, one per training problem)
            or ``jsonl:PATH`` (your pairs: one ``{"question", "workflow"[, "domain", "meta"]}``
            object per line, the question rendered with the run's prompt; ``meta`` holds the
            labels its ``prompt.meta_keys`` show).
        examples: training problems drawn for ``grammar`` (pairs longer than
            ``rollout.max_new_tokens`` are dropped).
        batch_size: pairs per optimizer step. lr: AdamW learning rate. max_steps: at most.
        scheduler / warmup_steps: the learning-rate schedule over ``max_steps``, as
            ``optim.scheduler`` / ``optim.warmup_steps``: ``constant`` (after a linear warmup
            of ``warmup_steps``) or ``cosine`` (decays to 0 at ``max_steps``; a validity stop
            ends the run where it is). TRL's SFTTrainer decays by default (linear).
        micro_batch_size: pairs per forward and backward pass (null: the whole batch), as
            TRL's per-device batch under gradient accumulation; the update is the same (the
            batch's gradient is accumulated exactly), a smaller one holds fewer activations at
            a time: less peak memory for a little speed.
        bf16: run the loss's forward passes under bfloat16 autocast (mixed precision, as TRL's
            ``bf16=True``): weights, LoRA parameters and the optimizer stay float32; the
            held-out checks sample in float32 whatever it says. Faster only where the hardware
            has bf16 matrix units (scripts/bench_sft_precision.py measures it side by side).
        eval_every / eval_from: held-out validity is measured every ``eval_every`` steps from
            step ``eval_from`` (and at the last step; the fresh adapter, step 0, only when
            ``eval_from`` is 0); each check samples ``eval_problems`` validation problems x
            ``eval_k`` at the rollout temperature.
        target_validity: stop once held-out validity reaches it (null: run max_steps). The
            default 0.45 leaves the RL room to learn the format (the known-optimum start).
        seed: draws, batch order and sampling.
    """

    data: str = "grammar"
    examples: int = 400
    batch_size: int = 8
    micro_batch_size: int | None = None
    bf16: bool = False
    lr: float = 5e-4
    scheduler: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = 0
    max_steps: int = 40
    eval_every: int = 2
    eval_from: int = 10
    eval_problems: int = 16
    eval_k: int = 4
    target_validity: float | None = 0.45
    seed: int = 0

    def __post_init__(self):
        check_types(self, "sft.")
        check(
            self.data == "grammar" or str(self.data).startswith("jsonl:"),
            "sft.data",
            "use grammar or jsonl:PATH (one {question, workflow} object per line)",
        )
        for name in ("examples", "batch_size", "max_steps", "eval_every", "eval_problems",
                     "eval_k"):  # fmt: skip
            check(getattr(self, name) >= 1, f"sft.{name}", "must be >= 1")
        check(
            self.micro_batch_size is None or self.micro_batch_size >= 1,
            "sft.micro_batch_size",
            "must be >= 1, or null for the whole batch",
        )
        check(isinstance(self.bf16, bool), "sft.bf16", "must be true or false")
        check(self.eval_from >= 0, "sft.eval_from", "must be >= 0")
        check(self.scheduler in ("constant", "cosine"), "sft.scheduler", "use constant or cosine")
        check(self.warmup_steps >= 0, "sft.warmup_steps", "must be >= 0")
        check(self.lr > 0 and math.isfinite(self.lr), "sft.lr", "must be a positive number")
        check(
            self.target_validity is None or 0 < self.target_validity <= 1,
            "sft.target_validity",
            "must be in (0, 1], or null to run max_steps",
        )
