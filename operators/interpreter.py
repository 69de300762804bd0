"""The workflow interpreter: walks the AST over a :class:`~operators.state.State`.

Semantics (DESIGN.md, "The DSL"): ``A -> B`` runs in order; ``[A, B]`` runs each branch from the
same state and makes their solutions the candidates; ``X ? A : B`` runs A when the checker X
finds a problem, else B (``done`` = nothing); ``(body) * n`` runs up to n times and stops early
once a checker inside passes.

:func:`run_workflows` advances many (workflow, problem) runs together: at each round it collects
the pending LLM calls of every run and sends them to the backend as one batch (one ``generate``
per stage for the HF backend; concurrent requests for the HTTP backend), and the sandbox runs as
one batch too. Every run has a call budget and a wall-clock limit; hitting one ends that run with
a recorded reason, never an exception. An executor failure marks the run *unscorable*.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from flowgrpo.dsl import (
    DEFAULT_MAX_CALLS,
    DEFAULT_STATIC_LIMITS,
    Cond,
    Loop,
    Node,
    Op,
    OperatorTable,
    Parallel,
    Seq,
    StaticLimits,
    Visitor,
    Workflow,
    validate,
)
from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.checkers import check_answer
from flowgrpo.operators.llm import LLM
from flowgrpo.operators.ops import OpSettings, get_operator
from flowgrpo.operators.sandbox import run_python_batch
from flowgrpo.operators.state import Ask, ExecutionResult, OpGen, State, TraceEntry
from flowgrpo.operators.tasks.base import Problem

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Bounds on one workflow run (part of the cache key).

    Attributes:
        max_llm_calls: LLM calls allowed per run (retries of Programmer/Test included): the
            run's call budget, ``executor.max_calls`` (default :data:`dsl.DEFAULT_MAX_CALLS`).
        max_seconds: wall-clock budget per run, seconds (counted across batched rounds).
        ops: per-operator settings (token budgets, retries, sandbox timeout).
    """

    max_llm_calls: int = DEFAULT_MAX_CALLS
    max_seconds: float = 120.0
    ops: OpSettings = field(default_factory=OpSettings)

    def __post_init__(self):
        if self.max_llm_calls < 1:
            raise ValueError("Limits.max_llm_calls must be >= 1")
        if self.max_seconds <= 0:
            raise ValueError("Limits.max_seconds must be > 0 (seconds)")

    def static_limits(self) -> StaticLimits:
        """The DSL's static bounds of a workflow this run executes: its worst-case executor
        calls within the call budget, each operator counted with the calls its settings let it
        make (:meth:`OpSettings.worst_case_calls`), so a workflow valid for the reward (and the
        constrained sampler) is never stopped by the budget."""
        return dataclasses.replace(
            DEFAULT_STATIC_LIMITS,
            max_calls=self.max_llm_calls,
            op_calls=self.ops.worst_case_calls(),
        )

    def cache_key(self) -> str:
        """Every field (operator settings included) as canonical JSON: the cache key's part for
        the limits, stable across processes and Python versions (unlike a dataclass repr)."""
        return _canonical_json(self)


@lru_cache(maxsize=64)
def _canonical_json(limits: Limits) -> str:
    """``limits`` as canonical JSON, remembered: a run asks it once per workflow run (11% of a
    ``flowgrpo search`` before), of the few frozen limits a process has."""
    return json.dumps(dataclasses.asdict(limits), sort_keys=True, separators=(",", ":"))


DEFAULT_LIMITS = Limits()

#: The static checks the interpreter makes before a run: the DSL's, except the worst-case call
#: count, which its budget enforces as the run goes (``max_llm_calls``). Which workflows are
#: *valid* for a run (the reward, the constrained sampler) is the stricter
#: :meth:`Limits.static_limits`; the interpreter also runs what the simulation's analysis takes
#: (``operators.simulation.analytic.SPACE_LIMITS``), so a workflow cut by the budget is still
#: run and scored the same way.
RUN_CHECK = dataclasses.replace(DEFAULT_STATIC_LIMITS, max_calls=10**6)
"""The limits of a run given none (a run's own come from ``operators.executor``)."""


