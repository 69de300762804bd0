"""Policy losses and loss aggregations, registered by name (their settings: ``LossConfig``,
in :mod:`flowgrpo.trainer.config.algorithm`).

The one training objective that combines them lives in :mod:`.objective`.

* A policy loss is a pure function ``fn(logp_NT, old_logp_NT, adv_N, mask_NT, config,
  select_NT=None) -> (loss_NT, metrics)``: the unaggregated per-token loss (0 at masked
  positions) and a dict of float metrics (token means over its rows). Losses that act on a
  *share of the step's tokens* (``clip_cov``, ``kl_cov``) register a ``select`` function with
  the same inputs returning the bool [N, T] tokens they act on; the objective computes it once
  on the whole step's batch and passes each micro-batch its rows as ``select_NT``.
* An aggregation is ``fn(loss_NT, mask_NT, config) -> (total, count)``: the aggregate is
  ``total / count`` where both are *sums over rows* (``total`` a tensor, ``count`` a float that
  depends on the mask only). That contract is what makes micro-batching exact: the step's loss
  is ``sum_g total_g / sum_g count_g`` whatever the split into groups or processes.

Sign convention: losses are minimised; the policy-gradient term is ``-A * ratio``. Not
protected: non-finite log-probs at *valid* positions, and ratios so large that ``exp``
overflows (only possible far outside any trust region).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from flowgrpo.configuration import ConfigError
from flowgrpo.registry import Registry
from flowgrpo.trainer.algorithms.tokens import as_bool, clean, masked_mean, token_covariance
from flowgrpo.trainer.config.algorithm import LossConfig

#: ``fn(logp_NT, old_logp_NT, adv_N, mask_NT(bool), config, select_NT) -> (loss_NT, metrics)``
PolicyLossFn = Callable[..., "tuple[Tensor, dict[str, float]]"]
#: ``fn(loss_NT, mask_NT(bool), config) -> (total, count)``; aggregate = total / count
AggregationFn = Callable[[Tensor, Tensor, "LossConfig"], "tuple[Tensor, float]"]

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")


def register_policy_loss(
    name: str, fn: PolicyLossFn | None = None, *, select=None, metrics: tuple[str, ...] = ()
):
    """Register a policy loss (decorator or call style); duplicate names raise.

    ``select``: its token-selection function (see the module docstring). ``metrics``: names of
    the extra token-mean metrics it returns, which the update averages over micro-batches and
    processes and writes to metrics.jsonl (the common ones, clip fractions and ratio_mean, are
    always collected).
    """
    return POLICY_LOSSES.register(name, fn, select=select, metrics=tuple(metrics))


def register_aggregation(name: str, fn: AggregationFn | None = None):
    """Register a loss aggregation (decorator or call style); duplicate names raise."""
    return AGGREGATIONS.register(name, fn)


def available_policy_losses() -> tuple[str, ...]:
    """Names of the registered policy losses, sorted."""
    return POLICY_LOSSES.names()


def available_aggregations() -> tuple[str, ...]:
    """Names of the registered loss aggregations, sorted."""
    return AGGREGATIONS.names()


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; ``ValueError`` listing the choices otherwise."""
    return POLICY_LOSSES.get(name)


def get_aggregation(name: str) -> AggregationFn:
    """The aggregation registered as ``name``; ``ValueError`` listing the choices otherwise."""
    return AGGREGATIONS.get(name)


def check_loss_names(config: LossConfig) -> None:
    """Look ``policy_loss`` and ``loss_agg`` of ``config`` up in their registries (a dotted path
    is imported and registered here); ``ConfigError`` naming the field. Not done when the config
    is built (config is data): the run environment's build calls it after importing plugins."""
    for name, registry in (("policy_loss", POLICY_LOSSES), ("loss_agg", AGGREGATIONS)):
        try:
            registry.get(getattr(config, name))
        except ValueError as exc:
            raise ConfigError(f"algorithm.loss.{name}: {exc}") from None


# --------------------------------------------------------------------------- helpers


def check_shapes(logp_NT: Tensor, mask_NT: Tensor, adv_N: Tensor, **others) -> None:
    """Raise ``ValueError`` unless logp is [N, T], adv [N] and every other tensor [N, T]."""
    shape = tuple(logp_NT.shape)
    if len(shape) != 2:
        raise ValueError(f"logp_NT must be [N, T], got shape {shape}")
    if tuple(adv_N.shape) != shape[:1]:
        raise ValueError(
            f"adv_N must be [N] = {shape[:1]} (one advantage per sequence), got "
            f"shape {tuple(adv_N.shape)}"
        )
    for name, t in {"mask_NT": mask_NT, **others}.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != logp_NT shape {shape}")


