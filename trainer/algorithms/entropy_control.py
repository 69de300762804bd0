"""Adaptive entropy control: an entropy coefficient steered toward a target entropy.

Skywork-OR1 (He et al., arXiv 2505.22312, "adaptive entropy control"): a fixed entropy bonus is
either too weak to stop the collapse or, once entropy is high again, pushes it up without
bound. Instead the coefficient ``c`` moves by ``delta`` each step, up while the measured entropy
is below the target and down while it is above, clamped to ``[0, max_coef]``; the bonus is
applied only while the entropy is at or below the target, so a policy that explores enough is
trained by the reward alone.

The controller is the trainer's automatic response to ``entropy_low`` (issue 20): the alert still
fires and is logged, and the coefficient that answers it is in every metrics line
(``entropy_coef``). A step whose groups all tied (no reward signal: a collapsed policy writes
the same workflow K times) still gets the bonus while the controller acts: the trainer updates
the entropy term alone on those groups (advantages 0), since dynamic sampling would otherwise
skip the very steps the response is for.

A second lever, off unless ``temperature_delta`` > 0: the sampling temperature, moved the same
way (up by ``temperature_delta`` while the entropy is below the target, down otherwise, within
``[rollout.temperature, max_temperature]``), as Polaris (An et al., 2025, "POLARIS: a
post-training recipe for scaling RL on advanced reasoning models") raises the temperature to keep
the rollouts diverse. An entropy bonus has almost no gradient on a nearly deterministic policy
(``d H / d logits`` vanishes as one probability goes to 1), so it cannot reopen a collapsed
choice; a temperature acts on the sampling at once. The update scores each step at the
temperature that step sampled at (log-probs, ratios, entropy), so the objective stays exact.
Meant for constrained sampling (``rollout.constrained: grammar``), where a hotter sample is still
a valid workflow; unconstrained, it also raises the share of prose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flowgrpo.configuration import check, finite_number


@dataclass(frozen=True)
class EntropyControl:
    """Settings of the adaptive entropy coefficient (``algorithm.entropy_control``).

    Attributes:
        target: the entropy to hold, nats per sampled token (the ``entropy`` metric). None =
            off: the loss uses ``algorithm.loss.entropy_coef`` unchanged. Skywork-OR1 uses 0.2.
        delta: change of the coefficient per training step (Skywork-OR1: 0.005).
        max_coef: the coefficient's upper bound (>= 0), so a policy that cannot raise its
            entropy is not pushed toward uniform noise. 0: the coefficient is not used.
        temperature_delta: change of the sampling temperature per step (>= 0; 0 = the
            temperature stays ``rollout.temperature``). Polaris-style, see the module docstring.
        max_temperature: the sampling temperature's upper bound (>= ``rollout.temperature``).
    """

    target: float | None = None
    delta: float = 0.005
    max_coef: float = 0.05
    temperature_delta: float = 0.0
    max_temperature: float = 1.5

    def __post_init__(self) -> None:
        name = "algorithm.entropy_control"
        check(
            self.target is None or (finite_number(self.target) and self.target > 0),
            f"{name}.target",
            f"must be a positive entropy in nats per token, or null for off; got {self.target!r}",
        )
        check(finite_number(self.delta) and self.delta > 0, f"{name}.delta", "must be > 0")
        ok = finite_number(self.max_coef) and self.max_coef >= 0
        check(ok, f"{name}.max_coef", "must be >= 0")
        check(
            finite_number(self.temperature_delta) and self.temperature_delta >= 0,
            f"{name}.temperature_delta",
            "must be >= 0 (0 keeps the sampling temperature fixed)",
        )
        check(finite_number(self.max_temperature), f"{name}.max_temperature", "must be a number")

    def check_temperature(self, temperature: float) -> None:
        """With the temperature lever on, the rollout must sample (``temperature`` > 0) and
        ``max_temperature`` must not be below it (the lever only raises it)."""
        if self.target is None or self.temperature_delta == 0:
            return
        name = "algorithm.entropy_control"
        check(temperature > 0, f"{name}.temperature_delta", "needs rollout.temperature > 0")
        check(
            self.max_temperature >= temperature,
            f"{name}.max_temperature",
            f"{self.max_temperature} is below rollout.temperature={temperature}; raise it",
        )


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


def next_temperature(
    temperature: float, entropy: float | None, control: EntropyControl, base: float
) -> float:
    """The sampling temperature for the next step after a step measured ``entropy``.

    Up by ``temperature_delta`` below the target, down by it at or above, clamped to
    ``[base, max_temperature]`` (``base`` = ``rollout.temperature``: the lever never cools the
    sampling below what the run asked for). Off, or an unmeasured entropy: unchanged.
    """
    if control.target is None or control.temperature_delta == 0:
        return temperature
    if entropy is None or not math.isfinite(entropy):
        return temperature
    step = control.temperature_delta if entropy < control.target else -control.temperature_delta
    return min(max(temperature + step, base), control.max_temperature)
