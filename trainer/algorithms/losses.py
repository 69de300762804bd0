"""Policy losses, loss aggregation and THE training objective (DESIGN.md, "Training").

``policy_objective`` is the one loss the trainer minimises; there is no second code path in
which a sign could flip::

    total = agg(policy loss) + beta * agg(KL_k3(policy || ref)) - entropy_coef * agg(entropy)

* policy losses (``clip``, ``gspo``, ``clip_cov``, ``kl_cov``) are pure functions registered
  by name: ``fn(logp_NT, old_logp_NT, adv_N, mask_NT, config, entropy_NT=None) ->
  (loss_NT, metrics)``, where ``loss_NT`` is the unaggregated per-token loss (0 at masked
  positions) and ``metrics`` a dict of floats;
* aggregations (``token_mean``, ``seq_mean_token_mean``, ``seq_mean_token_sum_norm``) are
  registered likewise: ``fn(loss_NT, mask_NT, config) -> scalar``.

Shapes: N sequences (completions), T completion positions, V vocabulary. ``mask_NT`` is 1/True
on real completion tokens; values at masked positions (padding, -inf, NaN) never reach the
loss or its gradient. Sign convention: losses are minimised; the policy-gradient term is
``-A * ratio``. Not protected: non-finite log-probs at *valid* positions, and ratios so large
that ``exp`` overflows (only possible far outside any trust region). Importing this module
does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

#: ``fn(logp_NT, old_logp_NT, adv_N, mask_NT(bool), config, entropy_NT) -> (loss_NT, metrics)``
PolicyLossFn = Callable[..., "tuple[Tensor, dict[str, float]]"]
#: ``fn(loss_NT, mask_NT(bool), config) -> scalar Tensor``
AggregationFn = Callable[["Tensor", "Tensor", "LossConfig"], "Tensor"]

_POLICY_LOSSES: dict[str, PolicyLossFn] = {}
_AGGREGATIONS: dict[str, AggregationFn] = {}


def _register(registry: dict, kind: str, name: str) -> Callable:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")

    def decorator(fn):
        if name in registry:
            old = registry[name]
            raise ValueError(
                f"{kind} {name!r} is already registered ({old.__module__}.{old.__qualname__}); "
                "choose another name"
            )
        registry[name] = fn
        return fn

    return decorator


def _lookup(registry: dict, kind: str, name: str):
    try:
        return registry[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(registry))}"
        ) from None


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name``; duplicate names raise."""
    return _register(_POLICY_LOSSES, "policy loss", name)


def register_aggregation(name: str) -> Callable[[AggregationFn], AggregationFn]:
    """Decorator registering a loss aggregation under ``name``; duplicate names raise."""
    return _register(_AGGREGATIONS, "loss aggregation", name)


def available_policy_losses() -> tuple[str, ...]:
    """Names of the registered policy losses, sorted."""
    return tuple(sorted(_POLICY_LOSSES))