class _Stop(Exception):
    """Thrown into a run's generator to end it (budget, time, executor failure)."""

    def __init__(self, reason: str, unscorable: bool = False):
        super().__init__(reason)
        self.reason, self.unscorable = reason, unscorable


# --------------------------------------------------------------------------- AST walk


def _exec(node: Node | None, state: State, settings: OpSettings) -> OpGen:
    """The run of ``node`` on ``state``: a generator of effects (nothing runs until iterated)."""
    return _Exec().visit(node, state, settings)


class _Exec(Visitor[OpGen]):
    """``visit(node, state, settings)``: each method is a generator that runs its node."""

    def visit_done(self, state: State, settings: OpSettings) -> OpGen:
        yield from ()  # a `done` branch

    def visit_op(self, node: Op, state: State, settings: OpSettings) -> OpGen:
        yield from get_operator(node.name)(state, node.instruction, settings)

    def visit_seq(self, node: Seq, state: State, settings: OpSettings) -> OpGen:
        for step in node.steps:
            yield from self.visit(step, state, settings)
            if state.loop_depth and state.passed:  # a checker passed: the loop is done
                break

    def visit_parallel(self, node: Parallel, state: State, settings: OpSettings) -> OpGen:
        yield from _parallel(node, state, settings)

    def visit_cond(self, node: Cond, state: State, settings: OpSettings) -> OpGen:
        state.passed = None
        yield from self.visit(node.check, state, settings)
        yield from self.visit(node.if_pass if state.passed else node.if_fail, state, settings)

    def visit_loop(self, node: Loop, state: State, settings: OpSettings) -> OpGen:
        state.loop_depth += 1
        for _ in range(node.count):
            state.passed = None
            yield from self.visit(node.body, state, settings)
            if state.passed:  # a checker inside the body passed: stop early
                break
        state.loop_depth -= 1


def _parallel(node: Parallel, state: State, settings: OpSettings) -> OpGen:
    """Run the branches in lockstep so their LLM calls join the same batch."""
    forks = [state.fork() for _ in node.branches]
    gens = [_exec(b, f, settings) for b, f in zip(node.branches, forks)]
    pending: dict[int, list] = {}
    for i in range(len(gens)):
        _advance(gens, pending, i, None)
    while pending:
        order = list(pending)
        flat = [effect for i in order for effect in pending[i]]
        results = yield flat
        start = 0
        for i in order:
            n = len(pending[i])
            _advance(gens, pending, i, results[start : start + n])
            start += n
    state.candidates = [f.solution for f in forks if f.solution]
    state.solution = state.candidates[0] if state.candidates else state.solution
    state.feedback, state.passed = None, None


def _advance(gens, pending: dict, i: int, value) -> None:
    try:
        pending[i] = gens[i].send(value)
    except StopIteration:
        pending.pop(i, None)


# --------------------------------------------------------------------------- batched driver


@dataclass
class _Run:
    workflow: Workflow
    problem: Problem
    state: State
    gen: OpGen
    started: float
    pending: list = field(default_factory=list)
    error: str | None = None
    unscorable: bool = False
    done: bool = False


def _start(workflow: Workflow, problem: Problem, limits: Limits, repeat: int = 0) -> _Run:
    state = State(problem)
    state.counters.repeat = repeat
    run = _Run(workflow, problem, state, _exec(workflow.root, state, limits.ops), time.time())
    _step(run, None)
    return run


def _step(run: _Run, value, stop: _Stop | None = None) -> None:
    try:
        run.pending = run.gen.throw(stop) if stop else run.gen.send(value)
    except StopIteration:
        run.done = True
    except _Stop as exc:
        run.done, run.error, run.unscorable = True, exc.reason, exc.unscorable
    except Exception as exc:
        logger.exception("workflow run failed")
        run.done, run.error = True, f"interpreter error: {type(exc).__name__}: {exc}"


def _budget_problem(run: _Run, limits: Limits) -> _Stop | None:
    asks = sum(isinstance(e, Ask) for e in run.pending)
    if run.state.counters.llm_calls + asks > limits.max_llm_calls:
        return _Stop(f"call budget exhausted ({limits.max_llm_calls} LLM calls)")
    if time.time() - run.started > limits.max_seconds:
        return _Stop(f"time limit exceeded ({limits.max_seconds:g} s)")
    return None


