"""Semantic validation of workflows: every problem at once, each with a code, position and fix.

:func:`validate` never raises on bad workflow text: a syntax error is one error in the report.
Results are cached by input (real training streams repeat a few workflows many times).

Error codes (``Report.errors``):

=========================  ==============================================================
``syntax_error``           the text does not follow the grammar (message from the parser)
``unknown_operator``       a name that is not an operator (closest name in the hint)
``operator_not_allowed``   an operator not allowed for the problem's domain
``condition_not_checker``  the condition of ``?`` is not a checker (Review, Test)
``ensemble_needs_candidates``  an ensembler without >= 2 candidates from a parallel block
``needs_solution``         a checker or refiner before any generator made a solution
``loop_count``             a loop count outside [1, max_loop_count]
``too_many_calls``         worst-case executor calls (loops expanded) above max_calls
``too_deep``               nesting of parallel/conditional/loop deeper than max_depth
``malformed_workflow``     a Workflow built by hand outside the parser's normal form
=========================  ==============================================================

Warning codes (``Report.warnings``): ``instruction_ignored`` (instruction on an operator that
takes none), ``revise_without_feedback`` (Revise with no checker before it),
``loop_without_checker`` (the loop can never stop early), ``loop_once`` (``* 1`` is no loop),
``empty_conditional`` (both branches ``done``).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from flowgrpo.dsl.ast import Cond, Loop, Op, Parallel, Seq, Visitor, Workflow, normal_form_error
from flowgrpo.dsl.canonical import canonical
from flowgrpo.dsl.errors import DSLSyntaxError
from flowgrpo.dsl.operators import CHECKER, ENSEMBLER, GENERATOR, OperatorTable, default_table
from flowgrpo.dsl.parser import _parse_or_error, parse
from flowgrpo.dsl.shape import structure_from_features

STRUCTURES = ("single", "chain", "conditional", "loop", "parallel")


#: THE call budget's default: executor LLM calls one workflow run may make
#: (``executor.max_calls``). The static bound below, the interpreter's budget
#: (``operators.interpreter.Limits``) and the cost reward's normaliser are all this number for a
#: run, derived from its ``executor.max_calls``.
DEFAULT_MAX_CALLS = 12


@dataclass(frozen=True)
class StaticLimits:
    """Bounds a valid workflow must respect, checked on its text (statically).

    Attributes:
        max_loop_count: largest allowed ``* n`` (smallest is 1).
        max_calls: largest worst-case number of executor calls, loops expanded: a run's call
            budget (``operators.interpreter.Limits.static_limits``), so a workflow valid for
            the reward is never stopped by the executor's budget.
        max_depth: deepest nesting of parallel / conditional / loop constructs.
        op_calls: executor calls one run of an operator makes at most, for the operators
            that make more than one (a mapping or ``(name, calls)`` pairs; kept as sorted
            pairs): a run's come from its operator settings (MdEnsemble votes ``md_votes``
            times, Programmer tries ``1 + programmer_retries`` times, Test fixes up to
            ``test_fix_rounds`` times). Others count 1.
    """

    max_loop_count: int = 5
    max_calls: int = DEFAULT_MAX_CALLS
    max_depth: int = 4
    op_calls: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        for name in ("max_loop_count", "max_calls", "max_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"StaticLimits.{name} must be a positive integer, got {value!r}")
        pairs = dict(self.op_calls.items() if isinstance(self.op_calls, Mapping) else self.op_calls)
        for op, calls in pairs.items():
            if not isinstance(op, str) or not isinstance(calls, int) or calls < 1:
                raise ValueError(
                    f"StaticLimits.op_calls must map operator names to calls >= 1, got "
                    f"{op!r}: {calls!r}"
                )
        # frozen and hashable (validate() caches by limits): sorted pairs, ones dropped
        pairs = tuple(sorted((op, calls) for op, calls in pairs.items() if calls > 1))
        object.__setattr__(self, "op_calls", pairs)

    def calls_of(self, name: str, default: int = 1) -> int:
        """The executor calls one run of operator ``name`` makes at most: its ``op_calls``
        entry, else ``default`` (what its table declares, ``OperatorSpec.calls``)."""
        for op, calls in self.op_calls:  # a few pairs: a scan beats building a dict
            if op == name:
                return calls
        return default


DEFAULT_STATIC_LIMITS = StaticLimits()


@functools.lru_cache(maxsize=64)
def heavy_operators(table: OperatorTable, limits: StaticLimits) -> dict[str, int]:
    """The operators of ``table`` that count more than one call under ``limits``, as validate
    counts them: their ``op_calls`` entry, else what the table declares
    (``OperatorSpec.calls``); the rest count one. Built once per table and limits (the
    sampler's end game asks at every candidate token); never changed by a caller."""
    calls = {name: limits.calls_of(name, table[name].calls) for name in table}
    return {name: n for name, n in calls.items() if n > 1}


@dataclass(frozen=True)
class Problem:
    """One problem found in a workflow.

    ``line``/``column`` are 1-based positions in the validated text (for a workflow built in code
    they are 0 where the node has no position).
    """

    code: str
    message: str
    line: int
    column: int
    hint: str = ""


@dataclass(frozen=True)
class Report:
    """The outcome of :func:`validate`.

    Attributes:
        text: the validated text (the canonical form when a Workflow was given).
        workflow: the AST, or None on a syntax error.
        errors / warnings: every problem found, in source order.
        canonical: the canonical text, or None on a syntax error.
        structure: single, chain, conditional, loop or parallel (None on a syntax error).
        features: every construct present (chain, conditional, loop, parallel, instruction).
        operators: operator names in execution order (loop bodies once).
        calls: worst-case number of executor calls with loops expanded (each operator
            counted with the limits' ``op_calls``).
    """

    text: str
    workflow: Workflow | None
    errors: tuple[Problem, ...] = ()
    warnings: tuple[Problem, ...] = ()
    canonical: str | None = None
    structure: str | None = None
    features: frozenset[str] = field(default_factory=frozenset)
    operators: tuple[str, ...] = ()
    calls: int = 0

    @property
    def ok(self) -> bool:
        """True when the workflow has no errors (warnings allowed)."""
        return not self.errors

    @property
    def syntax_ok(self) -> bool:
        """True when the text parsed (semantic errors allowed)."""
        return self.workflow is not None


def validate(
    workflow: str | Workflow,
    domain: str | None = None,
    limits: StaticLimits = DEFAULT_STATIC_LIMITS,
    allowed_operators: frozenset[str] | None = None,
    operators: OperatorTable | None = None,
) -> Report:
    """Check a workflow (text or AST) and report every problem.

    Args:
        workflow: workflow text or a parsed :class:`~dsl.ast.Workflow`.
        domain: ``math``, ``code`` or ``qa`` (or a domain of ``operators``) to check operators
            against that domain's set (see :mod:`dsl.operators`); None allows every operator.
        limits: loop count, call and depth bounds.
        allowed_operators: explicit set of allowed names, overriding the domain's default.
        operators: the operator table to validate against (names, roles, domains); default the
            process-wide table (:func:`dsl.operators.default_table`: AFlow's set plus declared
            operators). Pass your own :class:`~dsl.operators.OperatorTable` to validate
            workflows of another agent system.

    >>> validate("Custom -> Review ? Revise : done").ok
    True
    >>> [p.code for p in validate("Revise -> ScEnsemble").errors]
    ['needs_solution', 'ensemble_needs_candidates']
    """
    table, limits, allowed_operators = _arguments(operators, domain, limits, allowed_operators)
    if not isinstance(workflow, (str, Workflow)):
        raise TypeError(f"validate() takes text or a Workflow, got {type(workflow).__name__}")
    try:
        return _validate_cached(workflow, domain, limits, allowed_operators, table)
    except TypeError:  # a hand-built tree that cannot be hashed (a list for a tuple) is malformed
        why = normal_form_error(workflow) if isinstance(workflow, Workflow) else None
        if why is None:
            raise
        return _malformed(why)


def _malformed(why: str) -> Report:
    hint = "build the tree with parse(text), or in the normal form flowgrpo.dsl.ast states"
    problem = Problem("malformed_workflow", why, 1, 1, hint)
    return Report(text="<workflow>", workflow=None, errors=(problem,))


def _arguments(operators, domain, limits, allowed) -> tuple:
    """(table, limits, allowed names) of :func:`validate`'s arguments, or a ``TypeError`` /
    ``ValueError`` naming the argument (a string for the allowed names would be its letters)."""
    table = default_table() if operators is None else operators
    if not isinstance(table, OperatorTable):
        raise TypeError(f"operators must be an OperatorTable, got {type(table).__name__}")
    limits = DEFAULT_STATIC_LIMITS if limits is None else limits
    if not isinstance(limits, StaticLimits):
        raise TypeError(f"limits must be a StaticLimits (or None), got {type(limits).__name__}")
    if domain is not None and allowed is None:
        allowed = table.for_domain(domain)  # raises with the choices
    if isinstance(allowed, str):
        raise TypeError(f"allowed_operators takes operator names, got the string {allowed!r}: "
                        f"give a list or set, e.g. [{allowed!r}]")  # fmt: skip
    if allowed is not None:
        allowed = frozenset(allowed)
        unknown = sorted(str(name) for name in allowed if name not in table)
        if unknown:
            raise ValueError(f"allowed_operators names {', '.join(unknown)}, which the operator "
                             f"table does not have; it has {', '.join(table)}")  # fmt: skip
    return table, limits, allowed


@functools.lru_cache(maxsize=65536)
def _validate_cached(workflow, domain, limits, allowed, table) -> Report:
    try:
        return _validate(workflow, domain, limits, allowed, table)
    except RecursionError:  # nesting hundreds deep: past what the passes over the tree can walk
        text = workflow if isinstance(workflow, str) else "<workflow>"
        problem = Problem(
            "too_deep",
            f"constructs are nested too deep to read (limit {limits.max_depth})",
            1,
            1,
            "flatten the workflow: fewer loops/conditionals/parallel blocks inside each other",
        )
        return Report(text=text, workflow=None, errors=(problem,))


def _validate(workflow, domain, limits, allowed, table) -> Report:
    text = workflow
    if isinstance(workflow, str):
        try:
            workflow = parse(workflow)
        except DSLSyntaxError as exc:
            problem = Problem("syntax_error", exc.reason, exc.line, exc.column, exc.hint)
            return Report(text=text, workflow=None, errors=(problem,))
    elif (why := normal_form_error(workflow)) is not None:  # every pass assumes the form
        return _malformed(why)
    else:
        text = canonical(workflow)
    return _check(text, workflow, domain, limits, allowed, table)


def _check(text, workflow: Workflow, domain, limits: StaticLimits, allowed, table) -> Report:
    checker = _Checker(domain, limits, allowed, table)
    checker.visit(workflow.root, _State())
    root = workflow.root
    # checker.calls is count_calls(root) with the limits' op_calls, checker.deepest
    # nesting_depth(root), both noted during the checking pass
    met = set(checker.operators)  # the operators met that count more than one call
    heavy = [f"{op} makes {n}" for op, n in sorted(checker.weights.items()) if op in met]
    for code, value, limit, what, fix in (
        ("too_many_calls", checker.calls, limits.max_calls, "the workflow makes up to {} "
         "executor calls (limit {}" + "".join(f"; {h}" for h in heavy) + ")",
         "use fewer steps, branches or loop repetitions"),
        ("too_deep", checker.deepest, limits.max_depth, "constructs are nested {} deep "
         "(limit {})", "flatten the workflow: fewer loops/conditionals/parallel blocks inside "
         "each other"),
    ):  # fmt: skip
        if value > limit:
            checker.error(code, root, what.format(value, limit), fix)
    features, operators = frozenset(checker.features), tuple(checker.operators)
    key = lambda p: (p.line, p.column)  # noqa: E731 - source order
    return Report(
        text=text,
        workflow=workflow,
        errors=tuple(sorted(checker.errors, key=key)),
        warnings=tuple(sorted(checker.warnings, key=key)),
        canonical=canonical(workflow),
        structure=structure_from_features(features),
        features=features,
        operators=operators,
        calls=checker.calls,
    )


# --------------------------------------------------------------------------- dataflow checks


@dataclass(frozen=True)
class _State:
    """What is known to exist when a step runs (a conservative, all-paths view)."""

    solution: bool = False
    candidates: int = 0
    feedback: bool = False

    def join(self, other: _State) -> _State:
        """State after either of two paths (what holds on both)."""
        return _State(
            self.solution and other.solution,
            min(self.candidates, other.candidates),
            self.feedback and other.feedback,
        )


class _Checker(Visitor[_State]):
    """Walks the AST once, threading a :class:`_State`, collecting every problem; on the way
    it notes what :func:`features_of` and :func:`~dsl.ast.op_nodes` would find (the same nodes
    in the same order), so the report needs no second walk."""

    def __init__(self, domain, limits: StaticLimits, allowed, table: OperatorTable):
        self.domain, self.limits, self.allowed, self.table = domain, limits, allowed, table
        names = table.names_with_role(CHECKER)
        head = [", ".join(names[:-1])] if len(names) > 1 else []
        self.checkers = " or ".join([*head, *names[-1:]]) or "none in this table"
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        self.features: set[str] = set()
        self.operators: list[str] = []
        self.depth = self.deepest = 0  # parallel / conditional / loop constructs around a node
        self.calls = 0  # worst-case executor calls so far (count_calls, in the same walk)
        self.weights = heavy_operators(table, limits)  # the calls of those counting several

    def _enter(self, feature: str) -> None:
        """A construct begins: note it and how deep it sits."""
        self.features.add(feature)
        self.depth += 1
        self.deepest = max(self.deepest, self.depth)

    def error(self, code, node, message, hint=""):
        self.errors.append(Problem(code, message, node.line, node.column, hint))

    def warn(self, code, node, message, hint=""):
        self.warnings.append(Problem(code, message, node.line, node.column, hint))

    def visit_done(self, state: _State) -> _State:
        return state

    def visit_seq(self, node: Seq, state: _State) -> _State:
        self.features.add("chain")
        for step in node.steps:
            state = self.visit(step, state)
        return state

    def visit_parallel(self, node: Parallel, state: _State) -> _State:
        self._enter("parallel")
        outs = [self.visit(b, state) for b in node.branches]
        joined = functools.reduce(_State.join, outs)
        self.depth -= 1
        return _State(joined.solution, len(node.branches), joined.feedback)

    def visit_cond(self, node: Cond, state: _State) -> _State:
        self._enter("conditional")
        check = node.check
        unknown = isinstance(check, Op) and check.name not in self.table  # reported by visit_op
        if not unknown and not (isinstance(check, Op) and self.table.role(check.name) == CHECKER):
            got = check.name if isinstance(check, Op) else canonical(check)
            self.error(
                "condition_not_checker",
                check,
                f"the condition of '?' must be a checker ({self.checkers}), got {got}",
                f"check the solution first, e.g. {got} -> Review ? Revise : done",
            )
        state = self.visit(check, state)
        if node.if_fail is None and node.if_pass is None:
            self.warn(
                "empty_conditional",
                node,
                "both branches are 'done': the check changes nothing",
                "give the failing branch a refiner, e.g. Review ? Revise : done",
            )
        before = self.calls  # the longer branch counts, as in count_calls
        failed = self.visit(node.if_fail, state)
        fail_calls, self.calls = self.calls - before, before
        passed = self.visit(node.if_pass, state)
        self.calls = before + max(fail_calls, self.calls - before)
        self.depth -= 1
        return failed.join(passed)

    def visit_loop(self, node: Loop, state: _State) -> _State:
        self._enter("loop")
        if not 1 <= node.count <= self.limits.max_loop_count:
            self.error(
                "loop_count",
                node,
                f"loop count {node.count} is out of range",
                f"use a count from 1 to {self.limits.max_loop_count}",
            )
        elif node.count == 1:
            self.warn(
                "loop_once",
                node,
                "'* 1' runs the body once: it is not a loop",
                "remove '* 1' or use a count of 2 or more",
            )
        first = len(self.operators)  # the body's operators are the ones its visit notes
        before = self.calls
        state = self.visit(node.body, state)
        self.calls = before + node.count * (self.calls - before)
        if not any(self.table.role(name) == CHECKER for name in self.operators[first:]):
            self.warn(
                "loop_without_checker",
                node,
                "the loop has no checker, so it never stops early",
                "put Review or Test in the body, e.g. (Review -> Revise) * 2",
            )
        self.depth -= 1
        return state

    def _unknown(self, node: Op, state: _State) -> _State:
        names = list(self.table)
        guess = difflib.get_close_matches(node.name, names, n=1, cutoff=0.5)
        hint = f"did you mean {guess[0]!r}?" if guess else "operators: " + ", ".join(names)
        if node.name.lower() == "done":
            hint = "a branch that ends the workflow is written done, in lower case"
        self.error("unknown_operator", node, f"unknown operator {node.name!r}", hint)
        # its role is unknown: assume the best of it (a solution, a verdict), so a typo in a
        # checker's name is one error, not also "Revise has no feedback"
        return _State(True, state.candidates, True)

    def visit_op(self, node: Op, state: _State) -> _State:
        self.operators.append(node.name)
        spec = self.table.get(node.name)
        self.calls += self.weights.get(node.name, 1)
        if node.instruction is not None:
            self.features.add("instruction")
        if spec is None:
            return self._unknown(node, state)
        if self.allowed is not None and node.name not in self.allowed:
            where = f"the {self.domain} domain" if self.domain else "this problem"
            self.error(
                "operator_not_allowed",
                node,
                f"{node.name} is not allowed for {where}",
                "allowed: " + ", ".join(n for n in self.table if n in self.allowed),
            )
        if node.instruction is not None and not spec.takes_instruction:
            self.warn(
                "instruction_ignored",
                node,
                f"{node.name} takes no instruction",
                f"write {node.name} without parentheses",
            )
        if spec.role == GENERATOR:
            return _State(True, state.candidates, state.feedback)
        if spec.role == ENSEMBLER:
            if state.candidates < 2:
                self.error(
                    "ensemble_needs_candidates",
                    node,
                    f"{node.name} needs at least two candidates, but none are made before it",
                    "put a parallel block before it, e.g. "
                    f"[Custom, Custom, Programmer] -> {node.name}",
                )
            return _State(True, state.candidates, state.feedback)
        if not state.solution:
            self.error(
                "needs_solution",
                node,
                f"{node.name} runs before any generator made a solution",
                f"start with a generator, e.g. Custom -> {node.name}",
            )
            state = _State(True, state.candidates, state.feedback)  # report once, not per step
        if spec.role == CHECKER:
            return _State(state.solution, state.candidates, True)
        if node.name == "Revise" and not state.feedback:
            self.warn(
                "revise_without_feedback",
                node,
                "Revise has no feedback: no checker runs before it",
                "put a checker before it, e.g. Review ? Revise : done",
            )
        return state


def clear_caches() -> None:
    """Empty the memo caches of the parser and of :func:`validate` (a text seen before is a
    cache hit): a benchmark of the uncached path starts from empty caches."""
    _parse_or_error.cache_clear()
    _validate_cached.cache_clear()
