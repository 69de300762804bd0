"""Advantage estimators for GRPO-family training, by name (DESIGN.md, "Training").

Every estimator maps the reward components of one batch to one advantage per sample::

    adv_N = compute_advantages("grpo", rewards_NC, group_size=K, weights=w_C)

* ``rewards_NC``: N samples x C reward components (validity, accuracy, ...). Groups are
  consecutive blocks of ``group_size`` samples (the K completions of one prompt). A component
  may be NaN ("unscorable", e.g. the executor server failed): it is skipped, never read as a
  score. A sample whose every component is NaN is *unscorable*.
* The components are combined by :func:`flowgrpo.rewards.weighted_sum`, the one NaN-aware
  weighted sum of the project: a NaN component is skipped WITHOUT renormalising the remaining
  weights; a sample whose every component is NaN gets NaN (unscorable). The group-size rule is
  :func:`flowgrpo.rewards.check_group_size`.
* Estimators are pure functions registered by name (``register_estimator``); every call goes
  through the registry, unknown names raise ``ValueError`` listing the choices.

Exact-zero rules, shared by every built-in estimator (tested with ``torch.equal``):

* a group whose combined reward is constant over its scorable samples gets advantage exactly 0
  (tested as ``max == min``, never through ``eps``): no preference, no gradient;
* a group with fewer than 2 scorable samples gets 0 (there is nothing to compare against);
* an unscorable sample gets 0 and is left out of every mean and std.

All arithmetic is done in float64; the result is float32. Not handled here: rewards of ±inf
(rejected with an error), groups that are not consecutive blocks (reorder before calling).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from flowgrpo.registry import Registry
from flowgrpo.rewards import check_group_size, weighted_sum

#: ``fn(rewards_NC float64, group_size, weights_C float64, eps) -> adv_N float64``
EstimatorFn = Callable[[Tensor, int, Tensor, float], Tensor]

ESTIMATORS: Registry[EstimatorFn] = Registry("advantage estimator")


def register_estimator(name: str, fn: EstimatorFn | None = None):
    """Register an advantage estimator (decorator or call style); duplicate names raise.

    The function receives validated inputs: ``rewards_NC`` float64 [N, C] (NaN allowed),
    ``group_size`` K with N % K == 0, ``weights_C`` float64 [C], ``eps``; it returns adv_N.
    """
    return ESTIMATORS.register(name, fn)


def available_estimators() -> tuple[str, ...]:
    """Names of the registered advantage estimators, sorted."""
    return ESTIMATORS.names()


def get_estimator(name: str) -> EstimatorFn:
    """The estimator registered as ``name``; ``ValueError`` listing the choices otherwise."""
    return ESTIMATORS.get(name)


# --------------------------------------------------------------------------- validation


def _as_rewards_NC(rewards) -> Tensor:
    r = torch.as_tensor(rewards)
    if not (r.is_floating_point() or r.dtype in (torch.int32, torch.int64, torch.bool)):
        raise ValueError(f"rewards must be a real tensor, got dtype {r.dtype}")
    r = r.to(torch.float64)
    if r.dim() == 1:
        r = r[:, None]
    if r.dim() != 2:
        raise ValueError(
            f"rewards must be [N] or [N, C] (samples x reward components), got shape "
            f"{tuple(r.shape)}"
        )
    if r.shape[1] == 0:
        raise ValueError("rewards has 0 components (shape [N, 0]); pass at least one column")
    if torch.isinf(r).any():
        raise ValueError(
            "rewards contain ±inf; a reward component must be finite, or NaN when unscorable"
        )
    return r


def _as_weights_C(weights, c: int) -> Tensor:
    if weights is None:
        return torch.ones(c, dtype=torch.float64)
    w = torch.as_tensor(weights, dtype=torch.float64).reshape(-1)
    if w.numel() != c:
        raise ValueError(f"weights has {w.numel()} entries but rewards has {c} components")
    if not torch.isfinite(w).all():
        raise ValueError(f"weights must be finite, got {w.tolist()}")
    return w


# --------------------------------------------------------------------------- shared pieces


class _Moments(NamedTuple):
    """NaN-aware statistics over dim 1 of a [G, K, ...] tensor (NaN = not present)."""

    count: Tensor  # number of present entries
    mean: Tensor  # mean of present entries (0 where none)
    std: Tensor  # unbiased std of present entries (0 where fewer than 2)
    flat: Tensor  # bool: fewer than 2 present, or max == min (exactly constant)


def _moments(x_GK: Tensor) -> _Moments:
    """NaN-aware count / mean / unbiased std / exact-constancy along dim 1."""
    present = ~torch.isnan(x_GK)
    count = present.sum(1)
    mean = torch.where(present, x_GK, 0.0).sum(1) / count.clamp_min(1)
    dev = torch.where(present, x_GK - mean.unsqueeze(1), 0.0)
    # Unbiased (n - 1) std as TRL and verl use; a group of one has no spread (std 0).
    std = (dev.square().sum(1) / (count - 1).clamp_min(1)).sqrt()
    hi = torch.where(present, x_GK, -math.inf).amax(1)
    lo = torch.where(present, x_GK, math.inf).amin(1)
    flat = (count < 2) | (hi == lo)
    return _Moments(count, mean, std, flat)


def _zero_rules(adv_GK: Tensor, x_GK: Tensor, flat_G: Tensor) -> Tensor:
    """adv with exact zeros for unscorable samples and flat groups, flattened to [N]."""
    zero = torch.isnan(x_GK) | flat_G.unsqueeze(1)
    return torch.where(zero, 0.0, adv_GK).reshape(-1)


def _batch_scale(values_N: Tensor, scorable_N: Tensor, eps: float, center: bool) -> Tensor:
    """(values - batch mean) / (batch std + eps) over the scorable samples (unbiased std).

    Unscorable samples are left out of the statistics; fewer than 2 scorable samples in the
    batch give all zeros (no spread to scale by).
    """
    vals = values_N[scorable_N]
    if vals.numel() < 2:
        return torch.zeros_like(values_N)
    shift = vals.mean() if center else 0.0
    return torch.where(scorable_N, (values_N - shift) / (vals.std() + eps), 0.0)


def compute_advantages(
    name: str,
    rewards: Tensor,
    group_size: int,
    weights: Tensor | Sequence[float] | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """Advantages adv_N (float32) of the estimator registered as ``name``.

    Args:
        name: a registered estimator (see ``available_estimators()``).
        rewards: [N, C] reward components, NaN where unscorable; a [N] tensor counts as C=1.
        group_size: K, the size of each group of consecutive samples; N % K must be 0.
        weights: C component weights (default all 1).
        eps: added to std denominators (only where the spread is non-zero: constant groups
            are zeroed exactly before any division matters).

    Raises ``ValueError`` for an unknown name, a bad shape, N % K != 0, ±inf rewards, or an
    estimator that returns non-finite values or the wrong shape.
    """
    fn = get_estimator(name)
    r_NC = _as_rewards_NC(rewards)
    check_group_size(r_NC.shape[0], group_size)
    w_C = _as_weights_C(weights, r_NC.shape[1]).to(r_NC.device)
    if not (isinstance(eps, (int, float)) and eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite float >= 0, got {eps!r}")
    adv_N = fn(r_NC, group_size, w_C, float(eps))
    if tuple(adv_N.shape) != (r_NC.shape[0],):
        raise ValueError(
            f"estimator {name!r} returned shape {tuple(adv_N.shape)}, expected ({r_NC.shape[0]},)"
        )
    if not torch.isfinite(adv_N).all():
        raise ValueError(f"estimator {name!r} returned non-finite advantages: {adv_N.tolist()}")
    return adv_N.to(torch.float32)


# --------------------------------------------------------------------------- estimators


@register_estimator("grpo")
def grpo_advantages(rewards_NC: Tensor, group_size: int, weights_C: Tensor, eps: float) -> Tensor:
    """GRPO (arXiv 2402.03300): A = (r - group mean) / (group std + eps).

    r is the weighted NaN-aware sum of the components; mean and std run over the scorable
    samples of the group, with the *unbiased* std as TRL and verl use.

    The K=2 signature: with two scorable samples whose rewards differ, r - mean = ±d/2 and the
    unbiased std is |d|/sqrt(2), so A = ±1/sqrt(2) = ±0.7071 whatever the size of the
    difference (±1 with the population std). A valid workflow scoring 0.2 next to a sibling
    scoring 1.0 gets the same -0.71 as garbage would: this is why K >= 8 is the default.
    """
    x_GK = weighted_sum(rewards_NC, weights_C).view(-1, group_size)
    m = _moments(x_GK)
    adv_GK = (x_GK - m.mean.unsqueeze(1)) / (m.std.unsqueeze(1) + eps)
    return _zero_rules(adv_GK, x_GK, m.flat)


@register_estimator("dr_grpo")
def dr_grpo_advantages(
    rewards_NC: Tensor, group_size: int, weights_C: Tensor, eps: float
) -> Tensor:
    """Dr. GRPO (arXiv 2503.20783, "Understanding R1-Zero-Like Training"): A = r - group mean.

    No division by the group std: that division up-weights groups with a small spread (too
    easy or too hard prompts), the "question-level difficulty bias" of the paper. ``eps`` is
    unused.
    """
    x_GK = weighted_sum(rewards_NC, weights_C).view(-1, group_size)
    m = _moments(x_GK)
    return _zero_rules(x_GK - m.mean.unsqueeze(1), x_GK, m.flat)


@register_estimator("rloo")
def rloo_advantages(rewards_NC: Tensor, group_size: int, weights_C: Tensor, eps: float) -> Tensor:
    """RLOO (arXiv 2402.14740): A_i = r_i - mean of the *other* scorable samples of the group.

    With n scorable samples and sum S: r_i - (S - r_i)/(n - 1) = n/(n - 1) * (r_i - mean), so
    it is Dr. GRPO scaled by n/(n - 1) per group. ``eps`` is unused.
    """
    x_GK = weighted_sum(rewards_NC, weights_C).view(-1, group_size)
    m = _moments(x_GK)
    n = m.count.to(x_GK.dtype)
    scale_G = n / (n - 1).clamp_min(1)
    adv_GK = (x_GK - m.mean.unsqueeze(1)) * scale_G.unsqueeze(1)
    return _zero_rules(adv_GK, x_GK, m.flat)


@register_estimator("global")
def global_advantages(rewards_NC: Tensor, group_size: int, weights_C: Tensor, eps: float) -> Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262): A = (r - group mean) / (batch std + eps).

    The group mean removes the prompt's difficulty; the std is then taken over the
    group-centred values of every scorable sample of the batch (REINFORCE++'s global
    normalisation of the advantages), so one noisy group does not get its own scale. TRL's
    ``scale_rewards="batch"`` is the same idea but divides by the std of the raw rewards,
    which also includes the between-group spread; not used here.
    """
    combined_N = weighted_sum(rewards_NC, weights_C)
    x_GK = combined_N.view(-1, group_size)
    m = _moments(x_GK)
    centred_N = _zero_rules(x_GK - m.mean.unsqueeze(1), x_GK, m.flat)
    return _batch_scale(centred_N, ~torch.isnan(combined_N), eps, center=False)


