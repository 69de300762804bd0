"""Per-token tensor helpers shared by the losses: masking, covariance, KL, entropy, log-probs.

Shapes: N sequences (completions), T completion positions, V vocabulary. ``mask_NT`` is 1/True on
real completion tokens; values at masked positions (padding, -inf, NaN) never reach a result or
its gradient (they are replaced with 0 by :func:`clean` before any arithmetic).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def as_bool(mask_NT: Tensor) -> Tensor:
    """The mask as bool (1/True = a real completion token)."""
    return mask_NT if mask_NT.dtype == torch.bool else mask_NT != 0


def clean(x_NT: Tensor, mask_NT: Tensor) -> Tensor:
    """x with 0 at masked positions, so padding (-inf, NaN) reaches neither value nor grad."""
    return torch.where(mask_NT, x_NT, 0.0)


def masked_mean(x_NT: Tensor, mask_NT: Tensor) -> Tensor:
    """Mean of x over the valid tokens (0 when none is valid)."""
    return clean(x_NT, mask_NT).sum() / mask_NT.sum().clamp_min(1)


def token_covariance(logp_NT: Tensor, adv_N: Tensor, mask_NT: Tensor) -> Tensor:
    """Per-token centred covariance term (logp - mean logp) * (A - mean A), detached; 0 off-mask.

    Means run over the valid tokens of the tensors given (the whole step's batch when the
    caller passes it, see ``objective.batch_stats``). Its mean over valid tokens is the batch
    covariance Cov(log pi, A), the driver of entropy change: dH ~ -eta * Cov(log pi, A)
    (arXiv 2505.22617). Used to select tokens in ``clip_cov`` and ``kl_cov``.
    """
    m = as_bool(mask_NT)
    logp = clean(logp_NT.detach(), m)
    adv = clean(adv_N.detach().to(logp.dtype).unsqueeze(1).expand_as(logp), m)
    cov = (logp - masked_mean(logp, m)) * (adv - masked_mean(adv, m))
    return clean(cov, m)


def top_entropy_mask(entropy_NT: Tensor, mask_NT: Tensor, top_frac: float) -> Tensor:
    """Bool [N, T]: the ceil(top_frac * n_valid) valid tokens of highest entropy in the batch.

    "Beyond the 80/20 rule" (arXiv 2506.01939): only high-entropy "forking" tokens (top 20 %)
    get policy gradient. Ties at the threshold are broken by ``torch.topk``'s order. All False
    when no token is valid. The entropy is read detached.
    """
    if not (isinstance(top_frac, (int, float)) and 0 < top_frac <= 1):
        raise ValueError(f"top_frac must be in (0, 1], got {top_frac!r}")
    m = as_bool(mask_NT)
    if tuple(entropy_NT.shape) != tuple(m.shape):
        raise ValueError(
            f"entropy_NT shape {tuple(entropy_NT.shape)} != mask_NT shape {tuple(m.shape)}"
        )
    out = torch.zeros(m.shape, dtype=torch.bool, device=m.device)
    n_valid = int(m.sum())
    if n_valid == 0:
        return out
    k = max(1, math.ceil(top_frac * n_valid - 1e-9))
    scores = torch.where(m, entropy_NT.detach().float(), -math.inf).flatten()
    out.view(-1)[scores.topk(k).indices] = True
    return out


def truncation_mask(mask_NT: Tensor, truncated_N: Tensor) -> Tensor:
    """mask_NT with every row flagged in ``truncated_N`` (bool [N]) set to 0; dtype kept.

    DAPO's overlong filtering (arXiv 2503.14476): a completion cut off at max_new_tokens is
    not judged on an answer it never finished.
    """
    t = torch.as_tensor(truncated_N, device=mask_NT.device).bool().reshape(-1)
    if t.numel() != mask_NT.shape[0]:
        raise ValueError(
            f"truncated_N has {t.numel()} entries but mask_NT has {mask_NT.shape[0]} rows"
        )
    return mask_NT.masked_fill(t.unsqueeze(1), 0)


def kl_k3(logp_NT: Tensor, ref_logp_NT: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(policy || ref): exp(d) - d - 1 with d = ref - logp.

    Schulman's k3 estimator (http://joschu.net/blog/kl-approx.html), as in GRPO (arXiv
    2402.03300): unbiased, always >= 0, exactly 0 where logp == ref. Mask before use.
    """
    d = ref_logp_NT - logp_NT
    return d.exp() - d - 1.0


def token_logprobs_and_entropy(
    logits_NTV: Tensor, targets_NT: Tensor, temperature: float = 1.0, allowed_NTV=None
) -> tuple[Tensor, Tensor]:
    """(logp_NT, entropy_NT) in float32 of the distribution softmax(logits / temperature).

    The temperature must be the one the completions were sampled at: the policy gradient, the
    PPO ratio and the logged entropy then all belong to the distribution that was sampled (as
    TRL and verl do). One ``log_softmax`` (cast to float32 inside the kernel), then logp =
    gather(targets) and entropy = -sum_v p log p. Vocabulary entries with logit -inf (p = 0)
    add 0, not NaN, to value and gradient. top_p / top_k are NOT applied: the ratio compares the
    full tempered distributions of the new and old policy (what TRL and verl do); the sampled
    tokens come from the truncated one, so the update is slightly off-policy there.

    ``allowed_NTV`` (bool, optional): the sampling constraint (grammar-constrained rollouts).
    Disallowed logits are set to -inf before the softmax, so log-probs and entropy are those of
    the constrained distribution, renormalised over the allowed tokens: exactly what was
    sampled, so the ratio of the first update is 1.
    """
    if logits_NTV.dim() != 3 or tuple(targets_NT.shape) != tuple(logits_NTV.shape[:2]):
        raise ValueError(
            f"need logits [N, T, V] and targets [N, T], got "
            f"{tuple(logits_NTV.shape)} and {tuple(targets_NT.shape)}"
        )
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be > 0 (the sampling temperature), got {temperature}")
    if temperature != 1.0:
        logits_NTV = logits_NTV / temperature
    if allowed_NTV is not None:
        logits_NTV = logits_NTV.masked_fill(~allowed_NTV.to(logits_NTV.device), -torch.inf)
    logp_NTV = torch.log_softmax(logits_NTV, dim=-1, dtype=torch.float32)
    logp_NT = logp_NTV.gather(-1, targets_NT.long().unsqueeze(-1)).squeeze(-1)
    finite_logp = logp_NTV.clamp_min(torch.finfo(torch.float32).min)
    entropy_NT = -(logp_NTV.exp() * finite_logp).sum(-1)
    return logp_NT, entropy_NT
