"""Reward configuration: options of the components (:class:`RewardOptions`) and weights
(:class:`RewardSpec`).

Defaults and why (the combined default reward must order fallback < invalid < valid-but-wrong <
correct; the arithmetic below shows it holds even when the *other* components differ, not only
when they are equal):

* validity levels ``0.0 / 0.1 / 0.4 / 0.9 / 1.0`` (fallback / syntax error / semantic errors /
  valid with warnings / valid), weight 0.3. The jump from any invalid workflow (at most
  0.4 * 0.3 = 0.12) to any valid one (at least 0.9 * 0.3 = 0.27) is 0.15, larger than the
  most diversity (0.1) plus cost (0.05) can add, so no bonus makes an invalid workflow beat a
  valid one. Cost is 0 for unexecuted (invalid) workflows anyway, and diversity is 0 for them by
  default (``diversity_requires_valid``).
* accuracy weight 1.0: a correct answer beats a wrong one by 1.0, more than validity (at most
  0.03 between valid levels), diversity (0.1) and cost (0.05) together. With graded code
  credit (on by default) a nearly passing program earns up to ``max_partial_credit`` (0.9).
* diversity weight 0.1 and cost weight 0.05: tie-breakers, small enough never to reorder the
  four cases above.
* ``diversity_history_weight`` 0.0: by default the reward is a function of the group alone
  (reproducible, permutation and batch-size independent, nothing to checkpoint). Raise it
  (e.g. 0.25) when the policy collapses onto one workflow across batches.
* ``graded_math`` off: tiers of relative error reward "close" numbers, which on arithmetic
  rewards sloppy answers; ``graded_code`` on: the fraction of tests passed is a real signal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

DIVERSITY_METRICS = ("canonical", "structural")

DEFAULT_WEIGHTS = MappingProxyType(
    {"validity": 0.3, "accuracy": 1.0, "diversity": 0.1, "cost": 0.05}
)

_LEVELS = (
    "validity_fallback",
    "validity_syntax_error",
    "validity_semantic_error",
    "validity_warnings",
    "validity_valid",
)


@dataclass(frozen=True)
class RewardOptions:
    """How each component scores a sample (every score lies in [0, 1]).

    Attributes:
        validity_fallback: no workflow in the output (prose).
        validity_syntax_error: a workflow that does not parse.
        validity_semantic_error: parses, but validation found errors.
        validity_warnings: valid, with warnings (e.g. a loop without a checker).
        validity_valid: valid, no warnings. The five levels must strictly increase.
        graded_math: partial credit for wrong numbers by relative error (tiers 0.7 / 0.4 / 0.2 /
            0, :data:`operators.checkers.GRADED_TIERS`); off: wrong is 0.
        graded_code: partial credit = fraction of hidden tests passed; off: wrong is 0.
        graded_qa: partial credit = token F1; off: only an exact match scores.
        max_partial_credit: cap on partial credit for a wrong answer, so a correct answer always
            earns at least ``1 - max_partial_credit`` more accuracy. In [0, 1).
        cost_max_calls: executor LLM calls at which the cost score reaches 0 (linear from 1 at
            0 calls; more calls are clamped).
        cost_max_tokens: executor tokens at which the token part reaches 0; None ignores tokens.
            When set, cost is the mean of the call part and the token part.
        diversity_metric: ``canonical`` (share of siblings with a different canonical form) or
            ``structural`` (mean multiset-Jaccard distance of operators and constructs).
        diversity_requires_valid: only valid workflows earn diversity (invalid ones get 0), so
            the policy is not paid for exploring invalid workflows.
        diversity_history_weight: in [0, 1]: share of the diversity score taken from rarity
            against recent batches (:class:`rewards.history.RecentWorkflows`); the rest comes
            from the group. Ignored (group only) when no history is given.
    """

    validity_fallback: float = 0.0
    validity_syntax_error: float = 0.1
    validity_semantic_error: float = 0.4
    validity_warnings: float = 0.9
    validity_valid: float = 1.0
    graded_math: bool = False
    graded_code: bool = True
    graded_qa: bool = False
    max_partial_credit: float = 0.9
    cost_max_calls: int = 20
    cost_max_tokens: int | None = None
    diversity_metric: str = "canonical"
    diversity_requires_valid: bool = True
    diversity_history_weight: float = 0.0

    def __post_init__(self):
        levels = [getattr(self, name) for name in _LEVELS]
        for name, value in zip(_LEVELS, levels):
            _check_unit(name, value)
        for low, high, a, b in zip(levels, levels[1:], _LEVELS, _LEVELS[1:]):
            if not low < high:
                raise ValueError(
                    f"RewardOptions: validity levels must strictly increase, but {a}={low} >= "
                    f"{b}={high}; order them fallback < syntax_error < semantic_error < "
                    "warnings < valid"
                )
        _check_unit("max_partial_credit", self.max_partial_credit)
        if self.max_partial_credit >= 1.0:
            raise ValueError(
                "RewardOptions.max_partial_credit must be below 1 so that a correct answer "
                f"outscores a wrong one, got {self.max_partial_credit}; use e.g. 0.9"
            )
        calls = self.cost_max_calls
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise ValueError(f"RewardOptions.cost_max_calls must be an int >= 1, got {calls!r}")
        if self.cost_max_tokens is not None and (
            not isinstance(self.cost_max_tokens, int) or self.cost_max_tokens < 1
        ):
            raise ValueError(
                "RewardOptions.cost_max_tokens must be a positive int or None (ignore tokens), "
                f"got {self.cost_max_tokens!r}"
            )
        if self.diversity_metric not in DIVERSITY_METRICS:
            raise ValueError(
                f"RewardOptions.diversity_metric must be one of {DIVERSITY_METRICS}, "
                f"got {self.diversity_metric!r}"
            )
        _check_unit("diversity_history_weight", self.diversity_history_weight)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RewardOptions:
        """Build from a YAML mapping; unknown keys raise with the list of valid ones."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown reward option(s) {unknown}; valid options: {sorted(known)}")
        return cls(**data)


