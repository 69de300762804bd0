"""Combining reward components into one reward per sample, and the group-size rule of a batch.

The one NaN-aware weighted sum of flowgrpo (:func:`weighted_sum`): the reward table uses it on
numpy arrays, the trainer's advantage estimators on torch tensors; both get the same semantics
from the same code. :func:`check_group_size` is the one check that a batch splits into groups.

This module imports neither torch nor anything from flowgrpo: a torch tensor is recognised
through ``sys.modules`` (an object can only be a tensor once torch has been imported).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = ["check_group_size", "fill_group_mean", "weighted_sum"]


def check_group_size(n: int, group_size: int) -> int:
    """The number of groups of ``n`` samples: ``n // group_size``.

    A batch is groups of ``group_size`` consecutive samples (the K completions of one prompt).
    Raises ``ValueError`` unless ``group_size`` is an int >= 1 (bools are not) and divides
    ``n``. ``n = 0`` checks ``group_size`` alone.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if n % group_size:
        raise ValueError(
            f"{n} samples do not split into groups of group_size={group_size} "
            f"({n} % {group_size} = {n % group_size}); pass K completions for every prompt, "
            "each group a block of consecutive samples"
        )
    return n // group_size


def weighted_sum(scores: Any, weights: Any = None) -> Any:
    """One reward per sample: ``sum_c weights[c] * scores[:, c]`` over the non-NaN components.

    Args:
        scores: ``[N, C]`` component scores (NaN = unscorable), or ``[N]`` (one component): a
            numpy array (or anything ``np.asarray`` takes) or a torch tensor.
        weights: ``[C]`` finite weights (sequence, array or tensor); None means all 1.

    Returns:
        ``[N]``, of the same kind as ``scores`` (numpy array, or torch tensor on the same
        device), with the dtype of ``scores`` when it is floating, else float64.

    NaN handling: a NaN component is left out of that sample's sum; a sample whose every
    component is NaN gets NaN (unscorable: the trainer gives it advantage 0). The remaining
    weights are NOT renormalised. Renormalising (dividing by the weights present) would let the
    components that remain stand in for the missing one: with the default weights, a valid
    workflow whose executor failed (accuracy and cost NaN, validity 1, diversity d) would get
    ``(0.3 + 0.1 d) / 0.4``, i.e. 75-100% of the scale, as much as a correct answer. Within one
    row, leaving a term out adds the same as adding 0, so an unscorable sample ranks with the
    wrong ones; to make a missing component *neutral* relative to its group instead, fill it
    with the group mean first (:func:`fill_group_mean`), or mask the sample.

    Raises ``ValueError`` for scores that are not [N] or [N, C], or weights that do not have
    C finite entries.

    >>> weighted_sum(np.array([[1.0, 0.5], [1.0, np.nan], [np.nan, np.nan]]), [0.3, 1.0])
    array([0.8, 0.3, nan])
    """
    xp, r, w = _scores_and_weights(scores, weights)
    present = ~xp.isnan(r)
    total = xp.where(present, r * w, 0.0).sum(-1)
    return xp.where(present.any(-1), total, math.nan)


def _scores_and_weights(scores: Any, weights: Any) -> tuple[Any, Any, Any]:
    """(numpy or torch, scores as floating [N, C], weights as [C] of the same dtype/device)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(scores, torch.Tensor):
        xp, r = torch, scores if scores.is_floating_point() else scores.to(torch.float64)
    else:
        xp, r = np, np.asarray(scores)
        r = r if np.issubdtype(r.dtype, np.floating) else r.astype(np.float64)
    if r.ndim == 1:
        r = r[:, None]
    if r.ndim != 2:
        raise ValueError(
            "weighted_sum needs scores [N, C] (samples x components) or [N], got shape "
            f"{tuple(r.shape)}"
        )
    w = [1.0] * r.shape[1] if weights is None else weights
    if xp is np:
        w = np.asarray(w, dtype=r.dtype).reshape(-1)
    else:
        w = torch.as_tensor(w, dtype=r.dtype, device=r.device).reshape(-1)
    if w.shape[0] != r.shape[1]:
        raise ValueError(f"weights has {w.shape[0]} entries but scores has {r.shape[1]} components")
    if not bool(xp.isfinite(w).all()):
        raise ValueError(f"weights must be finite, got {w.tolist()}")
    return xp, r, w


def fill_group_mean(scores: np.ndarray, group_size: int) -> np.ndarray:
    """A copy of ``scores`` with each NaN replaced by its group's mean of that component.

    The mean is over the group's non-NaN entries of the column; a column that is NaN for the
    whole group stays NaN. A filled entry is then neutral within its group (zero contribution
    to a group-centred advantage), unlike leaving it out of a sum.

    >>> fill_group_mean(np.array([[1.0], [np.nan], [np.nan], [np.nan]]), 2).ravel()
    array([ 1.,  1., nan, nan])
    """
    scores = np.array(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"fill_group_mean needs scores [N, C], got shape {scores.shape}")
    check_group_size(scores.shape[0], group_size)
    grouped = scores.reshape(-1, group_size, scores.shape[1])
    present = ~np.isnan(grouped)
    counts = present.sum(axis=1, keepdims=True)
    sums = np.where(present, grouped, 0.0).sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    filled = np.where(present, grouped, np.broadcast_to(means, grouped.shape))
    return filled.reshape(scores.shape)