def available_aggregations() -> tuple[str, ...]:
    """Names of the registered loss aggregations, sorted."""
    return tuple(sorted(_AGGREGATIONS))


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; ``ValueError`` listing the choices otherwise."""
    return _lookup(_POLICY_LOSSES, "policy loss", name)


def get_aggregation(name: str) -> AggregationFn:
    """The aggregation registered as ``name``; ``ValueError`` listing the choices otherwise."""
    return _lookup(_AGGREGATIONS, "loss aggregation", name)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class LossConfig:
    """Settings of ``policy_objective``; every field is checked in ``__post_init__``.

    Attributes:
        policy_loss: registered policy loss: ``clip`` | ``gspo`` | ``clip_cov`` | ``kl_cov``.
        loss_agg: registered aggregation. Default ``seq_mean_token_sum_norm`` (Dr. GRPO, arXiv
            2503.20783): every valid token weighs 1 / (N * max_new_tokens) whatever the
            completion lengths, so there is no length bias (``seq_mean_token_mean`` penalises
            a long wrong completion less per token, which rewards rambling prose), and the
            weight does not depend on how the batch is split into micro-batches of equal
            sizes (unlike ``token_mean``, whose denominator is each micro-batch's token count).
        max_new_tokens: the generation budget, Dr. GRPO's constant normaliser. Required for
            ``seq_mean_token_sum_norm`` (pass the rollout's max_new_tokens); no default because
            a wrong constant silently rescales every gradient.
        epsilon_low, epsilon_high: PPO clip range [1 - low, 1 + high] of ``clip`` and
            ``clip_cov``. Defaults 0.2 / 0.28: DAPO's clip-higher (arXiv 2503.14476), which
            lets low-probability tokens grow further and slows entropy collapse.
        gspo_epsilon_low, gspo_epsilon_high: clip range of the *sequence* ratio of ``gspo``;
            3e-4 / 4e-4 as in the GSPO paper (arXiv 2507.18071): a length-normalised ratio
            moves far less than a token ratio.
        clip_cov_ratio, clip_cov_lb, clip_cov_ub: Clip-Cov (arXiv 2505.22617): among tokens
            whose centred covariance lies strictly in (lb, ub), a random ``ratio`` share of
            the valid tokens (at least 1) gets no gradient. 2e-4, 1, 5 as in the paper's
            scripts (PRIME-RL/Entropy-Mechanism-of-RL, recipe/dapo/7b_clip_cov.sh) and
            verl's fallback values.
        kl_cov_ratio, kl_cov_coef: KL-Cov (arXiv 2505.22617): the top ``ratio`` share of valid
            tokens (at least 1) by covariance get ``coef * |logp - old_logp|`` added. 2e-3
            ("k_percent=0.2", i.e. 0.2 %) and 1 as in the paper's 7B script
            (same repository, recipe/dapo/7b_kl_cov.sh); verl falls back to 2e-4 when unset.
        beta: weight of the k3 KL to the reference policy (Schulman's estimator, as GRPO,
            arXiv 2402.03300). 0 = no reference forward pass needed.
        entropy_coef: entropy bonus; minimising the total with entropy_coef > 0 RAISES the
            entropy (a negative value is an entropy penalty). Default 0.
        top_entropy_frac: if set, only the top fraction of valid tokens by entropy get policy
            gradient ("Beyond the 80/20 rule", arXiv 2506.01939, uses 0.2). None = all.
        mask_truncated: give completions flagged truncated (hit max_new_tokens) mask 0, so an
            unfinished completion is neither rewarded nor punished (DAPO's overlong
            filtering); ``policy_objective`` then requires ``truncated_N``.
    """

    policy_loss: str = "clip"
    loss_agg: str = "seq_mean_token_sum_norm"
    max_new_tokens: int | None = None
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    gspo_epsilon_low: float = 3e-4
    gspo_epsilon_high: float = 4e-4
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 2e-3
    kl_cov_coef: float = 1.0
    beta: float = 0.0
    entropy_coef: float = 0.0
    top_entropy_frac: float | None = None
    mask_truncated: bool = False

    def __post_init__(self) -> None:
        for field, registry in (("policy_loss", _POLICY_LOSSES), ("loss_agg", _AGGREGATIONS)):
            value = getattr(self, field)
            if not (isinstance(value, str) and value in registry):
                raise ValueError(
                    f"LossConfig.{field}={value!r} is unknown; choose one of: "
                    f"{', '.join(sorted(registry))}"
                )
        for field, ok, fix in _RULES:
            value = getattr(self, field)
            if not ok(value):
                raise ValueError(f"LossConfig.{field}={value!r}: {fix}")
        if self.loss_agg == "seq_mean_token_sum_norm" and self.max_new_tokens is None:
            raise ValueError(
                "LossConfig.max_new_tokens=None: seq_mean_token_sum_norm (Dr. GRPO) divides by "
                "a constant; set max_new_tokens to the rollout's generation budget, or use "
                "loss_agg='token_mean'"
            )
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(
                f"LossConfig.clip_cov_lb={self.clip_cov_lb!r}: must be below "
                f"clip_cov_ub={self.clip_cov_ub!r}"
            )


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


_UNIT = "use a value in [0, 1): the ratio floor 1 - epsilon must stay positive"
_SHARE = "a share of tokens: use a value in (0, 1]"
_NONNEG = "use a finite number >= 0"
#: (field, check, how to fix) for LossConfig.__post_init__
_RULES: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    (
        "max_new_tokens",
        lambda v: v is None or (_real(v) and isinstance(v, int) and v >= 1),
        "use the rollout's generation budget, an int >= 1",
    ),
    ("epsilon_low", lambda v: _real(v) and 0 <= v < 1, _UNIT),
    ("epsilon_high", lambda v: _real(v) and v >= 0, _NONNEG),
    ("gspo_epsilon_low", lambda v: _real(v) and 0 <= v < 1, _UNIT),
    ("gspo_epsilon_high", lambda v: _real(v) and v >= 0, _NONNEG),
    ("clip_cov_ratio", lambda v: _real(v) and 0 < v <= 1, _SHARE),
    ("clip_cov_lb", _real, "use a finite number"),
    ("clip_cov_ub", _real, "use a finite number"),
    ("kl_cov_ratio", lambda v: _real(v) and 0 < v <= 1, _SHARE),
    ("kl_cov_coef", lambda v: _real(v) and v >= 0, _NONNEG),
    ("beta", lambda v: _real(v) and v >= 0, _NONNEG),
    ("entropy_coef", _real, "use a finite number (> 0 raises entropy, < 0 lowers it)"),
    (
        "top_entropy_frac",
        lambda v: v is None or (_real(v) and 0 < v <= 1),
        "use None (all tokens) or a fraction in (0, 1], e.g. 0.2",
    ),
    ("mask_truncated", lambda v: isinstance(v, bool), "use True or False"),
)


# --------------------------------------------------------------------------- helpers


def _check_shapes(logp_NT: Tensor, mask_NT: Tensor, adv_N: Tensor, **others) -> None:
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


def _valid(mask_NT: Tensor) -> Tensor:
    return mask_NT if mask_NT.dtype == _torch().bool else mask_NT != 0


def _torch():
    import torch

    return torch


def _clean(x_NT: Tensor, mask_NT: Tensor) -> Tensor:
    """x with 0 at masked positions, so padding (-inf, NaN) reaches neither value nor grad."""
    return _torch().where(mask_NT, x_NT, 0.0)


def _masked_mean(x_NT: Tensor, mask_NT: Tensor) -> Tensor:
    n = mask_NT.sum()
    return _clean(x_NT, mask_NT).sum() / n.clamp_min(1)


def _prep(logp_NT, old_logp_NT, adv_N, mask_NT):
    """Validated, masked inputs: (logp, old_logp, adv broadcast to [N, T], bool mask)."""
    _check_shapes(logp_NT, mask_NT, adv_N, old_logp_NT=old_logp_NT)
    m = _valid(mask_NT)
    adv_NT = _clean(adv_N.to(logp_NT.dtype).unsqueeze(1).expand_as(logp_NT), m)
    return _clean(logp_NT, m), _clean(old_logp_NT, m), adv_NT, m


def token_covariance(logp_NT: Tensor, adv_N: Tensor, mask_NT: Tensor) -> Tensor:
    """Per-token centred covariance term (logp - mean logp) * (A - mean A), detached; 0 off-mask.

    Means run over the valid tokens of the batch. Its mean over valid tokens is the batch
    covariance Cov(log pi, A), the driver of entropy change: dH ~ -eta * Cov(log pi, A)
    (arXiv 2505.22617). Used to select tokens in ``clip_cov`` and ``kl_cov``.
    """
    m = _valid(mask_NT)
    logp = _clean(logp_NT.detach(), m)
    adv = _clean(adv_N.detach().to(logp.dtype).unsqueeze(1).expand_as(logp), m)
    cov = (logp - _masked_mean(logp, m)) * (adv - _masked_mean(adv, m))
    return _clean(cov, m)


def _ppo_terms(ratio_NT, adv_NT, mask_NT, low: float, high: float):
    """max(-A r, -A clip(r, 1-low, 1+high)) and the clip-fraction metrics."""
    torch = _torch()
    unclipped = -adv_NT * ratio_NT
    clipped = -adv_NT * ratio_NT.clamp(1.0 - low, 1.0 + high)
    loss = _clean(torch.maximum(unclipped, clipped), mask_NT)
    # A term is clipped when the clipped branch wins strictly: its gradient is then 0.
    was_clipped = (clipped > unclipped) & mask_NT
    n = mask_NT.sum().clamp_min(1)
    metrics = {
        "clip_ratio/low": ((was_clipped & (ratio_NT < 1.0 - low)).sum() / n).item(),
        "clip_ratio/high": ((was_clipped & (ratio_NT > 1.0 + high)).sum() / n).item(),
        "ratio_mean": _masked_mean(ratio_NT.detach(), mask_NT).item(),
    }
    return loss, was_clipped, metrics


# --------------------------------------------------------------------------- policy losses


@register_policy_loss("clip")
def clip_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, entropy_NT=None):
    """PPO clipped surrogate with separate epsilons (DAPO clip-higher, arXiv 2503.14476).

    loss_t = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)), r_t = exp(logp - old_logp).
    Metrics: ``clip_ratio/low`` = share of valid tokens whose term was clipped at the low side
    (r < 1 - eps_low with A < 0: the clipped branch is the larger, so no gradient),
    ``clip_ratio/high`` likewise at the high side (r > 1 + eps_high with A > 0), ``ratio_mean``.
    """
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    ratio = _clean((logp - old).exp(), m)
    loss, _, metrics = _ppo_terms(ratio, adv, m, config.epsilon_low, config.epsilon_high)
    return loss, metrics


@register_policy_loss("gspo")
def gspo_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, entropy_NT=None):
    """GSPO (arXiv 2507.18071): one length-normalised importance ratio per sequence.

    s_i = exp(mean over valid tokens of (logp - old_logp)), the geometric mean of the token
    ratios, clipped to [1 - gspo_eps_low, 1 + gspo_eps_high] (3e-4 / 4e-4 in the paper) and
    applied to every token: GSPO-token, s_it = sg[s_i] * pi(y_t) / sg[pi(y_t)], whose value is
    s_i and whose gradient flows through each token's own log-prob. With
    ``seq_mean_token_mean`` aggregation this is exactly the paper's sequence-level GSPO
    gradient. Clipping therefore acts on whole sequences; clip metrics count tokens.
    """
    torch = _torch()
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    n_N = m.sum(1).clamp_min(1)
    seq_log_ratio_N = (logp - old).sum(1) / n_N
    log_ratio = seq_log_ratio_N.detach().unsqueeze(1) + logp - logp.detach()
    ratio = _clean(torch.exp(log_ratio), m)
    loss, _, metrics = _ppo_terms(ratio, adv, m, config.gspo_epsilon_low, config.gspo_epsilon_high)
    rows = m.any(1)
    seq_ratio = seq_log_ratio_N.detach().exp()[rows]
    metrics["seq_ratio_mean"] = seq_ratio.mean().item() if rows.any() else 1.0
    return loss, metrics


@register_policy_loss("clip_cov")
def clip_cov_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, entropy_NT=None):
    """Clip-Cov (arXiv 2505.22617, "The Entropy Mechanism of RL for Reasoning LMs").

    The PPO clip loss (``clip``), then: among valid tokens not already clipped whose centred
    covariance (``token_covariance``) lies strictly in (clip_cov_lb, clip_cov_ub), pick
    max(1, int(clip_cov_ratio * n_valid)) at random (torch's global RNG: seed it for
    reproducibility) and detach them: their loss value stays, their gradient is 0. These
    high-covariance tokens (probable *and* advantaged) are the ones that drive entropy down.
    The paper's scripts run it with epsilon_low = epsilon_high = 1 (no PPO clip); here the
    configured epsilons stay active. Metric ``clip_cov/frac_selected`` (share of valid tokens).
    """
    torch = _torch()
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    ratio = _clean((logp - old).exp(), m)
    loss, was_clipped, metrics = _ppo_terms(ratio, adv, m, config.epsilon_low, config.epsilon_high)
    cov = token_covariance(logp, adv_N, m)
    eligible = m & ~was_clipped & (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub)
    candidates = eligible.flatten().nonzero().squeeze(1)
    n_select = max(int(config.clip_cov_ratio * int(m.sum())), 1)
    picked = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:n_select]]
    selected = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    selected[picked] = True
    selected = selected.view_as(m)
    loss = torch.where(selected, loss.detach(), loss)
    metrics["clip_cov/frac_selected"] = (selected.sum() / m.sum().clamp_min(1)).item()
    return loss, metrics


@register_policy_loss("kl_cov")
def kl_cov_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config: LossConfig, entropy_NT=None):
    """KL-Cov (arXiv 2505.22617): a KL penalty on the highest-covariance tokens, no clipping.

    loss_t = -A r_t for every valid token, plus kl_cov_coef * |logp - old_logp| on the top
    max(1, int(kl_cov_ratio * n_valid)) valid tokens by centred covariance
    (``token_covariance``). As in the paper and verl's implementation the PPO clip is not
    applied: the KL term is the trust region of exactly the tokens that would collapse the
    entropy. Metrics: ``kl_cov/frac_selected``, ``kl_cov/abs_kl_mean`` (over valid tokens).
    """
    torch = _torch()
    logp, old, adv, m = _prep(logp_NT, old_logp_NT, adv_N, mask_NT)
    ratio = _clean((logp - old).exp(), m)
    abs_kl = (logp - old).abs()
    loss = _clean(-adv * ratio, m)
    n_valid = int(m.sum())
    selected = torch.zeros(m.shape, dtype=torch.bool, device=m.device)
    if n_valid:
        cov = torch.where(m, token_covariance(logp, adv_N, m), -math.inf)
        k = max(int(config.kl_cov_ratio * n_valid), 1)
        selected.view(-1)[cov.flatten().topk(k).indices] = True
    loss = loss + _clean(config.kl_cov_coef * abs_kl, selected)
    metrics = {
        "clip_ratio/low": 0.0,  # KL-Cov does not clip; logged for a uniform metric set
        "clip_ratio/high": 0.0,
        "ratio_mean": _masked_mean(ratio.detach(), m).item(),
        "kl_cov/frac_selected": selected.sum().item() / max(n_valid, 1),
        "kl_cov/abs_kl_mean": _masked_mean(abs_kl.detach(), m).item(),
    }
    return loss, metrics


# --------------------------------------------------------------------------- aggregation


@register_aggregation("token_mean")
def token_mean(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> Tensor:
    """Sum over all valid tokens / number of valid tokens in the batch (DAPO, arXiv 2503.14476).

    0 (still connected to the graph) when nothing is valid.
    """
    m = _valid(mask_NT)
    return _clean(loss_NT, m).sum() / m.sum().clamp_min(1)


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> Tensor:
    """Original GRPO (arXiv 2402.03300): mean over each sequence's tokens, then over sequences.

    Fully masked rows are left out of the sequence mean (they would be 0/0).
    """
    m = _valid(mask_NT)
    n_N = m.sum(1)
    rows = n_N > 0
    per_seq_N = _clean(loss_NT, m).sum(1) / n_N.clamp_min(1)
    return (per_seq_N * rows).sum() / rows.sum().clamp_min(1)


@register_aggregation("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> Tensor:
    """Dr. GRPO (arXiv 2503.20783): per-sequence sum / max_new_tokens, then mean over sequences.

    The constant normaliser removes the length bias of ``seq_mean_token_mean``. Fully masked
    rows are left out of the sequence mean. Raises if a row has more valid tokens than
    ``config.max_new_tokens`` (the constant would then not be the generation budget).
    """
    m = _valid(mask_NT)
    budget = config.max_new_tokens
    if budget is None:
        raise ValueError(
            "seq_mean_token_sum_norm needs LossConfig.max_new_tokens (the "
            "generation budget); set it or use loss_agg='token_mean'"
        )
    n_N = m.sum(1)
    longest = int(n_N.max()) if n_N.numel() else 0
    if longest > budget:
        raise ValueError(
            f"a completion has {longest} valid tokens but LossConfig."
            f"max_new_tokens={budget}; set it to the rollout's generation budget"
        )
    rows = n_N > 0
    per_seq_N = _clean(loss_NT, m).sum(1) / budget
    return (per_seq_N * rows).sum() / rows.sum().clamp_min(1)


def aggregate(name: str, loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> Tensor:
    """Aggregate a per-token quantity [N, T] to a scalar with the aggregation ``name``.

    Aggregations act on one call's tensors: with gradient accumulation over micro-batches the
    caller weights each micro-batch (``seq_mean_*``: by its share of non-empty sequences;
    ``token_mean``: by its share of valid tokens).
    """
    if tuple(loss_NT.shape) != tuple(mask_NT.shape):
        raise ValueError(
            f"loss_NT shape {tuple(loss_NT.shape)} != mask_NT shape {tuple(mask_NT.shape)}"
        )
    return get_aggregation(name)(loss_NT, _valid(mask_NT), config)


# --------------------------------------------------------------------------- masks, KL, entropy


def top_entropy_mask(entropy_NT: Tensor, mask_NT: Tensor, top_frac: float) -> Tensor:
    """Bool [N, T]: the ceil(top_frac * n_valid) valid tokens of highest entropy in the batch.

    "Beyond the 80/20 rule" (arXiv 2506.01939): only high-entropy "forking" tokens (top 20 %)
    get policy gradient. Ties at the threshold are broken by ``torch.topk``'s order. All False
    when no token is valid. The entropy is read detached.
    """
    torch = _torch()
    if not (_real(top_frac) and 0 < top_frac <= 1):
        raise ValueError(f"top_frac must be in (0, 1], got {top_frac!r}")
    m = _valid(mask_NT)
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
    torch = _torch()
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


def token_logprobs_and_entropy(logits_NTV: Tensor, targets_NT: Tensor) -> tuple[Tensor, Tensor]:
    """(logp_NT, entropy_NT) in float32 from logits [N, T, V] and target ids [N, T].

    One ``log_softmax`` (cast to float32 inside the kernel, no bf16 copy made first), then
    logp = gather(targets) and entropy = -sum_v p log p. Vocabulary entries with logit -inf
    (p = 0) add 0, not NaN, to value and gradient. Pass logits already divided by the sampling
    temperature. Peak memory: about two float32 [N, T, V] tensors plus what autograd saves.
    """
    torch = _torch()
    if logits_NTV.dim() != 3 or tuple(targets_NT.shape) != tuple(logits_NTV.shape[:2]):
        raise ValueError(
            f"need logits [N, T, V] and targets [N, T], got "
            f"{tuple(logits_NTV.shape)} and {tuple(targets_NT.shape)}"
        )
    logp_NTV = torch.log_softmax(logits_NTV, dim=-1, dtype=torch.float32)
    logp_NT = logp_NTV.gather(-1, targets_NT.long().unsqueeze(-1)).squeeze(-1)
    finite_logp = logp_NTV.clamp_min(torch.finfo(torch.float32).min)
    entropy_NT = -(logp_NTV.exp() * finite_logp).sum(-1)
    return logp_NT, entropy_NT


# --------------------------------------------------------------------------- the objective


def _masks(mask_NT, entropy_NT, ref_logp_NT, truncated_N, config: LossConfig):
    """Check the inputs the configured terms need; return (valid mask, policy-gradient mask)."""
    if config.beta > 0 and ref_logp_NT is None:
        raise ValueError(
            f"LossConfig.beta={config.beta} > 0 needs ref_logp_NT (the policy "
            "with the adapter disabled); pass it or set beta=0"
        )
    if config.entropy_coef != 0 and entropy_NT is None:
        raise ValueError(
            f"LossConfig.entropy_coef={config.entropy_coef} needs entropy_NT "
            "(with gradients); pass it or set entropy_coef=0"
        )
    m = _valid(mask_NT)
    if config.mask_truncated:
        if truncated_N is None:
            raise ValueError(
                "LossConfig.mask_truncated=True needs truncated_N (bool [N], "
                "True where the completion hit max_new_tokens)"
            )
        m = truncation_mask(m, truncated_N)
    pg_m = m
    if config.top_entropy_frac is not None:
        if entropy_NT is None:
            raise ValueError("LossConfig.top_entropy_frac is set: pass entropy_NT")
        pg_m = top_entropy_mask(entropy_NT, m, config.top_entropy_frac)
    return m, pg_m


def _regularisers(logp_NT, ref_logp_NT, entropy_NT, m, config: LossConfig, metrics: dict):
    """beta * agg(k3 KL) - entropy_coef * agg(entropy) (0 when both are off); logs kl, entropy."""
    term = 0.0
    if ref_logp_NT is not None:
        kl_NT = _clean(kl_k3(_clean(logp_NT, m), _clean(ref_logp_NT, m)), m)
        if config.beta > 0:
            term = term + config.beta * aggregate(config.loss_agg, kl_NT, m, config)
        metrics["kl"] = _masked_mean(kl_NT.detach(), m).item()
    if entropy_NT is not None:
        if config.entropy_coef != 0:
            ent = aggregate(config.loss_agg, _clean(entropy_NT, m), m, config)
            term = term - config.entropy_coef * ent  # minimising -coef * H raises H (coef > 0)
        metrics["entropy"] = _masked_mean(entropy_NT.detach(), m).item()
    return term


def policy_objective(
    logp_NT: Tensor,
    old_logp_NT: Tensor,
    adv_N: Tensor,
    mask_NT: Tensor,
    config: LossConfig,
    *,
    ref_logp_NT: Tensor | None = None,
    entropy_NT: Tensor | None = None,
    truncated_N: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """THE training loss: (total scalar to minimise, metrics dict of floats).

    total = agg(policy loss) + beta * agg(k3 KL to ref) - entropy_coef * agg(entropy), all
    aggregated with ``config.loss_agg`` over the valid tokens. Masks: rows in ``truncated_N``
    are dropped when ``config.mask_truncated``; with ``config.top_entropy_frac`` only the
    top-entropy tokens get a policy-loss term (the others add 0 but still count in the
    aggregation's denominator, so the scale does not depend on the selection; KL and entropy
    terms cover every valid token).

    ``entropy_NT`` must carry gradients for the entropy bonus to act (from
    ``token_logprobs_and_entropy``). ``ref_logp_NT`` is required when beta > 0 and, when
    given, the KL is logged whatever beta is. Metrics: ``loss/total``, ``loss/policy``,
    the policy loss's own (clip fractions, ratio_mean, ...), ``kl``, ``entropy`` (token mean),
    ``cov_logp_adv`` (batch Cov(log pi, A) over valid tokens: dH ~ -eta * Cov, arXiv
    2505.22617), ``frac_pg_tokens`` (share of valid tokens getting policy gradient).
    """
    _check_shapes(
        logp_NT,
        mask_NT,
        adv_N,
        old_logp_NT=old_logp_NT,
        ref_logp_NT=ref_logp_NT,
        entropy_NT=entropy_NT,
    )
    m, pg_m = _masks(mask_NT, entropy_NT, ref_logp_NT, truncated_N, config)
    loss_NT, metrics = get_policy_loss(config.policy_loss)(
        logp_NT, old_logp_NT, adv_N, pg_m, config, entropy_NT
    )
    # Aggregated over the full mask: tokens left out by the top-entropy selection add 0 but
    # still count, so the selection removes gradient without re-scaling the selected tokens.
    policy = aggregate(config.loss_agg, loss_NT, m, config)
    total = policy + _regularisers(logp_NT, ref_logp_NT, entropy_NT, m, config, metrics)
    n_valid = m.sum().clamp_min(1)
    metrics["cov_logp_adv"] = (token_covariance(logp_NT, adv_N, m).sum() / n_valid).item()
    metrics["frac_pg_tokens"] = (pg_m.sum() / n_valid).item()
    metrics["loss/policy"] = policy.item()
    metrics["loss/total"] = total.item()
    return total, metrics
