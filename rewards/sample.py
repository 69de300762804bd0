"""One scored unit: a problem, the policy's completion, and what extraction/validation/execution
made of it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from flowgrpo.dsl import (
    DEFAULT_STATIC_LIMITS,
    Extraction,
    OperatorTable,
    Report,
    extract,
    validate,
)
from flowgrpo.dsl.canonical import skeleton
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.state import ExecutionResult
from flowgrpo.operators.tasks.base import Problem


@dataclass(frozen=True)
class Sample:
    """A completion for a problem, with its extraction, validation report and execution.

    Attributes:
        problem: the problem the completion answers.
        completion: the raw model output.
        extraction: where the workflow was found (:func:`dsl.extract`).
        report: the validation report of the extracted workflow; None on a fallback.
        execution: the executor's run of the workflow; None when it was not executed (fallback,
            invalid workflow, or execution switched off).
        repeats: further runs of the same workflow on the same problem (``rollout.executions``
            > 1; empty otherwise). Accuracy and cost average over :attr:`runs`.
    """

    problem: Problem
    completion: str
    extraction: Extraction
    report: Report | None = None
    execution: ExecutionResult | None = None
    repeats: tuple[ExecutionResult, ...] = ()

    @property
    def runs(self) -> tuple[ExecutionResult, ...]:
        """Every execution of the workflow: the first, then the repeats (empty if not run)."""
        return () if self.execution is None else (self.execution, *self.repeats)

    @property
    def fallback(self) -> bool:
        """The output holds no workflow (prose)."""
        return self.extraction.fallback

    @property
    def syntax_ok(self) -> bool:
        """A workflow was found and it parses (semantic errors allowed)."""
        return self.report is not None and self.report.syntax_ok

    @property
    def valid(self) -> bool:
        """A workflow was found and validation found no errors (warnings allowed)."""
        return self.report is not None and self.report.ok

    @property
    def canonical(self) -> str | None:
        """The canonical form of the workflow; None on a fallback or a syntax error."""
        return self.report.canonical if self.report is not None else None

    @functools.cached_property  # read by diversity, the history and its eligibility
    def diversity_key(self) -> str | None:
        """What diversity compares (:func:`dsl.canonical.skeleton`: no instructions, and the
        spellings that make the executor do the same work written one way), so that wording
        (an empty, a re-cased or a made-up instruction), a ``* 1``, ``Review ? X : X``, a loop
        of a loop or parallel branches nothing reads do not make a workflow "different"; None
        on a fallback or a syntax error."""
        if self.report is None or self.report.workflow is None:
            return None
        return skeleton(self.report.workflow)

    @property
    def structure(self) -> str | None:
        """single, chain, conditional, loop or parallel; None without a parsed workflow."""
        return self.report.structure if self.report is not None else None

    @property
    def unscorable(self) -> bool:
        """The workflow ran but the executor failed on every run (not the same as a wrong
        answer)."""
        runs = self.runs
        return bool(runs) and all(run.unscorable for run in runs)


def make_sample(
    problem: Problem,
    completion: str,
    execution: ExecutionResult | None = None,
    operators: OperatorTable | None = None,
    limits: Limits | None = None,
) -> Sample:
    """Extract and validate ``completion`` for ``problem`` (no execution; pass one to attach it)
    against ``operators`` (default: the process-wide table) within the static bounds of the
    run's ``limits`` (its call budget; default: the DSL's, whose budget is the default one).

    For tests, examples and scripts; :func:`rewards.score.prepare_samples` does the same for a
    batch and executes the valid workflows.

    >>> from flowgrpo.operators.tasks.base import Problem
    >>> s = make_sample(Problem("p/1", "math", "What is 2 + 3?", "5"), "Custom -> Format")
    >>> s.valid, s.fallback, s.canonical, s.structure
    (True, False, 'Custom -> Format', 'chain')
    """
    extraction = extract(completion, operators=operators)
    report = (
        None
        if extraction.fallback
        else validate(
            extraction.dsl,
            domain=problem.domain,
            limits=DEFAULT_STATIC_LIMITS if limits is None else limits.static_limits(),
            operators=operators,
        )
    )
    return Sample(problem, completion, extraction, report, execution)
