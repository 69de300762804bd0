"""What changes between training steps, in one immutable value: :class:`StepState`.

Everything else a step reads is fixed for the run (the config, the run environment, the update
settings built from the config). The values that move -- the entropy controller's coefficient
and the entropy it answered, the temperature of a tied step's replacement rounds -- are produced
by one pure function, :func:`next_state`, from the state before the step, the step's metrics
line and the config; the Trainer keeps the latest state and saves it in each checkpoint, so a
resumed run continues with the same values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from flowgrpo.trainer.algorithms.entropy_control import applied_entropy_coef, next_entropy_coef
from flowgrpo.trainer.config import RolloutConfig, TrainConfig

__all__ = ["StepState", "initial_state", "next_state", "next_tie_temperature", "state_metrics"]


@dataclass(frozen=True)
class StepState:
    """The values a step reads that earlier steps set.

    Attributes:
        entropy_coef: the entropy controller's coefficient (``algorithm.entropy_control``,
            Skywork-OR1 arXiv 2505.22312); ``algorithm.loss.entropy_coef`` when it is off.
        last_entropy: the entropy (nats/token) the coefficient last answered; None before the
            first step. The loss applies the coefficient only while it is at or below the
            target (:func:`..algorithms.entropy_control.applied_entropy_coef`).
        tie_temperature: the sampling temperature of the replacement rounds if every group of
            the next step ties (``rollout.tie_temperature``, Polaris-style exploration, An et
            al. 2025); None: off.
    """

    entropy_coef: float
    last_entropy: float | None = None
    tie_temperature: float | None = None

    def applied_entropy_coef(self, config: TrainConfig) -> float:
        """The entropy coefficient the next update's loss uses."""
        control = config.algorithm.entropy_control
        return applied_entropy_coef(self.entropy_coef, self.last_entropy, control)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], config: TrainConfig) -> StepState:
        """A saved state; missing keys (a checkpoint of an older release) take their initial
        values."""
        start = initial_state(config)
        return cls(
            entropy_coef=float(data.get("entropy_coef", start.entropy_coef)),
            last_entropy=data.get("last_entropy", start.last_entropy),
            tie_temperature=data.get("tie_temperature", start.tie_temperature),
        )


def initial_state(config: TrainConfig) -> StepState:
    """The state before the first step."""
    return StepState(
        entropy_coef=config.algorithm.loss.entropy_coef,
        tie_temperature=config.rollout.tie_temperature,
    )


def next_state(state: StepState, metrics: Mapping[str, Any], config: TrainConfig) -> StepState:
    """The state after a step whose metrics line is ``metrics`` (its ``entropy``,
    ``resample_temperature`` and ``kept_groups``). Pure: the same inputs give the same state."""
    control = config.algorithm.entropy_control
    entropy = metrics.get("entropy")
    entropy = float(entropy) if entropy is not None and math.isfinite(entropy) else None
    coef, last = state.entropy_coef, state.last_entropy
    if control.target is not None:
        coef, last = next_entropy_coef(state.entropy_coef, entropy, control), entropy
    return StepState(
        entropy_coef=coef,
        last_entropy=last,
        tie_temperature=next_tie_temperature(config.rollout, metrics),
    )


def next_tie_temperature(rollout: RolloutConfig, last: Mapping[str, Any] | None) -> float | None:
    """The tie temperature of the next step, from the last step's metrics line: raised by
    ``tie_temperature_step`` (up to ``max_tie_temperature``) when the last step tied and its hot
    rounds kept no group (a collapsed policy keeps sharpening: a fixed temperature ties again
    after a few steps); held when they kept some; ``tie_temperature`` after an untied step."""
    if rollout.tie_temperature is None:
        return None
    hot = None if last is None else last.get("resample_temperature")
    if hot is None:
        return rollout.tie_temperature
    if last.get("kept_groups"):
        return float(hot)
    return min(float(hot) + rollout.tie_temperature_step, rollout.max_tie_temperature)


def state_metrics(state: StepState, config: TrainConfig, updated: bool) -> dict[str, Any]:
    """The metrics line's record of the state a step ran with: ``entropy_coef``, the
    coefficient the update applied (0 when the step made no update), with the controller on;
    nothing otherwise."""
    if config.algorithm.entropy_control.target is None:
        return {}
    return {"entropy_coef": state.applied_entropy_coef(config) if updated else 0.0}
