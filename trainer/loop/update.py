"""One policy update: μ optimizer steps over per-group micro-batches, with batch semantics.

Each group (K completions of one prompt) is one micro-batch: its log-probs come from
:func:`..algorithms.logprobs.group_logprobs` (prompt computed once, logits at the sampling
temperature), its loss from THE objective :func:`..algorithms.objective.policy_objective`.
Everything that depends on the whole batch is computed before the backward passes:

* the aggregation's denominator over all groups and all processes (``BatchStats.agg_count``),
  so the accumulated gradient equals the gradient of the loss of the whole step's batch
  (tested group-by-group vs whole-batch for every loss x aggregation);
* token selections acting on a share of the batch (Clip-Cov, KL-Cov, top-entropy mask), from a
  no-grad scoring pass over the whole batch before each optimizer step (only for those losses).

Under several processes every rank's loss is already divided by the global denominator, so the
LoRA gradients are all-reduced with a SUM; metrics are token-weighted means over all
micro-batches and processes. With μ > 1 (``num_iterations``) the log-probs of the sampling
policy are stored before the first step and used as ``old_logp`` (PPO ratio); metrics are those
of the last of the μ steps. Non-finite losses or gradients skip the optimizer step.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from flowgrpo.trainer.algorithms.completion_loss import bf16_autocast
from flowgrpo.trainer.algorithms.logprobs import group_logprobs, prompt_prefix
from flowgrpo.trainer.algorithms.losses import POLICY_LOSSES, LossConfig
from flowgrpo.trainer.algorithms.objective import (
    BatchStats,
    batch_stats,
    needs_token_pass,
    policy_objective,
    train_mask,
)
from flowgrpo.trainer.loop.constrain import unpack_allowed
from flowgrpo.trainer.loop.policy import (
    adapter_disabled,
    attention_as,
    frozen_linear_weights,
    parameters_from,
)
from flowgrpo.trainer.loop.rollout import Rollout

logger = logging.getLogger(__name__)

#: Token-weighted metrics of the objective, averaged over micro-batches and processes.
TOKEN_METRICS = (
    "entropy",
    "kl",
    "clip_ratio/low",
    "clip_ratio/high",
    "ratio_mean",
    "frac_pg_tokens",
    "seq_ratio_mean",
    "clip_cov/frac_selected",
    "kl_cov/frac_selected",
    "kl_cov/abs_kl_mean",
)
#: Every key :func:`policy_update` returns (None where not computed on this step).
UPDATE_KEYS = (
    "loss",
    "loss/policy",
    "grad_norm",
    "lr",
    "cov_logp_adv",
    "sampler_logp_gap",
    "optimizer_steps",
    "nonfinite_skips",
    *TOKEN_METRICS,
)


@dataclass(frozen=True)
class UpdateSettings:
    """How to update: the loss, μ, how to score, the sampling temperature, clipping, world.

    Attributes:
        loss: the objective's settings. num_iterations: μ, optimizer steps per rollout.
        logprob_mode: ``shared_prompt`` or ``full`` (see ``group_logprobs``).
        temperature: the rollout's sampling temperature (log-probs are taken at it).
        max_grad_norm: clipping threshold (0 = off). world_size: number of processes.
        reference_values: the KL reference's adapter (``algorithm.reference: start``: the
            start's values of the trainable parameters, by name); None: the base weights.
        bf16: the forward passes run under bfloat16 autocast (``optim.bf16``); log-probs,
            loss and gradients' accumulation stay float32.
        bf16_weights: bf16 copies of the frozen Linear weights (``policy.frozen_linear_weights``,
            made once by the trainer: the base never changes); None: cast at each update.
    """

    loss: LossConfig
    num_iterations: int = 1
    logprob_mode: str = "shared_prompt"
    temperature: float = 1.0
    max_grad_norm: float = 1.0
    world_size: int = 1
    reference_values: dict | None = None
    bf16: bool = False
    bf16_weights: dict | None = None


@dataclass(frozen=True)
class UpdateBatch:
    """What an update trains on: the rollout rows kept for training and their advantages [N].

    K is the rollout's ``group_size`` (the one source); ``adv_N`` must have one value per row.
    """

    rollout: Rollout
    adv_N: torch.Tensor

    def __post_init__(self):
        rows = len(self.rollout.problems) * self.rollout.group_size
        if tuple(self.adv_N.shape) != (rows,) or self.rollout.completion_ids_NT.shape[0] != rows:
            raise ValueError(
                f"update batch: {len(self.rollout.problems)} groups of K="
                f"{self.rollout.group_size} are {rows} rows, but adv_N has shape "
                f"{tuple(self.adv_N.shape)} and the rollout "
                f"{self.rollout.completion_ids_NT.shape[0]} rows"
            )


def _rows(rollout: Rollout, g: int) -> slice:
    k = rollout.group_size
    return slice(g * k, (g + 1) * k)


def _allowed(model, rollout: Rollout, rows: slice):
    """The grammar mask of ``rows`` (bool [K, T, V]; None for an unconstrained rollout)."""
    if rollout.allowed_bits_NTW is None:
        return None
    return unpack_allowed(rollout.allowed_bits_NTW[rows], model.config.vocab_size)


@contextlib.contextmanager
def _bf16_mode(model, settings: UpdateSettings):
    """``optim.bf16``: forward and backward on bf16 copies of the frozen Linear weights (so
    autocast does not cast them at every layer) and, on a CPU, with eager attention: there the
    fused attention's bf16 backward took 2.6x its float32 time, eager's bf16 matrix products
    less (one-off profile, docs/BENCHMARKS.md). A no-op with ``bf16`` off."""
    if not settings.bf16:
        yield
        return
    weights = settings.bf16_weights
    if weights is None:
        weights = frozen_linear_weights(model, torch.bfloat16)
    on_cpu = next(model.parameters()).device.type == "cpu"
    with parameters_from(model, weights), attention_as(model, "eager" if on_cpu else None):
        yield


def _batch_prefix(model, rollout: Rollout, settings: UpdateSettings):
    """The prompts' shared prefix, run once for every group (``shared_prompt`` mode only)."""
    if settings.logprob_mode != "shared_prompt":
        return None
    return prompt_prefix(model, rollout.prompt_ids)


