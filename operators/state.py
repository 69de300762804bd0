"""Execution state, the effects operators ask the interpreter to perform, and the result of a run.

Operators are generator functions: they ``yield`` a list of effects (:class:`Ask` for an LLM call,
:class:`RunCode` for the sandbox) and receive the list of their results. The interpreter gathers
the effects of many workflows and performs them in batches (one ``generate`` per stage). A run
ends in an :class:`ExecutionResult`, which the execution cache stores and the rewards read; it
lives here, below both, so neither has to import the interpreter for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flowgrpo.operators.llm import GenerationRequest
from flowgrpo.operators.tasks.base import Problem


@dataclass(frozen=True)
class Ask:
    """Effect: one LLM call made by operator ``op``."""

    op: str
    request: GenerationRequest


@dataclass(frozen=True)
class RunCode:
    """Effect: run ``code`` in the sandbox on behalf of operator ``op``."""

    op: str
    code: str
    stdin: str | None = None
    timeout_s: float = 5.0


Effect = Ask | RunCode
OpGen = Generator[list[Effect], list[Any], None]


@dataclass(frozen=True)
class TraceEntry:
    """One performed effect: what was asked, what came back, how long it took."""

    op: str
    kind: str  # "llm" or "code"
    prompt: str
    output: str
    seconds: float
    tokens: int = 0
    error: str | None = None


@dataclass
class Counters:
    """Shared by a run and all its parallel branches.

    ``asks`` numbers the run's LLM requests in the order the operators make them; ``repeat`` is
    which execution of the same (workflow, problem) this run is (0 for the first; see
    :func:`operators.interpreter.run_workflows`). Both go into every request's
    :class:`~operators.llm.RequestContext`.
    """

    llm_calls: int = 0
    code_runs: int = 0
    tokens: int = 0
    trace: list[TraceEntry] = field(default_factory=list)
    asks: int = 0
    repeat: int = 0


@dataclass
class State:
    """What a workflow step sees and updates (DESIGN.md, "Execution").

    Attributes:
        problem: the problem being solved.
        solution: the current solution (answer text for math/qa, code for code problems).
        candidates: solutions of the branches of the last parallel block.
        feedback: the last checker's feedback.
        passed: the last checker's verdict (None before any checker ran).
        counters: LLM calls, sandbox runs, tokens and the trace (shared with branches).
        loop_depth: how many loops enclose the running step (a passing checker inside a loop
            skips the rest of the body and ends the loop).
    """

    problem: Problem
    solution: str | None = None
    candidates: list[str] = field(default_factory=list)
    feedback: str | None = None
    passed: bool | None = None
    counters: Counters = field(default_factory=Counters)
    loop_depth: int = 0

    def fork(self) -> State:
        """A copy for a parallel branch (same counters and trace)."""
        return State(
            self.problem,
            self.solution,
            list(self.candidates),
            self.feedback,
            self.passed,
            self.counters,
            self.loop_depth,
        )


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of running one workflow on one problem.

    Attributes:
        answer: the final solution text (None if no generator produced one).
        correct: the checker's verdict (False when unscorable).
        score: the checker's score in [0, 1] (partial credit where the checker gives it).
        trace: every LLM call and sandbox run with prompt, output and seconds.
        calls: LLM calls made; code_runs: sandbox runs; tokens: prompt + completion tokens.
        seconds: wall time of the run.
        error: why the run stopped early or could not run (None when it finished).
        unscorable: the executor failed (server down after retries): not the same as wrong.
    """

    answer: str | None
    correct: bool
    score: float
    trace: tuple[TraceEntry, ...] = ()
    calls: int = 0
    code_runs: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    unscorable: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the trace as a list of dicts); :meth:`from_dict` inverts it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionResult:
        """The result :meth:`to_dict` wrote. Raises ``KeyError``/``TypeError`` on other data."""
        fields = dict(data)
        fields["trace"] = tuple(TraceEntry(**entry) for entry in fields.get("trace", ()))
        return cls(**fields)