@register_estimator("gdpo")
def gdpo_advantages(rewards_NC: Tensor, group_size: int, weights_C: Tensor, eps: float) -> Tensor:
    """GDPO (NVlabs, arXiv 2601.05242): normalise each component in its group, sum, batch-norm.

    1. every component c: z = (x - group mean_c) / (group std_c + eps) over the samples where
       c is present (unbiased std); a component constant within a group (or present in fewer
       than 2 samples) gives exactly 0 for that group;
    2. s = weighted NaN-aware sum of the z (an unscorable sample stays unscorable);
    3. A = (s - batch mean) / (batch std + eps) over the scorable samples of the batch.

    Why: normalising the weighted sum erases *which* component differed (a rare accuracy
    success next to common validity points ties with them); normalising per component keeps
    each component's within-group signal. Exact zeros: unscorable samples, groups with fewer
    than 2 scorable samples, and groups where s is constant (in particular groups where every
    component is constant) get exactly 0, after the batch normalisation.
    """
    n, c = rewards_NC.shape
    x_GKC = rewards_NC.view(-1, group_size, c)
    m = _moments(x_GKC)  # statistics per (group, component): [G, C]
    z_GKC = (x_GKC - m.mean.unsqueeze(1)) / (m.std.unsqueeze(1) + eps)
    z_GKC = torch.where(m.flat.unsqueeze(1) & ~torch.isnan(x_GKC), 0.0, z_GKC)
    s_N = weighted_sum(z_GKC.reshape(n, c), weights_C)
    s_GK = s_N.view(-1, group_size)
    adv_N = _batch_scale(s_N, ~torch.isnan(s_N), eps, center=True)
    return _zero_rules(adv_N.view_as(s_GK), s_GK, _moments(s_GK).flat)


