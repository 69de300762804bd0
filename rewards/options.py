"""How each reward component scores a sample: :class:`RewardOptions` (validity levels, partial
credit, cost scale, diversity metric), validated on construction.

The defaults and the reasons for them are in :mod:`rewards.spec`, next to the weights they are
balanced against. This module imports nothing from flowgrpo: the components read it, and the
spec combines it with their weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flowgrpo.configuration import check_types, from_dict
from flowgrpo.dsl.validate import DEFAULT_MAX_CALLS

DIVERSITY_METRICS = ("canonical", "structural")

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
            0 calls; more calls are clamped). None: the run's call budget, derived from
            ``executor.max_calls`` by ``TrainConfig`` (:data:`dsl.DEFAULT_MAX_CALLS` outside a
            run). Set it only to score cost on another scale (the studies recorded before 0.3
            used 20).
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
    cost_max_calls: int | None = None
    cost_max_tokens: int | None = None
    diversity_metric: str = "canonical"
    diversity_requires_valid: bool = True
    diversity_history_weight: float = 0.0

    @property
    def cost_calls(self) -> int:
        """The cost score's normaliser: ``cost_max_calls``, or the default call budget."""
        return DEFAULT_MAX_CALLS if self.cost_max_calls is None else self.cost_max_calls

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
        calls = self.cost_calls
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
        check_types(self, "rewards.options.")  # after the rules above: they name the fix

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any] | None, path: str = "rewards.options."
    ) -> RewardOptions:
        """Build from a YAML mapping with the one config style (:mod:`flowgrpo.configuration`):
        unknown keys raise with the closest valid one."""
        return from_dict(cls, data, path)


def _check_unit(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"RewardOptions.{name} must be a number in [0, 1], got {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"RewardOptions.{name} must be in [0, 1], got {value}")