def _score_groups(model, rollout: Rollout, settings: UpdateSettings, reference: bool = False):
    """(logp_NT, entropy_NT) of every row without gradients (old / reference / selection)."""
    logp, entropy = [], []
    ctx = _reference(model, settings) if reference else contextlib.nullcontext()
    with torch.no_grad(), ctx, _bf16_mode(model, settings), bf16_autocast(model, settings.bf16):
        prefix = _batch_prefix(model, rollout, settings)
        for g, prompt in enumerate(rollout.prompt_ids):
            rows = _rows(rollout, g)
            lp, ent = group_logprobs(
                model, prompt, rollout.completion_ids_NT[rows], rollout.mask_NT[rows],
                settings.logprob_mode, settings.temperature, _allowed(model, rollout, rows),
                prefix,
            )  # fmt: skip
            logp.append(lp.cpu())
            entropy.append(ent.cpu())
    return torch.cat(logp), torch.cat(entropy)


def _reference(model, settings: UpdateSettings):
    """The KL's reference: the start's adapter (``algorithm.reference: start``), or the base
    weights with the adapter off (TRL's GRPOTrainer with PEFT)."""
    if settings.reference_values is not None:
        return parameters_from(model, settings.reference_values)
    return adapter_disabled(model)


def _global_sum(values: list[float], world_size: int) -> list[float]:
    if world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def _step_stats(model, batch: UpdateBatch | None, settings: UpdateSettings, old_NT) -> BatchStats:
    """The whole step's :class:`BatchStats` (counts summed over processes)."""
    cfg = settings.loss
    if batch is None:  # this rank trains on nothing; it still joins the sums
        local = BatchStats(0.0, 0.0)
    else:
        r = batch.rollout
        logp = entropy = None
        if needs_token_pass(cfg):
            logp, entropy = _score_groups(model, r, settings)
        old = old_NT if old_NT is not None else logp
        local = batch_stats(
            logp, old, batch.adv_N, r.mask_NT, cfg, entropy_NT=entropy, truncated_N=r.truncated_N
        )
    count, tokens = _global_sum([local.agg_count, local.n_tokens], settings.world_size)
    return BatchStats(count, tokens, local.select_NT, local.pg_mask_NT)


