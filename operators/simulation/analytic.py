"""Exact expected accuracy and executor calls of any workflow under the SIMULATED executor.

:func:`analyze` propagates a probability distribution over an abstract state through the AST,
following :mod:`operators.interpreter` step by step:

* the state is (solution class NONE/RIGHT/WRONG, number of candidates, number of right ones,
  whether the feedback is a Review FAIL critique, whether the last checker passed, LLM calls so
  far, whether the call budget stopped the run);
* ``A -> B`` runs in order and, inside a loop, skips the rest once a checker passed;
  ``X ? A : B`` resets the verdict, runs X, then A on FAIL, B on PASS; ``(body) * n`` resets
  the verdict before each pass and stops once it passed; ``[A, B]`` runs each branch from the
  same state, the non-empty solutions become the candidates in branch order, the first one the
  solution, and the feedback and verdict are cleared;
* the call budget (``Limits.max_llm_calls``) is checked before every round of calls, as the
  interpreter does: a sequential step that would exceed it stops the run with the solution it
  has; inside a parallel block the branches' rounds are merged in lockstep (round k of the block
  is round k of every branch), and a stop there leaves the solution from before the block.

Every simulated draw is independent given the problem's latent class, so the analysis is exact:
it mixes the classes with their ``latent_shares``. The wall-clock limit is not
modelled (simulated calls take no time). Code problems (CustomCodeGenerate, Test) are not
simulated and raise.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from flowgrpo.dsl import (
    DEFAULT_MAX_CALLS,
    Cond,
    Loop,
    Node,
    Op,
    Parallel,
    Seq,
    StaticLimits,
    Visitor,
    Workflow,
    count_calls,
    op_nodes,
    steps_of,
    validate,
)
from flowgrpo.operators.interpreter import DEFAULT_LIMITS, Limits
from flowgrpo.operators.ops import OpSettings
from flowgrpo.operators.simulation import model
from flowgrpo.operators.simulation.model import NONE, RIGHT, WRONG
from flowgrpo.operators.simulation.params import Probs, SimulationParams

Difficulty = str | Mapping[str, float] | None
"""A problem kind (a difficulty name, or ``difficulty/template`` where the world overrides the
template: ``SimulationParams.kind``), a mix ``{kind: weight}`` (weights are normalised), or None
for ``SimulationParams.default_difficulty`` (problems that carry no difficulty)."""

_SIMULATED = frozenset(
    (
        "Custom",
        "AnswerGenerate",
        "Programmer",
        "Review",
        "Revise",
        "Format",
        "ScEnsemble",
        "MdEnsemble",
    )
)


class _S(NamedTuple):
    sol: int
    n: int
    c: int
    critique: bool
    passed: bool
    calls: int | tuple[int, ...]  # sequential: calls so far; in a parallel block: see _Ctx
    stopped: bool


Dist = dict[_S, float]


@dataclass(frozen=True)
class _Ctx:
    """What is fixed while walking one subtree.

    ``in_par``: inside a parallel block (no budget checks; ``calls`` counts the branch's own
    calls). ``rounds``: there, ``calls`` is the tuple of calls per round (needed only when the
    budget may stop the block; otherwise a total capped at budget + 1).
    """

    probs: Probs
    retries: int
    votes: int
    budget: int
    loop_depth: int = 0
    in_par: bool = False
    rounds: bool = False


@dataclass(frozen=True)
class WorkflowStats:
    """The exact behaviour of one workflow under the simulation.

    Attributes:
        accuracy: probability that the final answer is right.
        expected_calls: expected LLM calls (what ``ExecutionResult.calls`` reports).
        calls: distribution of the number of LLM calls, ``{calls: probability}``.
        budget_stop: probability that the call budget stopped the run.
    """

    accuracy: float
    expected_calls: float
    calls: Mapping[int, float]
    budget_stop: float

    def expected_cost_score(self, cost_max_calls: int = DEFAULT_MAX_CALLS) -> float:
        """E[1 - min(calls, M) / M]: the rewards' ``cost`` component (without tokens)."""
        m = cost_max_calls
        return sum(p * (1.0 - min(k, m) / m) for k, p in self.calls.items())


