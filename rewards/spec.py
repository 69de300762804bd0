"""Reward configuration: which components, with which weights (:class:`RewardSpec`), and the
options they score with (:class:`~rewards.options.RewardOptions`, re-exported here).

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

from flowgrpo.rewards.components import REWARD_COMPONENTS
from flowgrpo.rewards.options import DIVERSITY_METRICS, RewardOptions

__all__ = ["DEFAULT_WEIGHTS", "DIVERSITY_METRICS", "RewardOptions", "RewardSpec"]

DEFAULT_WEIGHTS = MappingProxyType(
    {"validity": 0.3, "accuracy": 1.0, "diversity": 0.1, "cost": 0.05}
)


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
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"reward component names are non-empty strings, got {name!r}")
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

    def check_names(self) -> None:
        """Look every component up in :data:`REWARD_COMPONENTS` (a dotted path is imported and
        registered here); unknown names raise ``ValueError`` listing the choices. Not done at
        construction (a spec is data; a plugin may register its components later): a run
        environment's build calls it, and scoring looks each name up anyway."""
        for name in self.weights:
            REWARD_COMPONENTS.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """Components with a positive weight, in spec order (the table's columns)."""
        return tuple(n for n, w in self.weights.items() if w > 0)

    @property
    def active_weights(self) -> tuple[float, ...]:
        """Weights of :attr:`names`, same order."""
        return tuple(float(self.weights[n]) for n in self.names)

    def for_one_workflow(self) -> RewardSpec:
        """The part of this reward that judges which workflow to write: ``accuracy`` and
        ``cost`` at their weights here (both 0, as in a validity-only run: accuracy alone, weight
        1), the same options. What ``flowgrpo search`` ranks and the simulated executor's
        ``sim/regret`` is measured in, so the two agree."""
        accuracy = float(self.weights.get("accuracy", 0.0))
        cost = float(self.weights.get("cost", 0.0))
        if accuracy == 0.0 and cost == 0.0:
            accuracy = 1.0
        return RewardSpec({"accuracy": accuracy, "cost": cost}, self.options)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RewardSpec:
        """Build from YAML: ``{weights: {...}, options: {...}}`` or just ``{component: weight}``.

        An empty or None mapping gives the defaults.
        """
        if data is not None and not isinstance(data, Mapping):
            raise ValueError(f"rewards must be a mapping {{weights: ..., options: ...}} or "
                             f"{{component: weight}}, got {data!r}")  # fmt: skip
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