def _backward_groups(model, batch, settings, stats, old_NT, ref_NT) -> dict:
    """Backward of every group's share of the loss; returns summed (not yet global) numbers."""
    sums = {"loss": 0.0, "loss/policy": 0.0, "cov": [0.0, 0.0, 0.0, 0.0], "gap": [0.0, 0.0]}
    if batch is None:
        return sums
    r, cfg = batch.rollout, settings.loss
    device = next(model.parameters()).device
    with bf16_autocast(model, settings.bf16):  # its gradient is sent back after the last group
        prefix = _batch_prefix(model, r, settings)
    for g, prompt in enumerate(r.prompt_ids):
        rows = _rows(r, g)
        mask_KT = r.mask_NT[rows].to(device)
        with bf16_autocast(model, settings.bf16):
            logp_KT, entropy_KT = group_logprobs(
                model, prompt, r.completion_ids_NT[rows], mask_KT, settings.logprob_mode,
                settings.temperature, _allowed(model, r, rows), prefix,
            )  # fmt: skip
        adv_K = batch.adv_N[rows].to(device)
        old_KT = old_NT[rows].to(device) if old_NT is not None else logp_KT.detach()
        _add_gap_sums(sums["gap"], old_KT, r.sampler_logp_NT, rows, mask_KT)
        total, metrics = policy_objective(
            logp_KT,
            old_KT,
            adv_K,
            mask_KT,
            cfg,
            ref_logp_NT=None if ref_NT is None else ref_NT[rows].to(device),
            entropy_NT=entropy_KT,
            truncated_N=r.truncated_N[rows].to(device),
            batch=stats.rows(rows.start, rows.stop),
        )
        total.backward()
        sums["loss"] += metrics["loss/total"]
        sums["loss/policy"] += metrics["loss/policy"]
        for key in _token_metrics(cfg):
            if key in metrics:
                sums.setdefault(key, 0.0)
                sums[key] += metrics[key] * metrics["n_tokens"]
        _add_cov_sums(
            sums["cov"],
            logp_KT.detach(),
            adv_K,
            train_mask(mask_KT, r.truncated_N[rows].to(device), cfg),
        )
    if prefix is not None:
        prefix.backward()
    return sums


def _add_cov_sums(acc: list[float], logp_KT, adv_K, m) -> None:
    """Accumulate (sum l*a, sum l, sum a, n) over valid tokens: exact global Cov(log pi, A)."""
    a = adv_K.to(logp_KT.dtype).unsqueeze(1).expand_as(logp_KT)
    lp = torch.where(m, logp_KT, 0.0)
    a = torch.where(m, a, 0.0)
    for i, v in enumerate(((lp * a).sum(), lp.sum(), a.sum(), m.sum())):
        acc[i] += float(v)


def _add_gap_sums(acc: list[float], old_KT, sampler_logp_NT, rows: slice, mask_KT) -> None:
    """Accumulate (sum |log pi_old - log pi_sampler|, tokens) over the group's completion
    tokens: how far the sampling policy (bf16 weights, merged LoRA) was from the one the
    update scores as old (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"; verl logs the same difference)."""
    if sampler_logp_NT is None:
        return
    m = mask_KT.bool()
    sampler_KT = sampler_logp_NT[rows].to(old_KT.device)
    acc[0] += float((old_KT.detach() - sampler_KT).abs()[m].sum())
    acc[1] += float(m.sum())


def _token_metrics(cfg: LossConfig) -> tuple[str, ...]:
    """The common token metrics and those the configured policy loss declares."""
    declared = POLICY_LOSSES.meta(cfg.policy_loss).get("metrics", ())
    return TOKEN_METRICS + tuple(k for k in declared if k not in TOKEN_METRICS)