def analyze(
    workflow: Workflow | str,
    params: SimulationParams | None = None,
    difficulty: Difficulty = "medium",
    limits: Limits | None = None,
) -> WorkflowStats:
    """Exact accuracy and call counts of ``workflow`` on a math problem of ``difficulty``
    (expected over problems of that difficulty, i.e. over the latent class, and over draws).

    Raises ``ValueError`` for an invalid workflow or one using an operator the simulation
    does not model (CustomCodeGenerate, Test).
    """
    params = params or SimulationParams()
    limits = limits or DEFAULT_LIMITS
    canonical = _checked(workflow)
    mix = _mix(difficulty, params)
    parts = [(w, _analyze_level(canonical, params, level, limits)) for level, w in mix]
    calls: dict[int, float] = {}
    for w, stats in parts:
        for k, p in stats.calls.items():
            calls[k] = calls.get(k, 0.0) + w * p
    return WorkflowStats(
        accuracy=sum(w * s.accuracy for w, s in parts),
        expected_calls=sum(w * s.expected_calls for w, s in parts),
        calls=dict(sorted(calls.items())),
        budget_stop=sum(w * s.budget_stop for w, s in parts),
    )


#: The static bound of the workflows the analysis (and the space of issue 13) takes: 20
#: worst-case operator calls, the DSL's default before the one call budget, kept so the recorded
#: regrets reproduce. It admits workflows above a run's budget (12 by default): the analysis
#: scores them with the interpreter's cut, and a run's validation refuses them since 0.3
#: (``operators.interpreter.Limits.static_limits``). research/RECORD.md, issue 41.
SPACE_LIMITS = StaticLimits(max_calls=20)


def _checked(workflow: Workflow | str) -> str:
    report = validate(workflow, domain="math", limits=SPACE_LIMITS)
    if not report.ok:
        first = report.errors[0]
        raise ValueError(f"invalid workflow {workflow!s:.80}: {first.code}: {first.message}")
    unsupported = sorted(set(report.operators) - _SIMULATED)
    if unsupported:
        raise ValueError(f"the simulation does not model {unsupported} (math operators only)")
    return report.canonical


def _mix(difficulty: Difficulty | None, params: SimulationParams) -> list[tuple[str, float]]:
    """(kind, weight) pairs; None is the default difficulty, unknown kinds raise."""
    if difficulty is None or isinstance(difficulty, str):
        difficulty = {difficulty or params.default_difficulty: 1.0}
    unknown = sorted(set(difficulty) - set(params.kinds()))
    if unknown:
        raise ValueError(f"unknown problem kind {unknown}; use one of {params.kinds()} (or None)")
    total = float(sum(difficulty.values()))
    if total <= 0 or any(w < 0 for w in difficulty.values()):
        raise ValueError(f"difficulty mix weights must be >= 0 with a positive sum: {difficulty}")
    return [(level, w / total) for level, w in difficulty.items() if w > 0]


@lru_cache(maxsize=65536)
def _analyze_level(
    canonical: str, params: SimulationParams, level: str, limits: Limits
) -> WorkflowStats:
    report = validate(canonical, domain="math")
    root = report.workflow.root
    calls: dict[int, float] = {}
    accuracy = stop = 0.0
    for latent, weight in model.latent_classes(params):
        ctx = _Ctx(
            params.probs(level, latent),
            limits.ops.programmer_retries,
            limits.ops.md_votes,
            limits.max_llm_calls,
        )
        start = _S(NONE, 0, 0, False, False, 0, False)
        for s, p in _run_root(root, start, ctx).items():
            accuracy += weight * p * (s.sol == RIGHT)
            stop += weight * p * s.stopped
            calls[s.calls] = calls.get(s.calls, 0.0) + weight * p
    expected = sum(k * p for k, p in calls.items())
    return WorkflowStats(accuracy, expected, dict(sorted(calls.items())), stop)


# --------------------------------------------------------------------------- the walk


