"""Building the pieces a run needs from its config (policy, optimizer, executor, cache...).

Every function turns a bad setting into a clear error naming the field.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from transformers import get_scheduler

from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.executor import build_executor, executor_limits
from flowgrpo.operators.models import bf16_emulated, load_model, with_pad_token
from flowgrpo.trainer.loop.init_adapter import load_init_adapter
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.monitoring.metrics import MetricsWriter
from flowgrpo.trainer.monitoring.trackers import accelerator_kwargs, start_trackers

logger = logging.getLogger(__name__)


def policy(cfg, model=None, tokenizer=None, device=None):
    """(LoRA-wrapped policy on ``device``, tokenizer): the given model, or ``model`` loaded.

    Loaded with :func:`~flowgrpo.operators.models.load_model`, the executor's loader too
    (tiny-random weights seeded by ``optim.seed``).
    """

    set_seed(cfg.optim.seed)  # identical LoRA initialisation on every rank
    m = cfg.model
    if model is None:
        model, tokenizer = load_model(  # random:<shape> models are built on the device
            m.name_or_path, gguf_file=m.gguf_file, dtype=m.dtype, seed=cfg.optim.seed,
            device=device if device is not None else "cpu",
        )  # fmt: skip
    if tokenizer is None:
        raise ValueError("a model was passed without its tokenizer")
    if m.init_adapter:  # model.init_adapter: start from a saved adapter (its shape checked)
        peft_model = load_init_adapter(model, m.init_adapter, cfg.lora, m.gradient_checkpointing)
    else:
        peft_model = wrap_lora(model, cfg.lora, m.gradient_checkpointing)
    tokenizer = with_pad_token(tokenizer)  # a tokenizer passed in may have none
    if device is not None:
        peft_model.to(device)
    peft_model.train()
    torch.manual_seed(cfg.rollout.seed)
    return peft_model, tokenizer


def warn_emulated_bf16(switches: dict[str, bool], device) -> list[str]:
    """Log a warning naming each bf16 switch that is on (``switches``: field -> on) when
    ``device`` has no bf16 matrix units (:func:`~flowgrpo.operators.models.bf16_emulated`):
    the switch still works, at a cost instead of a saving. Returns the fields warned about."""
    on = [field for field, value in switches.items() if value]
    if on and bf16_emulated(str(device)):
        logger.warning(
            "%s: this CPU has no bf16 matrix instructions (AVX512-BF16, AMX or ARM BF16), so "
            "bf16 is emulated and slower than float32 here (2.0x a rollout on an AVX2 CPU, "
            "docs/BENCHMARKS.md); turn %s off on this machine",
            ", ".join(on), "it" if len(on) == 1 else "them",
        )  # fmt: skip
        return on
    return []


def optimizer(cfg, model):
    """AdamW over the LoRA parameters and transformers' warmup + constant/cosine LR schedule.

    One scheduler step per optimizer step (``optim.max_steps * algorithm.num_iterations`` in
    all). The LR factor of optimizer step ``s``: ``s / warmup_steps`` while ``s < warmup_steps``
    (transformers' convention: step 0 of a warmup has LR 0), then 1 (constant) or
    ``m + (1 - m) * 0.5 * (1 + cos(pi * (s - warmup) / (total - warmup)))`` (cosine, ``m`` =
    ``optim.min_lr_rate``, 0 by default).
    """

    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay)
    total = o.max_steps * cfg.algorithm.num_iterations
    return opt, lr_schedule(opt, o.scheduler, o.warmup_steps, total, o.min_lr_rate)


def lr_schedule(opt, scheduler: str, warmup_steps: int, total_steps: int, min_lr_rate=0.0):
    """transformers' warmup + ``constant`` or ``cosine`` schedule over ``total_steps`` optimizer
    steps (the RL update's and ``flowgrpo sft``'s: one name means one curve). The cosine is
    transformers' ``cosine_with_min_lr``: it decays to ``min_lr_rate`` x the rate (0: the plain
    cosine, the same factors)."""
    cosine = scheduler == "cosine"
    return get_scheduler(
        "cosine_with_min_lr" if cosine else "constant_with_warmup",
        opt,
        num_warmup_steps=warmup_steps,
        num_training_steps=max(total_steps, 1),
        scheduler_specific_kwargs={"min_lr_rate": min_lr_rate} if cosine else None,
    )


def executor(cfg, model, tokenizer, given=None):
    """(executor backend, interpreter limits) of the ``executor`` section, built by
    :func:`~flowgrpo.operators.executor.build_executor` (``shared`` runs on ``model``, the
    policy, with its adapter disabled). ``given``: use this backend instead; none is built
    either when ``rollout.execute`` is off (the limits are still the section's)."""

    if given is not None or not cfg.rollout.execute:
        return given, executor_limits(cfg.executor)
    llm, limits = build_executor(cfg.executor, model, tokenizer)
    if cfg.rollout.executions > 1 and not getattr(llm, "repeats_differ", False):
        # a greedy executor returns the first run's answer on every repeat
        logger.warning(
            "rollout.executions = %d but executor %r decodes greedily: the repeats are "
            "identical (extra calls, no extra information); sample the executor "
            "(executor.temperature > 0) or use executions: 1",
            cfg.rollout.executions, cfg.executor.kind,
        )  # fmt: skip
    return llm, limits


def cache(cfg, run_dir: Path):

    path = cfg.rollout.cache_path
    return ExecutionCache(run_dir / path if path else None, cfg.rollout.cache_max_entries)


def accelerator(cfg, run_dir: Path) -> Accelerator:
    """The run's Accelerator, with the trackers of ``logging.report_to`` (each checked to be
    installed first: a missing one is a ConfigError naming its extra)."""

    return Accelerator(**accelerator_kwargs(cfg.logging, run_dir))


def end_process_group() -> None:
    """Destroy the distributed process group of a run under ``accelerate launch`` (nothing
    otherwise), once the process is done training: a process that exits with Gloo's worker
    threads still alive can abort during interpreter shutdown (SIGABRT, "terminate called
    without an active exception"; pytorch/pytorch#190489), failing a run that finished."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def warn_hot_unconstrained(cfg) -> bool:
    """Log a warning when ``rollout.tie_temperature`` resamples tied steps hot while sampling
    is unconstrained (a hot unconstrained sample is often prose, which ties again). Returns
    whether it warned."""
    r = cfg.rollout
    if r.tie_temperature is None or r.constrained != "off":
        return False
    logger.warning(
        "rollout.tie_temperature resamples tied steps at %.2f (up to %.2f) while "
        "rollout.constrained is off: hot samples write more prose; set rollout.constrained: "
        "grammar, or a tie_temperature near rollout.temperature",
        r.tie_temperature, r.max_tie_temperature,
    )  # fmt: skip
    return True


def writer(cfg, run_dir: Path, accelerator: Accelerator, resume: bool = False):
    """The metrics writer on the main process (None elsewhere), feeding the started trackers."""

    if not accelerator.is_main_process:
        return None
    return MetricsWriter(run_dir, start_trackers(accelerator, cfg, run_dir, resume))