def _prep(logp_NT, old_logp_NT, adv_N, mask_NT):
    """Validated, masked inputs: (logp, old_logp, adv broadcast to [N, T], bool mask)."""
    check_shapes(logp_NT, mask_NT, adv_N, old_logp_NT=old_logp_NT)
    m = as_bool(mask_NT)
    adv_NT = clean(adv_N.to(logp_NT.dtype).unsqueeze(1).expand_as(logp_NT), m)
    return clean(logp_NT, m), clean(old_logp_NT, m), adv_NT, m


def _ppo_terms(ratio_NT, adv_NT, mask_NT, low: float, high: float):
    """max(-A r, -A clip(r, 1-low, 1+high)) and the clip-fraction metrics."""
    unclipped = -adv_NT * ratio_NT
    clipped = -adv_NT * ratio_NT.clamp(1.0 - low, 1.0 + high)
    loss = clean(torch.maximum(unclipped, clipped), mask_NT)
    # A term is clipped when the clipped branch wins strictly: its gradient is then 0.
    was_clipped = (clipped > unclipped) & mask_NT
    n = mask_NT.sum().clamp_min(1)
    metrics = {
        "clip_ratio/low": ((was_clipped & (ratio_NT < 1.0 - low)).sum() / n).item(),
        "clip_ratio/high": ((was_clipped & (ratio_NT > 1.0 + high)).sum() / n).item(),
        "ratio_mean": masked_mean(ratio_NT.detach(), mask_NT).item(),
    }
    return loss, was_clipped, metrics


def _ratio(logp, old, m):
    return clean((logp - old).exp(), m)


# --------------------------------------------------------------------------- policy losses


@register_policy_loss("clip")
def clip_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, select_NT=None):
    """PPO clipped surrogate with separate epsilons (DAPO clip-higher, arXiv 2503.14476).

    loss_t = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)), r_t = exp(logp - old_logp).
    Metrics: ``clip_ratio/low`` = share of valid tokens whose term was clipped at the low side
    (r < 1 - eps_low with A < 0: the clipped branch is the larger, so no gradient),
    ``clip_ratio/high`` likewise at the high side (r > 1 + eps_high with A > 0), ``ratio_mean``.
    """
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    loss, _, metrics = _ppo_terms(
        _ratio(logp, old, m), adv, m, config.epsilon_low, config.epsilon_high
    )
    return loss, metrics


@register_policy_loss("gspo", metrics=("seq_ratio_mean",))
def gspo_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, select_NT=None):
    """GSPO (arXiv 2507.18071): one length-normalised importance ratio per sequence.

    s_i = exp(mean over valid tokens of (logp - old_logp)), the geometric mean of the token
    ratios, clipped to [1 - gspo_eps_low, 1 + gspo_eps_high] (3e-4 / 4e-4 in the paper) and
    applied to every token: GSPO-token, s_it = sg[s_i] * pi(y_t) / sg[pi(y_t)], whose value is
    s_i and whose gradient flows through each token's own log-prob. With
    ``seq_mean_token_mean`` aggregation this is exactly the paper's sequence-level GSPO
    gradient. Clipping therefore acts on whole sequences; clip metrics count tokens, and
    ``seq_ratio_mean`` is the token-weighted mean of s_i (so it averages exactly over
    micro-batches).
    """
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    n_N = m.sum(1).clamp_min(1)
    seq_log_ratio_N = (logp - old).sum(1) / n_N
    log_ratio = seq_log_ratio_N.detach().unsqueeze(1) + logp - logp.detach()
    ratio = clean(torch.exp(log_ratio), m)
    loss, _, metrics = _ppo_terms(ratio, adv, m, config.gspo_epsilon_low, config.gspo_epsilon_high)
    seq_ratio_N = seq_log_ratio_N.detach().exp()
    metrics["seq_ratio_mean"] = (
        ((seq_ratio_N * m.sum(1)).sum() / m.sum().clamp_min(1)).item() if m.any() else 1.0
    )
    return loss, metrics


def clip_cov_select(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig) -> Tensor:
    """The tokens Clip-Cov detaches: max(1, int(clip_cov_ratio * n_valid)) picked at random
    (torch's global RNG) among valid, unclipped tokens whose centred covariance lies strictly
    in (clip_cov_lb, clip_cov_ub). Computed on the whole step's batch (``batch_stats``)."""
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    _, was_clipped, _ = _ppo_terms(
        _ratio(logp, old, m), adv, m, config.epsilon_low, config.epsilon_high
    )
    cov = token_covariance(logp, adv_N, m)
    eligible = m & ~was_clipped & (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub)
    candidates = eligible.flatten().nonzero().squeeze(1)
    n_select = max(int(config.clip_cov_ratio * int(m.sum())), 1)
    picked = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:n_select]]
    selected = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    selected[picked] = True
    return selected.view_as(m)