def _run_root(root: Node, start: _S, ctx: _Ctx) -> Dist:
    """The whole workflow. Between top-level steps, parts of the state that no later step
    reads are forgotten (candidates without a later ensembler, a critique without a later
    Revise, the verdict, which only a loop or a conditional reads after resetting it), so
    states that differ only there merge; the result is the same, found faster."""
    dist: Dist = {start: 1.0}
    for step, keep_candidates, keep_critique in _step_plan(root):
        dist = _exec(step, dist, ctx)
        forgotten: Dist = {}
        for s, p in dist.items():
            if not s.stopped and (
                s.passed
                or (s.critique and not keep_critique)
                or ((s.n or s.c) and not keep_candidates)
            ):
                kept = keep_candidates  # a constructor call: _replace costs 3x as much here
                s = _S(s.sol, s.n if kept else 0, s.c if kept else 0,
                       s.critique and keep_critique, False, s.calls, s.stopped)  # fmt: skip
            if p > 0.0:
                forgotten[s] = forgotten.get(s, 0.0) + p
        dist = forgotten
    return dist


@lru_cache(maxsize=65536)
def _step_plan(root: Node) -> tuple[tuple[Node, bool, bool], ...]:
    """Each top-level step of ``root`` with whether a later step reads the candidates (an
    ensembler) and the critique (Revise): computed once per workflow, not per walk."""
    steps = steps_of(root)
    plan = []
    for i, step in enumerate(steps):
        later = {n.name for rest in steps[i + 1 :] for n in op_nodes(rest)}
        plan.append((step, bool(later & {"ScEnsemble", "MdEnsemble"}), "Revise" in later))
    return tuple(plan)


def _add(out: Dist, s: _S, p: float) -> None:
    if p > 0.0:
        out[s] = out.get(s, 0.0) + p


def _exec(node: Node | None, dist: Dist, ctx: _Ctx) -> Dist:
    """Run ``node`` on a distribution: each running state through its (cached) kernel."""
    if node is None or not dist:
        return dist
    out: Dist = {}
    kernels = _kernels(node, ctx)  # hashed once per call: a node's hash walks its subtree
    for s, p in dist.items():
        if s.stopped:  # the run ended: nothing else happens
            _add(out, s, p)
            continue
        kernel = kernels.get(s)
        if kernel is None:
            kernel = kernels[s] = tuple(_Kernel().visit(node, s, ctx).items())
        for t, q in kernel:  # _add inlined: the walk's innermost loop
            pq = p * q
            if pq > 0.0:
                out[t] = out.get(t, 0.0) + pq
    return out


@lru_cache(maxsize=1 << 14)
def _kernels(node: Node, ctx: _Ctx) -> dict[_S, tuple[tuple[_S, float], ...]]:
    """The distribution after ``node`` from each single state met so far, filled as states
    come (shared by workflows that contain the same subtree, which makes scoring a whole
    space fast)."""
    return {}


class _Kernel(Visitor[Dist]):
    """``visit(node, s, ctx)``: the distribution after ``node`` from the single state ``s``."""

    def visit_op(self, node: Op, s: _S, ctx: _Ctx) -> Dist:
        out: Dist = {}
        for q, t in _transitions(node.name, s, ctx):
            _add(out, t, q)
        return out

    def visit_seq(self, node: Seq, s: _S, ctx: _Ctx) -> Dist:
        return _seq(node, {s: 1.0}, ctx)

    def visit_parallel(self, node: Parallel, s: _S, ctx: _Ctx) -> Dist:
        return _parallel(node, {s: 1.0}, ctx)

    def visit_cond(self, node: Cond, s: _S, ctx: _Ctx) -> Dist:
        return _cond(node, {s: 1.0}, ctx)

    def visit_loop(self, node: Loop, s: _S, ctx: _Ctx) -> Dist:
        return _loop(node, {s: 1.0}, ctx)


def _split(dist: Dist, finished) -> tuple[Dist, Dist]:
    done: Dist = {}
    active: Dist = {}
    for s, p in dist.items():
        _add(done if finished(s) else active, s, p)
    return done, active


