"""The best workflow under the SIMULATED executor, and the regret of any other.

:func:`workflow_space` is a finite, documented space of math workflows, built from a grammar:

    workflow := head tail{0..max_tail}
    head     := G | "[" G ", " G ("," G)* "] -> " E      (2..max_branches branches)
    tail     := one of TAILS (Format only as the last step)
    G        := Custom | AnswerGenerate | Programmer        E := ScEnsemble | MdEnsemble

Branches of a head are a multiset (their order does not change an ensemble's result), every
workflow is validated for the math domain and kept once by canonical form. With the defaults
(3 branches, 2 tail steps) it holds 2,275 workflows: single generators, ensembles of 2-3,
and chains with Review/Revise checks, loops of them, re-generation on FAIL, blind Revise and
Format.

:func:`best_workflow` scores each with :func:`~operators.simulation.analytic.analyze` (exact)
and :func:`regret` is the best expected reward minus a workflow's own (never negative: a
workflow outside the space that beats it is its own best).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from flowgrpo.dsl import DEFAULT_MAX_CALLS, Workflow, canonical, validate
from flowgrpo.operators.interpreter import DEFAULT_LIMITS, Limits
from flowgrpo.operators.simulation.analytic import (
    SPACE_LIMITS,
    Difficulty,
    WorkflowStats,
    analyze,
)
from flowgrpo.operators.simulation.params import SimulationParams

GENERATORS = ("Custom", "AnswerGenerate", "Programmer")
ENSEMBLERS = ("ScEnsemble", "MdEnsemble")
TAILS = (
    "Review ? Revise : done",
    "(Review ? Revise : done) * 2",
    "(Review ? Revise : done) * 3",
    "Review ? Programmer : done",
    "Review ? AnswerGenerate : done",
    "Review ? Custom : done",
    "Revise",
    "Format",
)


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


def workflow_space(max_branches: int = 3, max_tail: int = 2) -> tuple[str, ...]:
    """Canonical texts of the space described in the module docstring."""
    return _space(max_branches, max_tail)


@lru_cache(maxsize=16)
def _space(max_branches: int, max_tail: int) -> tuple[str, ...]:
    heads = list(GENERATORS)
    for k in range(2, max_branches + 1):
        for combo in itertools.combinations_with_replacement(GENERATORS, k):
            heads += [f"[{', '.join(combo)}] -> {e}" for e in ENSEMBLERS]
    tails: list[tuple[str, ...]] = [()]
    for length in range(1, max_tail + 1):
        for combo in itertools.product(TAILS, repeat=length):
            if "Format" not in combo[:-1]:
                tails.append(combo)
    seen: dict[str, None] = {}
    for head, tail in itertools.product(heads, tails):
        report = validate(" -> ".join((head, *tail)), domain="math", limits=SPACE_LIMITS)
        if report.ok:
            seen.setdefault(report.canonical, None)
    return tuple(seen)


def expected_reward(
    stats: WorkflowStats,
    accuracy_weight: float = 1.0,
    cost_weight: float = 0.0,
    cost_max_calls: int = DEFAULT_MAX_CALLS,
) -> float:
    """``accuracy_weight * accuracy + cost_weight * E[cost score]``, the cost score being the
    rewards' ``cost`` component (``1 - min(calls, cost_max_calls) / cost_max_calls``)."""
    reward = accuracy_weight * stats.accuracy
    if cost_weight:
        reward += cost_weight * stats.expected_cost_score(cost_max_calls)
    return reward


def best_workflow(
    params: SimulationParams | None = None,
    difficulty: Difficulty = "medium",
    candidates: Iterable[Workflow | str] | None = None,
    limits: Limits | None = None,
    accuracy_weight: float = 1.0,
    cost_weight: float = 0.0,
    cost_max_calls: int = DEFAULT_MAX_CALLS,
) -> Best:
    """The workflow of ``candidates`` (default :func:`workflow_space`) with the highest expected
    reward on problems of ``difficulty`` (a name or a mix); ties go to the earlier candidate."""
    texts = workflow_space() if candidates is None else tuple(_text(w) for w in candidates)
    if not texts:
        raise ValueError("best_workflow needs at least one candidate workflow")
    weights = (accuracy_weight, cost_weight, cost_max_calls)
    limits = limits or DEFAULT_LIMITS
    return _best(texts, params or SimulationParams(), _key(difficulty), limits, weights)


@lru_cache(maxsize=256)
def _best(texts: tuple[str, ...], params, difficulty, limits: Limits, weights) -> Best:
    mix = dict(difficulty) if isinstance(difficulty, tuple) else difficulty
    best: tuple[float, str, WorkflowStats] | None = None
    for text in texts:
        stats = analyze(text, params, mix, limits)
        reward = expected_reward(stats, *weights)
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
    accuracy_weight: float = 1.0,
    cost_weight: float = 0.0,
    cost_max_calls: int = DEFAULT_MAX_CALLS,
) -> Regret:
    """Best expected reward (:func:`best_workflow`) minus ``workflow``'s.

    None, or text that is not a valid math workflow, scores 0 (as the accuracy reward gives a
    fallback or an invalid workflow); ``Regret.workflow`` is then None. A valid workflow with an
    operator the simulation does not model (CustomCodeGenerate, Test) raises ``ValueError``.
    Pass the run's ``limits`` (``operators.executor.executor_limits(section)``): the call
    budget changes what a workflow achieves.
    """
    params = params or SimulationParams()
    weights = {
        "accuracy_weight": accuracy_weight,
        "cost_weight": cost_weight,
        "cost_max_calls": cost_max_calls,
    }
    best = best_workflow(params, difficulty, candidates, limits, **weights)
    report = validate(workflow, domain="math") if workflow is not None else None
    if report is None or not report.ok:
        return Regret(None, 0.0, best.workflow, best.reward, best.reward)
    text = report.canonical
    own = expected_reward(analyze(text, params, difficulty, limits), **weights)
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
    "ENSEMBLERS",
    "GENERATORS",
    "TAILS",
    "Best",
    "Regret",
    "best_workflow",
    "expected_reward",
    "regret",
    "workflow_space",
]
