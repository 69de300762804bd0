"""THE training objective, with batch-level semantics however the step is micro-batched.

``policy_objective`` is the one loss the trainer minimises; there is no second code path in
which a sign could flip::

    total = agg(policy loss) + beta * agg(KL_k3(policy || ref)) - entropy_coef * agg(entropy)

Every term is aggregated with ``config.loss_agg`` over the *whole step's* batch. The update runs
the objective once per group of K completions (a micro-batch: that is what lets the prompt be
computed once per group), so everything that depends on the batch is computed beforehand by
:func:`batch_stats` on the whole step and handed to each micro-batch as :class:`BatchStats`:

* the aggregation's denominator (tokens or sequences of all groups and all processes), so
  the per-group losses sum to exactly the whole-batch loss (tested against one whole-batch call);
* the token selections that act on a share of the batch (Clip-Cov / KL-Cov's selected tokens,
  the top-entropy mask), so a "share of the batch's tokens" means the step's batch.

Called without ``batch``, ``policy_objective`` computes the stats from its own inputs: the
whole-batch reference the micro-batched update is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flowgrpo.trainer.algorithms.losses import (
    POLICY_LOSSES,
    LossConfig,
    check_shapes,
    get_aggregation,
    get_policy_loss,
)
from flowgrpo.trainer.algorithms.tokens import (
    as_bool,
    clean,
    kl_k3,
    masked_mean,
    token_covariance,
    top_entropy_mask,
    truncation_mask,
)


@dataclass(frozen=True)
class BatchStats:
    """What a micro-batch needs to know about the whole step's batch.

    Attributes:
        agg_count: the aggregation's denominator over the whole step (all groups, all
            processes): valid tokens for ``token_mean``, non-empty sequences for the
            ``seq_mean_*`` aggregations.
        n_tokens: valid tokens over the whole step (weights of the token-mean metrics).
        select_NT: bool [rows, T] tokens selected by the policy loss's ``select`` function on
            the whole batch (Clip-Cov / KL-Cov), or None when the loss selects nothing.
        pg_mask_NT: bool [rows, T] tokens that get policy gradient (top-entropy selection on
            the whole batch), or None = every valid token.
    """

    agg_count: float
    n_tokens: float
    select_NT: Tensor | None = None
    pg_mask_NT: Tensor | None = None

    def rows(self, start: int, stop: int) -> BatchStats:
        """The stats of rows [start, stop) (a micro-batch): same counts, sliced selections."""

        def cut(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[start:stop]

        return BatchStats(self.agg_count, self.n_tokens, cut(self.select_NT), cut(self.pg_mask_NT))


def needs_token_pass(config: LossConfig) -> bool:
    """True when the step's batch must be scored before the update to select tokens."""
    return POLICY_LOSSES.meta(config.policy_loss).get("select") is not None or (
        config.top_entropy_frac is not None
    )


def train_mask(mask_NT: Tensor, truncated_N: Tensor | None, config: LossConfig) -> Tensor:
    """Bool mask of the tokens that count: valid, and not in a truncated row when
    ``mask_truncated`` (DAPO's overlong filtering)."""
    m = as_bool(mask_NT)
    if config.mask_truncated:
        if truncated_N is None:
            raise ValueError(
                "LossConfig.mask_truncated=True needs truncated_N (bool [N], True where the "
                "completion hit max_new_tokens)"
            )
        m = truncation_mask(m, truncated_N)
    return m


def batch_stats(
    logp_NT: Tensor | None,
    old_logp_NT: Tensor | None,
    adv_N: Tensor,
    mask_NT: Tensor,
    config: LossConfig,
    *,
    entropy_NT: Tensor | None = None,
    truncated_N: Tensor | None = None,
) -> BatchStats:
    """:class:`BatchStats` of a whole step's batch [N, T] (one process).

    ``logp_NT``/``old_logp_NT``/``entropy_NT`` are needed only when :func:`needs_token_pass`
    (the selections read them); counts need the mask alone. Under several processes the caller
    sums ``agg_count`` and ``n_tokens`` over processes; selections stay per process (each
    process selects the configured share of its own tokens, so the global share is the same).
    """
    m = train_mask(mask_NT, truncated_N, config)
    _, count = get_aggregation(config.loss_agg)(torch.zeros(m.shape), m.cpu(), config)
    select = POLICY_LOSSES.meta(config.policy_loss).get("select")
    select_NT = pg_mask_NT = None
    selects = select is not None or config.top_entropy_frac is not None
    if selects and (logp_NT is None or old_logp_NT is None):
        raise ValueError(f"{config.policy_loss}: token selection needs logp_NT and old_logp_NT")
    if config.top_entropy_frac is not None:
        if entropy_NT is None:
            raise ValueError("LossConfig.top_entropy_frac is set: pass entropy_NT")
        pg_mask_NT = top_entropy_mask(entropy_NT, m, config.top_entropy_frac)
    if select is not None:
        pg = m if pg_mask_NT is None else pg_mask_NT
        select_NT = select(logp_NT, old_logp_NT, adv_N, pg, config)
    return BatchStats(float(count), float(m.sum()), select_NT, pg_mask_NT)


