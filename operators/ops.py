"""The AFlow operator set (arXiv 2410.10762), as generator functions over :class:`State`.

Each operator is registered by name in :data:`OPERATOR_IMPLS` (with :func:`register_operator`)
and has the signature ``op(state, instruction, settings) -> OpGen``. The registry covers exactly
the names in ``dsl.OPERATORS`` (checked by a test); a user's own operator is declared and
registered in one call, ``register_operator(name, fn, role=...)``. Prompts live in
:mod:`operators.prompts`.
"""

from __future__ import annotations

import random
import re
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from flowgrpo.dsl import DOMAINS, OPERATORS, OperatorSpec, declare_operator
from flowgrpo.operators import prompts
from flowgrpo.operators.checkers import extract_code
from flowgrpo.operators.llm import GenerationRequest, Message, RequestContext
from flowgrpo.operators.state import Ask, OpGen, RunCode, State
from flowgrpo.registry import Registry


@dataclass(frozen=True)
class OpSettings:
    """Per-operator knobs (part of the execution cache key).

    Attributes:
        max_new_tokens: token budget per LLM call, by operator name (``default`` for the rest).
        programmer_retries: extra attempts of Programmer after its code fails.
        test_fix_rounds: fix attempts of Test after the public tests fail.
        md_votes: shuffled votes of MdEnsemble.
        code_timeout_s: sandbox time limit per run, seconds.
    """

    max_new_tokens: tuple[tuple[str, int], ...] = (
        ("default", 192),
        ("Programmer", 256),
        ("CustomCodeGenerate", 320),
        ("Test", 320),
        ("Review", 96),
        ("Format", 32),
        ("ScEnsemble", 8),
        ("MdEnsemble", 8),
    )
    programmer_retries: int = 1
    test_fix_rounds: int = 1
    md_votes: int = 3
    code_timeout_s: float = 5.0

    def tokens_for(self, op: str) -> int:
        table = dict(self.max_new_tokens)
        return table.get(op, table["default"])

    def worst_case_calls(self) -> dict[str, int]:
        """Executor calls one run of each multi-call operator makes at most with these
        settings (the rest make one): what the static call count weighs them with
        (``dsl.StaticLimits.op_calls``). Test's fix rounds are its only calls (its test runs
        are sandbox runs); it counts at least one, as every operator does."""
        return {
            "Programmer": 1 + self.programmer_retries,
            "MdEnsemble": max(1, self.md_votes),
            "Test": max(1, self.test_fix_rounds),
        }


OpFn = Callable[[State, "str | None", OpSettings], OpGen]

#: Implementations of the DSL operators, by operator name.
OPERATOR_IMPLS: Registry[OpFn] = Registry("operator implementation")


def register_operator(
    name: str,
    fn: OpFn | None = None,
    *,
    role: str | None = None,
    domains: tuple[str, ...] | None = None,
    takes_instruction: bool = True,
    description: str = "",
    calls: int = 1,
):
    """Register ``fn`` as the implementation of operator ``name``; without ``fn``, a decorator
    that does. Duplicates raise.

    ``name`` must be in the DSL's default table (``dsl.OPERATORS``: AFlow's set plus declared
    operators), or ``role`` (generator, checker, refiner, ensembler) must be given: then the
    operator is declared first (``dsl.declare_operator``, with ``domains`` -- default all --,
    ``takes_instruction``, ``description`` and ``calls``, the most executor calls one run of
    ``fn`` makes, which the validator counts), so the validator accepts it in this process.

    ``fn(state, instruction, settings)`` is a generator: it yields lists of effects
    (``[Ask(...)]``, ``[RunCode(...)]``) and receives their results, and sets
    ``state.solution`` (generators, refiners, ensemblers) or ``state.passed`` and
    ``state.feedback`` (checkers). See :mod:`operators.custom` for operators made from a prompt.
    """
    if role is not None:
        spec = OperatorSpec(name, role, domains or DOMAINS, takes_instruction, description, calls)
        declare_operator(spec)  # same spec again: no-op; a different one raises
    elif name not in OPERATORS:
        raise ValueError(
            f"{name!r} is not a DSL operator; known: {', '.join(OPERATORS)}; to add it, give "
            "its role: register_operator(name, fn, role='generator'|'checker'|'refiner'|"
            "'ensembler')"
        )
    return OPERATOR_IMPLS.register(name, fn)


