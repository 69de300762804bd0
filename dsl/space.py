"""The canonical space of math workflows: a finite, documented set built from a grammar.

    workflow := head tail{0..max_tail}
    head     := G | "[" G ", " G ("," G)* "] -> " E      (2..max_branches branches)
    tail     := one of TAILS (Format only as the last step)
    G        := Custom | AnswerGenerate | Programmer        E := ScEnsemble | MdEnsemble

Branches of a head are a multiset (their order does not change an ensemble's result), every
workflow is validated for the math domain and kept once by canonical form. With the defaults
(3 branches, 2 tail steps, a bound of 20 worst-case operator calls, one per operator; the
longest makes 16) it holds 2,275 workflows:
single generators, ensembles of 2-3, and chains with Review/Revise checks, loops of them,
re-generation on FAIL, blind Revise and Format; 2,176 of them within 12 calls counted so. What
a run with ``executor.max_calls: 12`` can write counts MdEnsemble's votes and Programmer's retry
too (``limits=Limits().static_limits()``): 1,773 of them.

It is the set ``flowgrpo search`` searches by default and the SIMULATED executor's optimum is
taken over (``operators.simulation.space``). The shapes are AFlow's hand-designed baselines and
their chains (arXiv 2410.10762, Table 1: IO, CoT-SC, Self-Refine, MedPrompt-style ensembles).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

from flowgrpo.dsl.validate import StaticLimits, validate

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
#: The worst-case operator calls of the space by default (the DSL's bound when the studies of
#: issue 13-20 were recorded): it admits workflows above a 12-call run budget.
SPACE_MAX_CALLS = 20


def workflow_space(
    max_branches: int = 3,
    max_tail: int = 2,
    max_calls: int = SPACE_MAX_CALLS,
    limits: StaticLimits | None = None,
) -> tuple[str, ...]:
    """Canonical texts of the space described in the module docstring, each valid for the math
    domain with at most ``max_calls`` worst-case operator calls (one each), in a fixed order.
    ``limits``: validate with these instead (a run's own, ``Limits.static_limits``, which
    count an operator's retries and votes): the workflows that run can write."""
    return _space(max_branches, max_tail, limits or StaticLimits(max_calls=max_calls))


@lru_cache(maxsize=16)
def _space(max_branches: int, max_tail: int, limits: StaticLimits) -> tuple[str, ...]:
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
        report = validate(" -> ".join((head, *tail)), domain="math", limits=limits)
        if report.ok:
            seen.setdefault(report.canonical, None)
    return tuple(seen)


__all__ = ["ENSEMBLERS", "GENERATORS", "SPACE_MAX_CALLS", "TAILS", "workflow_space"]