def _global_metrics(sums: dict, stats: BatchStats, settings: UpdateSettings) -> dict:
    """Token-weighted means and the covariance over all micro-batches and processes."""
    world_size = settings.world_size
    keys = list(_token_metrics(settings.loss))
    local = [sums["loss"], sums["loss/policy"], *sums["cov"], *sums["gap"]]
    local += [sums.get(k, 0.0) for k in keys] + [1.0 if k in sums else 0.0 for k in keys]
    total = _global_sum(local, world_size)
    loss, policy, sla, sl, sa, n, gap, gap_n = total[:8]
    weighted, present = total[8 : 8 + len(keys)], total[8 + len(keys) :]
    out = {"loss": loss, "loss/policy": policy}
    out["cov_logp_adv"] = (sla / n - (sl / n) * (sa / n)) if n > 0 else None
    out["sampler_logp_gap"] = gap / gap_n if gap_n > 0 else None
    for key, value, seen in zip(keys, weighted, present):
        out[key] = value / stats.n_tokens if seen > 0 and stats.n_tokens > 0 else None
    return out


def _sync_and_clip(params: list, max_norm: float, world_size: int) -> float:
    """All-reduce (SUM: each rank's loss is already over the global count), clip; the norm."""
    if world_size > 1:
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
    return float(torch.linalg.vector_norm(torch.stack([g.grad.norm() for g in grads])))


def accumulate_gradients(
    model, batch: UpdateBatch | None, settings: UpdateSettings, old_NT=None, ref_NT=None
) -> dict:
    """Zero the grads, then backward every group's share of the step's loss (no optimizer
    step, no all-reduce): the gradient equals that of the whole-batch loss. Returns metrics."""
    for p in model.parameters():
        p.grad = None
    with _bf16_mode(model, settings):
        stats = _step_stats(model, batch, settings, old_NT)
        sums = _backward_groups(model, batch, settings, stats, old_NT, ref_NT)
    return _global_metrics(sums, stats, settings)


def policy_update(
    model, optimizer, scheduler, batch: UpdateBatch | None, settings: UpdateSettings
) -> dict:
    """Run μ optimizer steps on one rollout; returns every key of :data:`UPDATE_KEYS`.

    ``batch=None`` (a rank with no informative group under multiple processes) contributes zero
    gradients, so every rank takes the same optimizer steps and the adapters stay identical.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    old = ref = None
    if batch is not None and settings.num_iterations > 1:
        old, _ = _score_groups(model, batch.rollout, settings)
    if batch is not None and settings.loss.beta > 0:
        ref, _ = _score_groups(model, batch.rollout, settings, reference=True)
    out: dict = {"nonfinite_skips": 0, "optimizer_steps": 0}
    for _ in range(settings.num_iterations):
        metrics = accumulate_gradients(model, batch, settings, old, ref)
        grad_norm = _sync_and_clip(params, settings.max_grad_norm, settings.world_size)
        if not (math.isfinite(metrics["loss"]) and math.isfinite(grad_norm)):
            logger.warning(
                "non-finite loss %.4g or grad norm %.4g: update skipped", metrics["loss"], grad_norm
            )
            out["nonfinite_skips"] += 1
        else:
            optimizer.step()
            out["optimizer_steps"] += 1
            if scheduler is not None:
                scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        out.update(metrics, grad_norm=grad_norm)
    out["lr"] = optimizer.param_groups[0]["lr"]
    extra = {k: v for k, v in out.items() if k not in UPDATE_KEYS and k in metrics}
    return {**{key: out.get(key) for key in UPDATE_KEYS}, **extra}


def rollout_entropy(model, rollout: Rollout, settings: UpdateSettings) -> float:
    """Mean token entropy (at the sampling temperature) of the policy on a rollout it did not
    train on: a step without an update still logs entropy, the signal a deadlock hides."""
    _, entropy_NT = _score_groups(model, rollout, settings)
    mask = rollout.mask_NT.bool()
    return float(entropy_NT[mask].mean()) if mask.any() else float("nan")