def _check_unit(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"RewardOptions.{name} must be a number in [0, 1], got {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"RewardOptions.{name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class RewardSpec:
    """Which components make the reward and their weights.

    ``weights`` maps component names (registered in
    :data:`rewards.components.REWARD_COMPONENTS`, or dotted paths ``"my_pkg.mod:fn"``) to finite
    weights >= 0; at least one must be positive. Components with weight 0 are not
    computed. The order of ``weights`` is the column order of the reward table.

    >>> RewardSpec().names
    ('validity', 'accuracy', 'diversity', 'cost')
    >>> RewardSpec.from_dict({"validity": 1.0, "format": 0.5}).names
    ('validity', 'format')
    """

    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    options: RewardOptions = field(default_factory=RewardOptions)

    def __post_init__(self):
        from flowgrpo.rewards.components import REWARD_COMPONENTS

        if not isinstance(self.weights, Mapping):
            raise ValueError(
                "RewardSpec.weights must be a mapping {component: weight}, "
                f"got {type(self.weights).__name__}"
            )
        if not isinstance(self.options, RewardOptions):
            raise ValueError(
                "RewardSpec.options must be a RewardOptions (use RewardSpec.from_dict for a "
                f"mapping), got {type(self.options).__name__}"
            )
        for name, weight in self.weights.items():
            REWARD_COMPONENTS.get(name)  # unknown names raise, listing the choices
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise ValueError(f"reward weight of {name!r} must be a number, got {weight!r}")
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(
                    f"reward weight of {name!r} must be finite and >= 0, got {weight}; "
                    "use 0 to switch a component off"
                )
        if not any(w > 0 for w in self.weights.values()):
            raise ValueError(
                "RewardSpec needs at least one component with a positive weight, got "
                f"{dict(self.weights)}; e.g. {dict(DEFAULT_WEIGHTS)}"
            )
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))

    @property
    def names(self) -> tuple[str, ...]:
        """Components with a positive weight, in spec order (the table's columns)."""
        return tuple(n for n, w in self.weights.items() if w > 0)

    @property
    def active_weights(self) -> tuple[float, ...]:
        """Weights of :attr:`names`, same order."""
        return tuple(float(self.weights[n]) for n in self.names)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RewardSpec:
        """Build from YAML: ``{weights: {...}, options: {...}}`` or just ``{component: weight}``.

        An empty or None mapping gives the defaults.
        """
        data = dict(data or {})
        if not data:
            return cls()
        if set(data) <= {"weights", "options"}:
            weights = data.get("weights")
            options = RewardOptions.from_dict(data.get("options"))
            return cls(dict(DEFAULT_WEIGHTS) if weights is None else dict(weights), options)
        if "weights" in data or "options" in data:
            extra = sorted(set(data) - {"weights", "options"})
            raise ValueError(
                f"reward config mixes 'weights'/'options' with other keys {extra}; put component "
                "weights under 'weights' and component options under 'options'"
            )
        return cls(data)

    def to_dict(self) -> dict[str, Any]:
        """The inverse of :meth:`from_dict` (for logging and checkpoints)."""
        options = {f.name: getattr(self.options, f.name) for f in fields(RewardOptions)}
        return {"weights": dict(self.weights), "options": options}
