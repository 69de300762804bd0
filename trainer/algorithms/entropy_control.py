"""Adaptive entropy control: an entropy coefficient steered toward a target entropy.

Skywork-OR1 (He et al., arXiv 2505.22312, "adaptive entropy control"): a fixed entropy bonus is
either too weak to stop the collapse or, once entropy is high again, pushes it up without
bound. Instead the coefficient ``c`` moves by ``delta`` each step, up while the measured entropy
is below the target and down while it is above, clamped to ``[0, max_coef]``; the bonus is
applied only while the entropy is at or below the target, so a policy that explores enough is
trained by the reward alone.

The controller is the trainer's automatic response to ``entropy_low`` (issue 20): the alert still
fires and is logged, and the coefficient that answers it is in every metrics line
(``entropy_coef``). The settings are :class:`~flowgrpo.trainer.config.algorithm.EntropyControl`.
"""

from __future__ import annotations

import math

from flowgrpo.trainer.config.algorithm import EntropyControl


def next_entropy_coef(coef: float, entropy: float | None, control: EntropyControl) -> float:
    """The coefficient for the next step after a step measured ``entropy`` (nats/token).

    Up by ``delta`` below the target, down by ``delta`` at or above it, clamped to
    ``[0, max_coef]``. An unmeasured entropy (None, NaN) leaves ``coef`` unchanged.
    """
    if control.target is None or entropy is None or not math.isfinite(entropy):
        return coef
    step = control.delta if entropy < control.target else -control.delta
    return min(max(coef + step, 0.0), control.max_coef)


def applied_entropy_coef(coef: float, entropy: float | None, control: EntropyControl) -> float:
    """The coefficient the loss uses this step: ``coef`` while the last measured entropy is at
    or below the target (or unmeasured), 0 above it (Skywork-OR1 applies the bonus only then)."""
    if control.target is None:
        return coef
    if entropy is not None and math.isfinite(entropy) and entropy > control.target:
        return 0.0
    return coef