def _perform(runs: list[_Run], llm: LLM, sandbox: Callable) -> None:
    """Perform the pending effects of every run: one LLM batch, one sandbox batch.

    A backend or sandbox that raises (a bug, not a failed request) ends the affected runs as
    unscorable instead of crashing the caller.
    """
    out: dict[tuple[int, int], Any] = {}
    broken: dict[int, str] = {}
    for kind, perform in (("llm", _perform_asks), ("code", _perform_code)):
        items = [
            (r, j, e)
            for r in runs
            for j, e in enumerate(r.pending)
            if isinstance(e, Ask) == (kind == "llm")
        ]
        if not items:
            continue
        try:
            perform(items, llm if kind == "llm" else sandbox, out)
        except Exception as exc:
            logger.exception("%s batch failed", kind)
            for r, _, _ in items:
                broken[id(r)] = f"{kind} batch failed: {type(exc).__name__}: {exc}"
    for run in runs:
        if id(run) in broken:
            _step(run, None, _Stop(broken[id(run)], unscorable=True))
            continue
        values = [out[id(run), j] for j in range(len(run.pending))]
        failed = next((v.error for v in values if getattr(v, "error", None)), None)
        if failed:
            _step(run, None, _Stop(f"executor failed: {failed}", unscorable=True))
        else:
            _step(run, values)


def _perform_asks(items: list, llm: LLM, out: dict) -> None:
    results = llm.generate([e.request for _, _, e in items])
    if len(results) != len(items):
        raise RuntimeError(f"backend returned {len(results)} results for {len(items)} requests")
    for (r, j, e), res in zip(items, results):
        out[id(r), j] = res
        c, tokens = r.state.counters, res.prompt_tokens + res.completion_tokens
        c.llm_calls += 1
        c.tokens += tokens
        c.trace.append(
            TraceEntry(
                e.op,
                "llm",
                e.request.messages[-1].content,
                res.text,
                res.seconds,
                tokens,
                res.error,
            )
        )


def _perform_code(items: list, sandbox: Callable, out: dict) -> None:
    results = sandbox([e.code for _, _, e in items], [e.timeout_s for _, _, e in items])
    for (r, j, e), res in zip(items, results):
        out[id(r), j] = res
        r.state.counters.code_runs += 1
        r.state.counters.trace.append(
            TraceEntry(
                e.op, "code", e.code, res.stdout or res.stderr, res.seconds, 0, res.reason or None
            )
        )


def _default_sandbox(codes: list[str], timeouts: list[float]) -> list:
    return run_python_batch(codes, timeout_s=max(timeouts))


def _finish(run: _Run, check: Callable) -> ExecutionResult:
    c, answer = run.state.counters, run.state.solution
    correct, score = False, 0.0
    if not run.unscorable and answer is not None:
        verdict = check(run.problem, answer)
        correct, score = verdict.correct, verdict.score
    return ExecutionResult(
        answer,
        correct,
        score,
        tuple(c.trace),
        c.llm_calls,
        c.code_runs,
        c.tokens,
        time.time() - run.started,
        run.error,
        run.unscorable,
    )


