"""The best workflow per kind of problem against the best single workflow (issue 40).

A policy that writes one workflow whatever the problem can at best match the best *single*
workflow of a mix of problems (:func:`~operators.simulation.space.best_workflow` on the mix).
The *oracle* picks, for every kind of problem (``SimulationParams.kind``: its difficulty, and
its template where the world sets the template apart), that kind's own best workflow; its
expected reward is the mix-weighted sum of those. The difference, the **oracle gap**, is what
reading the problem can be worth: zero in a world whose best workflow is the same for every
kind (a search over single workflows then finds all there is), positive in an *adaptive* world.

All numbers are exact (:func:`~operators.simulation.analytic.analyze`) and, like everything in
this package, are those of a SIMULATED executor, not of an LLM.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flowgrpo.dsl import Workflow
from flowgrpo.dsl.space import workflow_space
from flowgrpo.operators.interpreter import DEFAULT_LIMITS, Limits
from flowgrpo.operators.simulation.analytic import analyze
from flowgrpo.operators.simulation.params import DIFFICULTIES, SimulationParams
from flowgrpo.operators.simulation.space import (
    ACCURACY,
    Best,
    Tradeoff,
    best_workflow,
    expected_reward,
)
from flowgrpo.operators.tasks.arithmetic import TEMPLATES


@dataclass(frozen=True)
class Oracle:
    """The best single workflow of a mix of problem kinds, and the best of each kind.

    Attributes:
        mix: the kinds and their weights (normalised to sum 1).
        single: the best single workflow on the whole mix.
        per_kind: each kind's own best workflow (scored on that kind alone).
        single_by_kind: the single workflow's expected reward on each kind.
        reward: the oracle's expected reward, ``sum(mix[k] * per_kind[k].reward)``.
    """

    mix: Mapping[str, float]
    single: Best
    per_kind: Mapping[str, Best]
    single_by_kind: Mapping[str, float]
    reward: float

    @property
    def gap(self) -> float:
        """The oracle's expected reward minus the best single workflow's (>= 0)."""
        return self.reward - self.single.reward

    def gap_closed(self, reward: float) -> float:
        """The share of the gap a policy of expected ``reward`` closes (1: the oracle, 0: the
        best single workflow; below 0 when worse than it). NaN when there is no gap."""
        return (reward - self.single.reward) / self.gap if self.gap > 1e-12 else float("nan")


def writable_space(limits: Limits | None = None) -> tuple[str, ...]:
    """The workflows of the canonical space (:func:`flowgrpo.dsl.space.workflow_space`) that a
    run with ``limits`` can write: at most its call budget of worst-case executor calls, votes
    and retries counted (:meth:`Limits.static_limits`; its validation refuses the others).
    With the default budget of 12 calls and operator settings, 1,773 of the 2,275."""
    return workflow_space(limits=(limits or DEFAULT_LIMITS).static_limits())


def kind_mix(params: SimulationParams, problems: Iterable) -> dict[str, float]:
    """The share of each kind (:meth:`SimulationParams.kind_of`) among ``problems``."""
    counts = Counter(params.kind_of(p) for p in problems)
    total = sum(counts.values())
    if not total:
        raise ValueError("kind_mix needs at least one problem")
    return {kind: n / total for kind, n in sorted(counts.items())}


def arithmetic_mix(params: SimulationParams) -> dict[str, float]:
    """The exact mix of kinds of the arithmetic task: its generator draws a difficulty and a
    template uniformly and independently (``operators.tasks.arithmetic``)."""
    weight = 1.0 / (len(DIFFICULTIES) * len(TEMPLATES))
    mix: dict[str, float] = {}
    for level in DIFFICULTIES:
        for template in sorted(TEMPLATES):
            kind = params.kind(level, template)
            mix[kind] = mix.get(kind, 0.0) + weight
    return mix


def oracle(
    params: SimulationParams,
    mix: Mapping[str, float],
    candidates: Iterable[Workflow | str] | None = None,
    limits: Limits | None = None,
    tradeoff: Tradeoff = ACCURACY,
) -> Oracle:
    """The :class:`Oracle` of ``mix`` over ``candidates``, under the run's ``limits`` and reward
    trade-off (as :func:`~.space.best_workflow`). Default candidates: :func:`writable_space`
    of ``limits``, the workflows of the simulation's space a run with that call budget can
    write (its validation refuses the others)."""
    total = float(sum(mix.values()))
    if total <= 0 or any(w < 0 for w in mix.values()):
        raise ValueError(f"a mix needs weights >= 0 with a positive sum: {dict(mix)}")
    shares = {kind: w / total for kind, w in mix.items() if w > 0}
    limits = limits or DEFAULT_LIMITS
    texts = writable_space(limits) if candidates is None else tuple(candidates)
    single = best_workflow(params, shares, texts, limits, tradeoff)
    per_kind = {kind: best_workflow(params, kind, texts, limits, tradeoff) for kind in shares}
    single_by_kind = {
        kind: expected_reward(analyze(single.workflow, params, kind, limits), tradeoff)
        for kind in shares
    }
    reward = sum(w * per_kind[kind].reward for kind, w in shares.items())
    return Oracle(shares, single, per_kind, single_by_kind, max(reward, single.reward))


__all__ = ["Oracle", "arithmetic_mix", "kind_mix", "oracle", "writable_space"]