def get_operator(name: str) -> OpFn:
    """The implementation of ``name``; unknown names raise and list the choices."""
    if name in OPERATORS and name not in OPERATOR_IMPLS:
        raise ValueError(
            f"operator {name!r} is declared but has no implementation; register one with "
            "register_operator(name, fn) or operators.custom.register_prompt_operator"
        )
    return OPERATOR_IMPLS.get(name)


def registered_operators() -> tuple[str, ...]:
    """The operator names with an implementation, sorted."""
    return OPERATOR_IMPLS.names()


def _ask(state: State, op: str, text: str, settings: OpSettings) -> Ask:
    messages = (Message("system", prompts.SYSTEM), Message("user", text))
    # The call's index in its run (counted on the run's shared counters), for the simulated
    # executor's per-call random draws; model backends ignore the context.
    call = state.counters.asks
    state.counters.asks = call + 1
    context = RequestContext(op, state.problem, call, state.counters.repeat)
    request = GenerationRequest(messages, max_new_tokens=settings.tokens_for(op), context=context)
    return Ask(op, request)


def _one(state: State, op: str, text: str, settings: OpSettings) -> OpGen:
    """Make one LLM call; returns the generated text."""
    (result,) = yield [_ask(state, op, text, settings)]
    return result.text


def solution_code(text: str) -> str:
    """What a code-writing operator keeps as the solution: the code in its answer
    (:func:`operators.checkers.extract_code`), stripped."""
    return extract_code(text).strip()


# --------------------------------------------------------------------------- generators


