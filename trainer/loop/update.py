"""One policy update from a scored rollout: micro-batches of one group, then one optimizer step.

Each group (K completions of one prompt) is one micro-batch: its log-probs come from
:func:`trainer.logprobs.group_logprobs` (prompt computed once), its loss from the ONE loss
function :func:`trainer.losses.policy_objective`, scaled by the group's share of the batch so
that the summed gradient equals the gradient of the loss aggregated over the whole batch
(share = 1/G for the sequence-mean aggregations, tokens_g / tokens for ``token_mean``). With
μ > 1 updates per rollout (``algorithm.num_iterations``) the log-probs of the sampling policy
are stored before the first update and used as ``old_logp`` (PPO ratio).

Non-finite losses or gradients skip the optimizer step (logged, never applied).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from flowgrpo.trainer.algorithms.logprobs import group_logprobs
from flowgrpo.trainer.algorithms.losses import LossConfig, policy_objective
from flowgrpo.trainer.loop.policy import adapter_disabled

logger = logging.getLogger(__name__)

_AVERAGED = (
    "entropy",
    "cov_logp_adv",
    "kl",
    "clip_ratio/low",
    "clip_ratio/high",
    "ratio_mean",
    "frac_pg_tokens",
)


@dataclass
class UpdateInputs:
    """What an update needs: the rollout rows kept for training and their advantages [N]."""

    rollout: object
    adv_N: torch.Tensor


def _group_rows(rollout, g: int) -> slice:
    k = rollout.group_size
    return slice(g * k, (g + 1) * k)


def _shares(rollout, loss_cfg: LossConfig) -> list[float]:
    groups = len(rollout.problems)
    if loss_cfg.loss_agg == "token_mean":
        tokens = rollout.mask_NT.sum().clamp_min(1)
        return [
            float(rollout.mask_NT[_group_rows(rollout, g)].sum() / tokens) for g in range(groups)
        ]
    return [1.0 / groups] * groups


@torch.no_grad()
def _fixed_logprobs(model, rollout, mode: str, reference: bool) -> list[torch.Tensor]:
    """Per-group log-probs without gradients: of the sampling policy, or of the reference."""
    out = []
    for g, prompt in enumerate(rollout.prompt_ids):
        rows = _group_rows(rollout, g)
        args = (model, prompt, rollout.completion_ids_NT[rows], rollout.mask_NT[rows], mode)
        if reference:
            with adapter_disabled(model):
                out.append(group_logprobs(*args)[0])
        else:
            out.append(group_logprobs(*args)[0])
    return out


def _backward_groups(model, inputs: UpdateInputs | None, loss_cfg, mode, old, ref) -> dict:
    if inputs is None:  # nothing to learn on this rank; still joins the gradient all-reduce
        return {"loss": 0.0}
    rollout, sums = inputs.rollout, {"loss": 0.0}
    shares = _shares(rollout, loss_cfg)
    device = next(model.parameters()).device
    for g, prompt in enumerate(rollout.prompt_ids):
        rows = _group_rows(rollout, g)
        mask_KT = rollout.mask_NT[rows].to(device)
        logp_KT, entropy_KT = group_logprobs(
            model, prompt, rollout.completion_ids_NT[rows], mask_KT, mode
        )
        old_KT = old[g].to(device) if old is not None else logp_KT.detach()
        total, metrics = policy_objective(
            logp_KT,
            old_KT,
            inputs.adv_N[rows].to(device),
            mask_KT,
            loss_cfg,
            ref_logp_NT=None if ref is None else ref[g].to(device),
            entropy_NT=entropy_KT,
            truncated_N=rollout.truncated_N[rows].to(device),
        )
        (total * shares[g]).backward()
        sums["loss"] += total.item() * shares[g]
        for key in _AVERAGED:
            if key in metrics:
                sums[key] = sums.get(key, 0.0) + metrics[key] * shares[g]
    return sums


def _sync_and_clip(params: list, max_norm: float, world_size: int) -> float:
    """All-reduce (mean) the LoRA gradients across processes, then clip; returns the norm."""
    if world_size > 1:
        import torch.distributed as dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= world_size
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
    return float(torch.linalg.vector_norm(torch.stack([g.grad.norm() for g in grads])))


def policy_update(
    model,
    optimizer,
    scheduler,
    inputs: UpdateInputs,
    loss_cfg: LossConfig,
    num_iterations: int = 1,
    mode: str = "shared_prompt",
    max_grad_norm: float = 1.0,
    world_size: int = 1,
) -> dict:
    """Run μ = ``num_iterations`` optimizer steps on one rollout; returns the step metrics.

    ``inputs=None`` (a rank with no informative group under multiple processes) contributes zero
    gradients, so every rank takes the same optimizer steps and the adapters stay identical.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    old = ref = None
    if inputs is not None and num_iterations > 1:
        old = _fixed_logprobs(model, inputs.rollout, mode, False)
    if inputs is not None and loss_cfg.beta > 0:
        ref = _fixed_logprobs(model, inputs.rollout, mode, True)
    out: dict = {"skipped_updates": 0}
    for _ in range(num_iterations):
        optimizer.zero_grad(set_to_none=True)
        sums = _backward_groups(model, inputs, loss_cfg, mode, old, ref)
        grad_norm = _sync_and_clip(params, max_grad_norm, world_size)
        if not (math.isfinite(sums["loss"]) and math.isfinite(grad_norm)):
            logger.warning(
                "non-finite loss %.4g or grad norm %.4g: update skipped", sums["loss"], grad_norm
            )
            optimizer.zero_grad(set_to_none=True)
            out["skipped_updates"] += 1
        else:
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
        out.update(sums)
        out["grad_norm"] = grad_norm
    optimizer.zero_grad(set_to_none=True)
    out["lr"] = optimizer.param_groups[0]["lr"]
    return out