# --------------------------------------------------------------------------- diagnostics


def group_stats(combined_N: Tensor, group_size: int) -> dict:
    """Per-batch spread statistics of combined rewards [N] (NaN = unscorable).

    Returns a dict:

    * ``zero_std_mask_G`` (bool [G]): the group carries no learning signal: its scorable
      rewards are exactly constant (max == min) or it has fewer than 2 scorable samples. Used
      by dynamic sampling (DAPO, arXiv 2503.14476) to resample or skip such groups;
    * ``frac_zero_std`` (float): share of such groups, the ``frac_reward_zero_std`` metric
      (1.0 for several steps = the reward_std = 0 deadlock);
    * ``reward_std`` (float): mean over groups with >= 2 scorable samples of the within-group
      unbiased std (0.0 when there are none);
    * ``frac_unscorable`` (float): share of samples whose combined reward is NaN.
    """
    c_N = torch.as_tensor(combined_N, dtype=torch.float64).reshape(-1)
    check_group_size(c_N.numel(), group_size)
    m = _moments(c_N.view(-1, group_size))
    spread = m.count >= 2
    return {
        "zero_std_mask_G": m.flat,
        "frac_zero_std": m.flat.double().mean().item() if m.flat.numel() else 0.0,
        "reward_std": m.std[spread].mean().item() if spread.any() else 0.0,
        "frac_unscorable": torch.isnan(c_N).double().mean().item() if c_N.numel() else 0.0,
    }


def adv_frac_extreme(adv_N: Tensor, threshold: float = 0.99) -> float:
    """Share of samples with |A| >= threshold (0.0 for an empty batch).

    The K=2 collapse signature: with grpo and K=2 every non-tied group gives exactly ±1 with
    the population std (what the failed runs used), so the share of |A| >= 0.99 equals the
    share of non-tied groups. With the unbiased std used here the same groups give ±0.7071
    instead, which the default 0.99 does NOT flag: pass ``threshold=0.7`` to watch for it.
    Logged as the "share of |A| >= 0.99" metric.
    """
    a = torch.as_tensor(adv_N).reshape(-1)
    if a.numel() == 0:
        return 0.0
    return (a.abs() >= threshold).double().mean().item()
