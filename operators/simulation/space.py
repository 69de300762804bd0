"""The best workflow under the SIMULATED executor, and the regret of any other.

:func:`best_workflow` scores each workflow of a space (default: the DSL's canonical space,
:func:`flowgrpo.dsl.space.workflow_space`, 2,275 workflows) with
:func:`~operators.simulation.analytic.analyze` (exact) and :func:`regret` is the best expected
reward minus a workflow's (never negative: a workflow outside the space that beats it is its own
best).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from flowgrpo.dsl import DEFAULT_MAX_CALLS, Workflow, canonical, validate
from flowgrpo.dsl.space import ENSEMBLERS, GENERATORS, TAILS, workflow_space
from flowgrpo.operators.interpreter import DEFAULT_LIMITS, Limits
from flowgrpo.operators.simulation.analytic import (
    Difficulty,
    WorkflowStats,
    analyze,
)
from flowgrpo.operators.simulation.params import SimulationParams


@dataclass(frozen=True)
class Best:
    """The best workflow of a space.

    Attributes:
        workflow: its canonical text.
        reward: its expected reward (:func:`expected_reward`).
        stats: its exact accuracy and calls.
        considered: how many workflows were scored.
    """

    workflow: str
    reward: float
    stats: WorkflowStats
    considered: int


@dataclass(frozen=True)
class Regret:
    """A workflow's expected reward against the best achievable one.

    Attributes:
        workflow: the canonical text of the workflow scored (None: invalid or no workflow).
        reward: its expected reward (0 for None).
        best: the best workflow (the scored one itself when it beats the space).
        best_reward: the best expected reward.
        regret: ``best_reward - reward`` (>= 0).
    """

    workflow: str | None
    reward: float
    best: str
    best_reward: float
    regret: float


@dataclass(frozen=True)
class Tradeoff:
    """What a workflow's exact statistics are worth as reward: ``accuracy_weight * accuracy +
    cost_weight * E[cost score]``, the cost score being the rewards' ``cost`` component
    (``1 - min(calls, cost_max_calls) / cost_max_calls``, :mod:`flowgrpo.rewards.components`).
    A run's: its ``rewards.weights`` accuracy and cost and ``rewards.options.cost_max_calls``.
    """

    accuracy_weight: float = 1.0
    cost_weight: float = 0.0
    cost_max_calls: int = DEFAULT_MAX_CALLS


#: Accuracy alone: the default trade-off.
ACCURACY = Tradeoff()


def expected_reward(stats: WorkflowStats, tradeoff: Tradeoff = ACCURACY) -> float:
    """The expected reward of a workflow whose exact statistics are ``stats``."""
    reward = tradeoff.accuracy_weight * stats.accuracy
    if tradeoff.cost_weight:
        reward += tradeoff.cost_weight * stats.expected_cost_score(tradeoff.cost_max_calls)
    return reward


def best_workflow(
    params: SimulationParams | None = None,
    difficulty: Difficulty = "medium",
    candidates: Iterable[Workflow | str] | None = None,
    limits: Limits | None = None,
    tradeoff: Tradeoff = ACCURACY,
) -> Best:
    """The workflow of ``candidates`` (default :func:`workflow_space`) with the highest expected
    reward on problems of ``difficulty`` (a name or a mix); ties go to the earlier candidate."""
    texts = workflow_space() if candidates is None else tuple(_text(w) for w in candidates)
    if not texts:
        raise ValueError("best_workflow needs at least one candidate workflow")
    limits = limits or DEFAULT_LIMITS
    return _best(texts, params or SimulationParams(), _key(difficulty), limits, tradeoff)


@lru_cache(maxsize=256)
def _best(texts: tuple[str, ...], params, difficulty, limits: Limits, tradeoff) -> Best:
    mix = dict(difficulty) if isinstance(difficulty, tuple) else difficulty
    best: tuple[float, str, WorkflowStats] | None = None
    for text in texts:
        stats = analyze(text, params, mix, limits)
        reward = expected_reward(stats, tradeoff)
        if best is None or reward > best[0] + 1e-12:
            best = (reward, text, stats)
    assert best is not None
    return Best(best[1], best[0], best[2], len(texts))


def regret(
    workflow: Workflow | str | None,
    params: SimulationParams | None = None,
    difficulty: Difficulty = "medium",
    candidates: Iterable[Workflow | str] | None = None,
    limits: Limits | None = None,
    tradeoff: Tradeoff = ACCURACY,
) -> Regret:
    """Best expected reward (:func:`best_workflow`) minus ``workflow``'s.

    None, or text that is not a valid math workflow, scores 0 (as the accuracy reward gives a
    fallback or an invalid workflow); ``Regret.workflow`` is then None. A valid workflow with an
    operator the simulation does not model (CustomCodeGenerate, Test) raises ``ValueError``.
    Pass the run's ``limits`` (``operators.executor.executor_limits(section)``): the call
    budget changes what a workflow achieves.
    """
    params = params or SimulationParams()
    best = best_workflow(params, difficulty, candidates, limits, tradeoff)
    report = validate(workflow, domain="math") if workflow is not None else None
    if report is None or not report.ok:
        return Regret(None, 0.0, best.workflow, best.reward, best.reward)
    text = report.canonical
    own = expected_reward(analyze(text, params, difficulty, limits), tradeoff)
    if own > best.reward:
        return Regret(text, own, text, own, 0.0)
    return Regret(text, own, best.workflow, best.reward, best.reward - own)


def _text(workflow: Workflow | str) -> str:
    return canonical(workflow) if isinstance(workflow, Workflow) else workflow


def _key(difficulty: Difficulty):
    if isinstance(difficulty, Mapping):  # hashable for the cache
        return tuple(sorted(difficulty.items()))
    return difficulty


__all__ = [
    "ACCURACY",
    "ENSEMBLERS",
    "GENERATORS",
    "TAILS",
    "Best",
    "Regret",
    "Tradeoff",
    "best_workflow",
    "expected_reward",
    "regret",
    "workflow_space",
]