def _check_terms(entropy_NT, ref_logp_NT, config: LossConfig) -> None:
    if config.beta > 0 and ref_logp_NT is None:
        raise ValueError(
            f"LossConfig.beta={config.beta} > 0 needs ref_logp_NT (the policy with the adapter "
            "disabled); pass it or set beta=0"
        )
    if config.entropy_coef != 0 and entropy_NT is None:
        raise ValueError(
            f"LossConfig.entropy_coef={config.entropy_coef} needs entropy_NT (with gradients); "
            "pass it or set entropy_coef=0"
        )


def _aggregate(loss_NT: Tensor, m: Tensor, config: LossConfig, count: float) -> Tensor:
    total, _ = get_aggregation(config.loss_agg)(loss_NT, m, config)
    return total / max(count, 1.0)


def _regularisers(logp_NT, ref_logp_NT, entropy_NT, m, config, count, metrics) -> Tensor | float:
    """beta * agg(k3 KL) - entropy_coef * agg(entropy) (0 when both are off); logs kl, entropy."""
    term: Tensor | float = 0.0
    if ref_logp_NT is not None:
        kl_NT = clean(kl_k3(clean(logp_NT, m), clean(ref_logp_NT, m)), m)
        if config.beta > 0:
            term = term + config.beta * _aggregate(kl_NT, m, config, count)
        metrics["kl"] = masked_mean(kl_NT.detach(), m).item()
    if entropy_NT is not None:
        if config.entropy_coef != 0:
            ent = _aggregate(clean(entropy_NT, m), m, config, count)
            term = term - config.entropy_coef * ent  # minimising -coef * H raises H (coef > 0)
        metrics["entropy"] = masked_mean(entropy_NT.detach(), m).item()
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
    batch: BatchStats | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """THE training loss of these rows: (this micro-batch's share of the total, metrics).

    total = agg(policy loss) + beta * agg(k3 KL to ref) - entropy_coef * agg(entropy), each
    aggregated with ``config.loss_agg`` and divided by the whole step's count
    (``batch.agg_count``): summing the returned totals of all micro-batches gives the loss of
    the whole batch. With ``top_entropy_frac`` only the selected tokens get a policy-loss term
    (the others add 0 but still count in the denominator, so the selection removes gradient
    without re-scaling the selected tokens); KL and entropy terms cover every valid token.

    ``entropy_NT`` must carry gradients for the entropy bonus to act. ``ref_logp_NT`` is
    required when beta > 0 and, when given, the KL is logged whatever beta is. Metrics are
    token means over these rows (``n_tokens`` gives their weight): ``loss/total``,
    ``loss/policy`` (this micro-batch's contributions, which add up), the policy loss's own
    (clip fractions, ratio_mean, ...), ``kl``, ``entropy``, ``frac_pg_tokens``,
    ``cov_logp_adv`` (Cov(log pi, A) over these rows: dH ~ -eta * Cov, arXiv 2505.22617; the
    update recomputes it exactly over the whole step from sums).
    """
    check_shapes(
        logp_NT, mask_NT, adv_N, old_logp_NT=old_logp_NT, ref_logp_NT=ref_logp_NT,
        entropy_NT=entropy_NT,
    )  # fmt: skip
    _check_terms(entropy_NT, ref_logp_NT, config)
    if batch is None:  # the whole batch is given: its own stats
        batch = batch_stats(
            logp_NT.detach(), old_logp_NT, adv_N, mask_NT, config,
            entropy_NT=None if entropy_NT is None else entropy_NT.detach(),
            truncated_N=truncated_N,
        )  # fmt: skip
    m = train_mask(mask_NT, truncated_N, config)
    pg_m = m if batch.pg_mask_NT is None else batch.pg_mask_NT.to(m.device) & m
    loss_NT, metrics = get_policy_loss(config.policy_loss)(
        logp_NT, old_logp_NT, adv_N, pg_m, config, batch.select_NT
    )
    # Aggregated over the full mask: tokens left out by the top-entropy selection add 0 but
    # still count, so the selection removes gradient without re-scaling the selected tokens.
    policy = _aggregate(loss_NT, m, config, batch.agg_count)
    total = policy + _regularisers(
        logp_NT, ref_logp_NT, entropy_NT, m, config, batch.agg_count, metrics
    )
    n_valid = m.sum().clamp_min(1)
    metrics["cov_logp_adv"] = (token_covariance(logp_NT, adv_N, m).sum() / n_valid).item()
    metrics["frac_pg_tokens"] = (pg_m.sum() / n_valid).item()
    metrics["n_tokens"] = float(m.sum())
    metrics["loss/policy"] = policy.item()
    metrics["loss/total"] = float(total.item()) if isinstance(total, Tensor) else float(total)
    return total, metrics


def aggregate(name: str, loss_NT: Tensor, mask_NT: Tensor, config: LossConfig) -> Tensor:
    """Aggregate a per-token quantity [N, T] of a whole batch to a scalar (``total / count``
    of the aggregation ``name``; 0, still on the graph, when nothing is valid)."""
    if tuple(loss_NT.shape) != tuple(mask_NT.shape):
        raise ValueError(
            f"loss_NT shape {tuple(loss_NT.shape)} != mask_NT shape {tuple(mask_NT.shape)}"
        )
    total, count = get_aggregation(name)(loss_NT, as_bool(mask_NT), config)
    return total / max(float(count), 1.0)