@register_operator("Custom")
def custom(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    q = state.problem.question
    state.solution = yield from _one(
        state, "Custom", prompts.custom(q, instruction, state.solution), settings
    )


@register_operator("AnswerGenerate")
def answer_generate(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    text = prompts.answer_generate(state.problem.question, instruction)
    state.solution = yield from _one(state, "AnswerGenerate", text, settings)


@register_operator("Programmer")
def programmer(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    """LLM writes ``solve()``; the sandbox runs it; its output is the answer. Retries on error."""
    error = code = None
    for _ in range(1 + settings.programmer_retries):
        text = prompts.programmer(state.problem.question, instruction, error, code)
        code = solution_code((yield from _one(state, "Programmer", text, settings)))
        program = f"{code}\n\nprint(solve())\n"
        (run,) = yield [RunCode("Programmer", program, timeout_s=settings.code_timeout_s)]
        if run.ok and run.stdout.strip():
            state.solution = run.stdout.strip()
            return
        error = (run.stderr.strip().splitlines() or [run.reason or "no output"])[-1]
    state.feedback = f"Programmer failed: {error}"


@register_operator("CustomCodeGenerate")
def custom_code_generate(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    p = state.problem
    text = prompts.code_generate(p.question, instruction, p.entry_point)
    state.solution = solution_code((yield from _one(state, "CustomCodeGenerate", text, settings)))


# --------------------------------------------------------------------------- ensemblers


def _majority(candidates: list[str]) -> str:
    """The candidate whose normalised text is most frequent (first on ties)."""
    counts = Counter(" ".join(c.split()).lower() for c in candidates)
    return max(candidates, key=lambda c: counts[" ".join(c.split()).lower()])


#: Where a reply names its choice, most explicit first: the whole reply ("C", "(C)", "C."), a
#: leading "C)" / "C:", "answer is C" / "choice: C", a "(C)" anywhere; then the last capital
#: letter standing alone ("I pick C", "A careful check shows C": C, not I or A).
_CHOICES = (
    re.compile(r"^\W*([A-Z])\W*$", re.I),
    re.compile(r"^\W*([A-Z])[).:]"),
    re.compile(r"\b(?:answer|choice|option|pick|candidate)\b\W*(?:is\W+)?\(?([A-Z])\b", re.I),
    re.compile(r"\(([A-Z])\)"),
)


def _letter(text: str, n: int) -> int | None:
    """The index of the candidate a reply chooses (see :data:`_CHOICES`), None if none."""
    text = text.strip()
    found = [m.group(1).upper() for m in (p.search(text) for p in _CHOICES) if m]
    found += re.findall(r"\b([A-Z])\b", text)[-1:]
    for letter in found:
        if 0 <= ord(letter) - 65 < n:
            return ord(letter) - 65
    return None


@register_operator("ScEnsemble")
def sc_ensemble(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    """Self-consistency: the LLM picks the candidate most agree on; majority if unparseable."""
    cands = [c for c in state.candidates if c] or [state.solution or ""]
    text = yield from _one(
        state, "ScEnsemble", prompts.choose(state.problem.question, cands), settings
    )
    index = _letter(text, len(cands))
    state.solution = cands[index] if index is not None else _majority(cands)


@register_operator("MdEnsemble")
def md_ensemble(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    """Majority vote of ``md_votes`` LLM choices over shuffled candidate orders."""
    cands = [c for c in state.candidates if c] or [state.solution or ""]
    rng = random.Random(state.problem.id)  # deterministic shuffles: cacheable results
    orders = [rng.sample(range(len(cands)), len(cands)) for _ in range(settings.md_votes)]
    asks = [
        _ask(
            state,
            "MdEnsemble",
            prompts.choose(state.problem.question, [cands[i] for i in order]),
            settings,
        )
        for order in orders
    ]
    results = yield asks
    votes = [
        order[i]
        for order, r in zip(orders, results)
        if (i := _letter(r.text, len(cands))) is not None
    ]
    state.solution = cands[Counter(votes).most_common(1)[0][0]] if votes else _majority(cands)


# --------------------------------------------------------------------------- checkers


_FAIL_RE = re.compile(
    r"\b(fail|failed|incorrect|wrong|error|mistake)\b"
    r"|(?:\bnot|n't|\bnever)\s+(?:\w+\s+)?(?:pass(?:es|ed)?|correct|right|good)\b",  # negated
    re.I,
)
_PASS_RE = re.compile(r"\b(pass|passed|correct|right|looks good|no (?:errors|mistakes))\b", re.I)


def parse_verdict(text: str) -> bool:
    """Pass/fail from free text: the first explicit verdict word wins; unclear means fail."""
    fail, ok = _FAIL_RE.search(text), _PASS_RE.search(text)
    if fail and (not ok or fail.start() <= ok.start()):
        return False
    return ok is not None


@register_operator("Review")
def review(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    text = prompts.review(state.problem.question, state.solution, instruction)
    verdict = yield from _one(state, "Review", text, settings)
    state.passed = parse_verdict(verdict)
    state.feedback = verdict.strip()


def _test_program(code: str, tests: tuple[str, ...]) -> str:
    """The solution followed by each test in its own try block (multi-line tests indented)."""
    checks = "\n".join(
        f"try:\n{textwrap.indent(t.strip(), '    ')}\n"
        f"except BaseException as e:\n    print('FAIL', {t.strip()[:200]!r}, repr(e))"
        for t in tests
    )
    return f"{code}\n\n{checks}\n"


@register_operator("Test")
def test(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    """Run the problem's public tests on the solution; on failure the LLM fixes it (bounded).

    Only the public tests: the scored tests never reach the executor, or a fix prompt would
    show the expected values that score it (a HumanEval problem's one hidden test is the
    whole check). A problem without public tests has the solution run alone: Test then
    catches code that does not even run.
    """
    tests = state.problem.public_tests
    for round_ in range(1 + settings.test_fix_rounds):
        program = _test_program(state.solution or "", tests)
        (run,) = yield [RunCode("Test", program, timeout_s=settings.code_timeout_s)]
        failures = run.stdout.strip() if run.ok else (run.stderr.strip()[-500:] or run.reason)
        state.passed = run.ok and "FAIL" not in run.stdout
        state.feedback = None if state.passed else failures
        if state.passed or round_ == settings.test_fix_rounds:
            return
        text = prompts.fix_code(state.problem.question, state.solution, failures)
        state.solution = solution_code((yield from _one(state, "Test", text, settings)))


# --------------------------------------------------------------------------- refiners


@register_operator("Revise")
def revise(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    p = state.problem
    text = prompts.revise(p.question, state.solution, state.feedback, instruction)
    output = yield from _one(state, "Revise", text, settings)
    state.solution = solution_code(output) if p.domain == "code" else output


@register_operator("Format")
def format_(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
    p = state.problem
    text = prompts.format_answer(p.question, state.solution, instruction, p.domain)
    state.solution = (yield from _one(state, "Format", text, settings)).strip()