def run_workflows(
    pairs: Sequence[tuple[Workflow | str, Problem]],
    llm: LLM,
    limits: Limits | None = None,
    cache: ExecutionCache | None = None,
    check: Callable | None = None,
    sandbox: Callable | None = None,
    on_round: Callable[[int, int], None] | None = None,
    operators: OperatorTable | None = None,
    repeats: Sequence[int] | None = None,
) -> list[ExecutionResult]:
    """Run many workflows together, batching the LLM calls of each stage.

    Args:
        pairs: (workflow or workflow text, problem). Invalid workflows are not run: their result
            has ``error`` set and score 0.
        llm: the executor backend.
        limits: call/time bounds and operator settings.
        cache: results by (canonical workflow, problem id, executor settings, limits); identical
            pairs within the batch run once.
        check: ``check(problem, answer) -> CheckResult``; default
            :func:`operators.checkers.check_answer`.
        sandbox: ``sandbox(codes, timeouts) -> list[ExecResult]``; default the backend's own
            ``sandbox`` attribute where it has one (the SIMULATED executor's in-process runner),
            else the process sandbox.
        on_round: called after each batched round with (round, runs still active).
        operators: the table workflows are validated against (default: the process-wide one).
        repeats: per pair, which execution of that (workflow, problem) it is (default all 0).
            Repeat r > 0 is a separate run with its own cache entry, and its requests carry
            ``repeat=r`` (:class:`~operators.llm.RequestContext`): an executor that samples
            (or the SIMULATED one) answers it afresh, so repeats estimate the workflow's
            accuracy on the problem rather than one draw of it.
    """
    limits = limits or DEFAULT_LIMITS
    check = check or check_answer
    sandbox = sandbox or getattr(llm, "sandbox", None) or _default_sandbox
    if repeats is not None and len(repeats) != len(pairs):
        raise ValueError(f"repeats has {len(repeats)} entries for {len(pairs)} pairs")
    results: list[ExecutionResult | None] = [None] * len(pairs)
    todo = _plan(pairs, repeats or [0] * len(pairs), llm, limits, cache, operators, results)
    runs = [_start(p.workflow, p.problem, limits, p.repeat) for p in todo.values()]
    _drive(runs, llm, limits, sandbox, on_round)
    for (key, pending), run in zip(todo.items(), runs):
        result = _finish(run, check)
        if cache is not None and not result.unscorable:
            cache.put(key, result)
        for i in pending.indices:
            results[i] = result
    return results  # type: ignore[return-value]


class _Pending(NamedTuple):
    """A run still to make: its workflow and problem, which execution it is, and the indices
    of the pairs it answers (identical pairs of one batch run once)."""

    workflow: Workflow
    problem: Problem
    repeat: int
    indices: list[int]


def _plan(pairs, repeats, llm, limits, cache, operators, results) -> dict[tuple, _Pending]:
    """Fill ``results`` for the invalid pairs and the cache hits; the runs still to make, by
    cache key."""
    todo: dict[tuple, _Pending] = {}
    for i, ((workflow, problem), repeat) in enumerate(zip(pairs, repeats)):
        report = validate(workflow, domain=problem.domain, limits=RUN_CHECK, operators=operators)
        if not report.ok:
            first = report.errors[0]
            results[i] = ExecutionResult(
                None, False, 0.0, error=f"invalid workflow: {first.code}: {first.message}"
            )
            continue
        key = (report.canonical, problem.id, llm.settings_key, limits.cache_key())
        if repeat:  # repeat 0 keeps the key of a single execution
            key = (*key, f"repeat={repeat}")
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            results[i] = hit
        else:
            todo.setdefault(key, _Pending(report.workflow, problem, repeat, [])).indices.append(i)
    return todo


def _drive(runs: list[_Run], llm: LLM, limits: Limits, sandbox, on_round) -> None:
    round_ = 0
    while True:
        active = [r for r in runs if not r.done]
        if not active:
            return
        for run in active:
            stop = _budget_problem(run, limits)
            if stop is not None:
                _step(run, None, stop)
        active = [r for r in active if not r.done]
        if active:
            _perform(active, llm, sandbox)
        round_ += 1
        if on_round is not None:
            on_round(round_, len(active))


def run_workflow(
    workflow: Workflow | str, problem: Problem, llm: LLM, limits: Limits | None = None, **kw
) -> ExecutionResult:
    """Run one workflow on one problem (see :func:`run_workflows` for the arguments)."""
    return run_workflows([(workflow, problem)], llm, limits, **kw)[0]


def describe(result: ExecutionResult) -> str:
    """A short human summary of a run (for the CLI and logs)."""
    status = "unscorable" if result.unscorable else ("correct" if result.correct else "wrong")
    tail = f", stopped: {result.error}" if result.error else ""
    return (
        f"{status} (score {result.score:.2f}), {result.calls} LLM calls, "
        f"{result.code_runs} sandbox runs, {result.seconds:.1f} s{tail}"
    )


__all__ = ["ExecutionResult", "Limits", "describe", "run_workflow", "run_workflows"]