def _merge(*dists: Dist) -> Dist:
    out: Dist = {}
    for dist in dists:
        for s, p in dist.items():
            _add(out, s, p)
    return out


def _seq(node: Seq, dist: Dist, ctx: _Ctx) -> Dist:
    done: Dist = {}
    for step in node.steps:
        dist = _exec(step, dist, ctx)
        # interpreter: inside a loop, a passed checker ends the body (and a stop ends the run)
        finished, dist = _split(dist, lambda s: s.stopped or (ctx.loop_depth > 0 and s.passed))
        done = _merge(done, finished)
    return _merge(done, dist)


def _reset_verdict(dist: Dist) -> Dist:
    return _merge({s._replace(passed=False) if not s.stopped else s: p for s, p in dist.items()})


def _cond(node: Cond, dist: Dist, ctx: _Ctx) -> Dist:
    dist = _exec(node.check, _reset_verdict(dist), ctx)
    stopped, dist = _split(dist, lambda s: s.stopped)
    passed, failed = _split(dist, lambda s: s.passed)
    return _merge(stopped, _exec(node.if_pass, passed, ctx), _exec(node.if_fail, failed, ctx))


def _loop(node: Loop, dist: Dist, ctx: _Ctx) -> Dist:
    inner = dataclasses.replace(ctx, loop_depth=ctx.loop_depth + 1)
    done, active = _split(dist, lambda s: s.stopped)
    for _ in range(node.count):
        active = _exec(node.body, _reset_verdict(active), inner)
        finished, active = _split(active, lambda s: s.stopped or s.passed)
        done = _merge(done, finished)
    return _merge(done, active)


# --------------------------------------------------------------------------- operators


def _spend(s: _S, asks: int, ctx: _Ctx) -> _S:
    """One round of ``asks`` LLM calls (0: a sandbox round), with the interpreter's budget
    check (``calls + asks > max_llm_calls`` stops the run before the round)."""
    if ctx.in_par:
        if ctx.rounds:
            return s._replace(calls=(*s.calls, asks))
        return s._replace(calls=min(s.calls + asks, ctx.budget + 1))
    if s.calls + asks > ctx.budget:
        return s._replace(stopped=True)
    return s._replace(calls=s.calls + asks)


def _right_or_wrong(t: _S, q: float) -> list[tuple[float, _S]]:
    return [(q, t._replace(sol=RIGHT)), (1.0 - q, t._replace(sol=WRONG))]


def _transitions(name: str, s: _S, ctx: _Ctx) -> list[tuple[float, _S]]:
    """Outcomes of one operator from a running state (rules: :mod:`simulation.model`)."""
    pr = ctx.probs
    if name == "Programmer":
        return _programmer(s, ctx)
    t = _spend(s, ctx.votes if name == "MdEnsemble" else 1, ctx)
    if t.stopped:
        return [(1.0, t)]
    if name == "Custom":
        return _right_or_wrong(t, model.custom_right(pr, None if s.sol == NONE else s.sol))
    if name == "AnswerGenerate":
        return _right_or_wrong(t, pr.answer_generate_correct)
    if name == "Review":
        fail = model.review_fail(pr, s.sol)
        return [
            (fail, t._replace(passed=False, critique=True)),
            (1.0 - fail, t._replace(passed=True, critique=False)),
        ]
    if name == "Revise":
        return _right_or_wrong(t, model.revise_right(pr, s.sol, s.critique))
    if name == "Format":  # keeps the answer; no solution becomes a wrong number
        return [(1.0, t._replace(sol=RIGHT if s.sol == RIGHT else WRONG))]
    if s.n == 0:  # ensembler without candidates: the op's only candidate is the solution
        return [(1.0, t)]
    if name == "ScEnsemble":
        return _right_or_wrong(t, model.pick_right(s.n, s.c, pr.ensemble_tie_skill))
    if name == "MdEnsemble":
        return _right_or_wrong(t, model.md_right(s.n, s.c, ctx.votes, pr.ensemble_tie_skill))
    raise ValueError(f"operator {name} is not simulated")