@register_policy_loss("clip_cov", select=clip_cov_select, metrics=("clip_cov/frac_selected",))
def clip_cov_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, select_NT=None):
    """Clip-Cov (arXiv 2505.22617, "The Entropy Mechanism of RL for Reasoning LMs").

    The PPO clip loss (``clip``), then the tokens of :func:`clip_cov_select` are detached: their
    loss value stays, their gradient is 0. These high-covariance tokens (probable *and*
    advantaged) are the ones that drive entropy down. The paper's scripts run it with
    epsilon_low = epsilon_high = 1 (no PPO clip); here the configured epsilons stay active.
    ``select_NT``: the selection made on the whole step (None: select among these rows).
    Metric ``clip_cov/frac_selected`` (share of valid tokens).
    """
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    loss, _, metrics = _ppo_terms(
        _ratio(logp, old, m), adv, m, config.epsilon_low, config.epsilon_high
    )
    if select_NT is None:
        select_NT = clip_cov_select(logp_NT, old_logp_NT, adv_N, mask_NT, config)
    selected = select_NT.bool() & m
    loss = torch.where(selected, loss.detach(), loss)
    metrics["clip_cov/frac_selected"] = (selected.sum() / m.sum().clamp_min(1)).item()
    return loss, metrics


def kl_cov_select(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig) -> Tensor:
    """The tokens KL-Cov penalises: the top max(1, int(kl_cov_ratio * n_valid)) valid tokens
    by centred covariance. Computed on the whole step's batch (``batch_stats``)."""
    logp, _, _, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    selected = torch.zeros(m.shape, dtype=torch.bool, device=m.device)
    n_valid = int(m.sum())
    if n_valid:
        cov = torch.where(m, token_covariance(logp, adv_N, m), -math.inf)
        k = max(int(config.kl_cov_ratio * n_valid), 1)
        selected.view(-1)[cov.flatten().topk(k).indices] = True
    return selected


@register_policy_loss(
    "kl_cov", select=kl_cov_select, metrics=("kl_cov/frac_selected", "kl_cov/abs_kl_mean")
)
def kl_cov_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, select_NT=None):
    """KL-Cov (arXiv 2505.22617): a KL penalty on the highest-covariance tokens, no clipping.

    loss_t = -A r_t for every valid token, plus kl_cov_coef * |logp - old_logp| on the tokens
    of :func:`kl_cov_select`. As in the paper and verl's implementation the PPO clip is not
    applied: the KL term is the trust region of exactly the tokens that would collapse the
    entropy. Metrics: ``kl_cov/frac_selected``, ``kl_cov/abs_kl_mean`` (over valid tokens).
    """
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    ratio = _ratio(logp, old, m)
    abs_kl = (logp - old).abs()
    if select_NT is None:
        select_NT = kl_cov_select(logp_NT, old_logp_NT, adv_N, mask_NT, config)
    selected = select_NT.bool() & m
    loss = clean(-adv * ratio, m) + clean(config.kl_cov_coef * abs_kl, selected)
    metrics = {
        "clip_ratio/low": 0.0,  # KL-Cov does not clip; logged for a uniform metric set
        "clip_ratio/high": 0.0,
        "ratio_mean": masked_mean(ratio.detach(), m).item(),
        "kl_cov/frac_selected": selected.sum().item() / max(int(m.sum()), 1),
        "kl_cov/abs_kl_mean": masked_mean(abs_kl.detach(), m).item(),
    }
    return loss, metrics


# --------------------------------------------------------------------------- aggregations


@register_aggregation("token_mean")
def token_mean(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> tuple[Tensor, float]:
    """Sum over all valid tokens / number of valid tokens of the step (DAPO, arXiv 2503.14476)."""
    m = as_bool(mask_NT)
    return clean(loss_NT, m).sum(), float(m.sum())


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig):
    """Original GRPO (arXiv 2402.03300): mean over each sequence's tokens, then over sequences.

    Fully masked rows are left out of the sequence mean (they would be 0/0).
    """
    m = as_bool(mask_NT)
    n_N = m.sum(1)
    per_seq_N = clean(loss_NT, m).sum(1) / n_N.clamp_min(1)
    return per_seq_N.sum(), float((n_N > 0).sum())


@register_aggregation("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig):
    """Dr. GRPO (arXiv 2503.20783): per-sequence sum / max_new_tokens, then mean over sequences.

    The constant normaliser removes the length bias of ``seq_mean_token_mean``. Fully masked
    rows are left out of the sequence mean. Raises if a row has more valid tokens than
    ``config.max_new_tokens`` (the constant would then not be the generation budget).
    """
    m = as_bool(mask_NT)
    budget = config.max_new_tokens
    if budget is None:
        raise ValueError(
            "seq_mean_token_sum_norm needs LossConfig.max_new_tokens (the generation budget); "
            "set it or use loss_agg='token_mean'"
        )
    n_N = m.sum(1)
    longest = int(n_N.max()) if n_N.numel() else 0
    if longest > budget:
        raise ValueError(
            f"a completion has {longest} valid tokens but LossConfig.max_new_tokens={budget}; "
            "set it to the rollout's generation budget"
        )
    return clean(loss_NT, m).sum() / budget, float((n_N > 0).sum())