def _programmer(s: _S, ctx: _Ctx) -> list[tuple[float, _S]]:
    """Up to 1 + retries attempts, each an LLM round then a sandbox round; a crash retries,
    and when every attempt crashed the solution stays and the feedback is the error."""
    crash, right, wrong = model.programmer_weights(ctx.probs)
    out: list[tuple[float, _S]] = []
    pending = [(1.0, s)]
    for _ in range(1 + ctx.retries):
        retry = []
        for q, state in pending:
            t = _spend(state, 1, ctx)
            if t.stopped:
                out.append((q, t))
                continue
            t = _spend(t, 0, ctx)
            out += [(q * right, t._replace(sol=RIGHT)), (q * wrong, t._replace(sol=WRONG))]
            retry.append((q * crash, t))
        pending = retry
    return out + [(q, t._replace(critique=False)) for q, t in pending]


# --------------------------------------------------------------------------- parallel blocks


@lru_cache(maxsize=65536)
def _worst(node: Node | None, retries: int, votes: int) -> int:
    """Most LLM calls a subtree can make (decides whether the budget can stop a block): the
    static count a run validates with (``OpSettings.worst_case_calls``)."""
    calls = OpSettings(programmer_retries=retries, md_votes=votes).worst_case_calls()
    return count_calls(node, lambda op: calls.get(op.name, 1))


def _parallel(node: Parallel, dist: Dist, ctx: _Ctx) -> Dist:
    out: Dist = {}
    outcomes: dict[tuple, list] = {}
    for s, p in dist.items():
        if s.stopped:
            _add(out, s, p)
            continue
        worst = _worst(node, ctx.retries, ctx.votes)
        track = ctx.rounds or (not ctx.in_par and s.calls + worst > ctx.budget)
        key = (s.sol, s.n, s.c, s.critique, s.passed, track)
        if key not in outcomes:
            outcomes[key] = _branches(node, s, track, ctx)
        for (first, n, c, calls), q in outcomes[key]:
            _add(out, _merged(s, first, n, c, calls, track, ctx), p * q)
    return out


def _branches(node: Parallel, s: _S, track: bool, ctx: _Ctx) -> list:
    """Joint outcome of the branches from ``s``: ((first candidate, n, right, calls), p)."""
    inner = dataclasses.replace(ctx, in_par=True, rounds=track)
    start = s._replace(calls=() if track else 0)
    acc: dict[tuple, float] = {(None, 0, 0, () if track else 0): 1.0}
    for branch in node.branches:
        ends: dict[tuple, float] = {}
        for e, q in _exec(branch, {start: 1.0}, inner).items():
            ends[e.sol, e.calls] = ends.get((e.sol, e.calls), 0.0) + q
        nxt: dict[tuple, float] = {}
        for ((first, n, c, calls), p), ((sol, more), q) in itertools.product(
            acc.items(), ends.items()
        ):
            if sol != NONE:
                first, n, c = first if n else sol, n + 1, c + (sol == RIGHT)
            if track:
                total = tuple(a + b for a, b in itertools.zip_longest(calls, more, fillvalue=0))
            else:
                total = min(calls + more, ctx.budget + 1)
            nxt[first, n, c, total] = nxt.get((first, n, c, total), 0.0) + p * q
        acc = nxt
    return list(acc.items())


def _merged(s: _S, first, n: int, c: int, calls, track: bool, ctx: _Ctx) -> _S:
    """The state after the block (interpreter's ``_parallel``), or the budget stop in it."""
    after = s._replace(sol=first if n else s.sol, n=n, c=c, critique=False, passed=False)
    if ctx.in_par:
        if ctx.rounds:
            return after._replace(calls=(*s.calls, *calls))
        return after._replace(calls=min(s.calls + calls, ctx.budget + 1))
    done = s.calls
    for asks in calls if track else (calls,):
        if done + asks > ctx.budget:  # stopped inside the block: the solution from before it
            return s._replace(calls=done, stopped=True)
        done += asks
    return after._replace(calls=done)


__all__ = ["Difficulty", "WorkflowStats", "analyze"]
