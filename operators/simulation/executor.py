"""The SIMULATED executor: a stand-in for an executor LLM with known, documented probabilities.

Not a model. Each operator call succeeds, detects, fixes or votes with the probabilities of
:class:`~operators.simulation.SimulationParams` (rules in :mod:`operators.simulation.model`),
and the backend writes text in exactly the form the real operator parses: Programmer gets a
```python block whose ``solve()`` returns the chosen answer (the real sandbox runs it), Review a
PASS/FAIL verdict, the ensemblers a letter, the others a solution ending in its final answer.
Answers then flow through the real interpreter, sandbox and checkers. A wrong answer is a
plausible wrong number (the reference plus or minus a small offset), never the reference.

Why: the CPU default executor (SmolLM2-135M) is right on about 2 in 24 problems, so RL cannot
show that it learns to pick better workflows; here the expected accuracy of every workflow is
known exactly (:func:`operators.simulation.analyze`), so a run can report its regret.

Determinism: each draw hashes (seed, problem id, operator, the call's index in its run, the
prompt, and the repeat index when a workflow runs more than once) and the problem's latent class
hashes (seed, problem id, question): fixed seed, fixed results, however requests are batched or
ordered. The call and repeat indices come from :class:`~operators.llm.RequestContext`, which the
operators attach to every request.

Not handled: code problems (CustomCodeGenerate, Test) and QA; such requests, and requests
without a context, get an error result (the run is unscorable). Token counts are whitespace
word counts.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from flowgrpo.operators.checkers import check_answer, extract_number
from flowgrpo.operators.llm import GenerationRequest, GenerationResult
from flowgrpo.operators.sandbox import ExecResult
from flowgrpo.operators.simulation import model
from flowgrpo.operators.simulation.params import Probs, SimulationParams
from flowgrpo.operators.simulation.settings import SANDBOXES, simulation_settings

logger = logging.getLogger(__name__)

Chooser = Callable[[Sequence[float], tuple], int]
"""``chooser(weights, key) -> outcome index``: how a draw is made (default: hash of the key)."""

REVIEW_PASS = "PASS: (simulated review) every step and the final answer check out."
REVIEW_FAIL = "FAIL: (simulated review) the final answer does not follow; recheck each step."
CRASH = "simulated bug in the generated program"
_OFFSETS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 20)
_CANDIDATE = re.compile(r"\n\n\(([A-Z])\) ?")
_RETURN = re.compile(r"def solve\(\):\n    return (.+)\n\nprint\(solve\(\)\)\n?")


class NotSimulated(Exception):
    """A request the simulation cannot answer (becomes an error result, never raised out)."""


class SimulatedExecutor:
    """The SIMULATED executor backend (registered as ``"simulated"``).

    Args:
        params: a :class:`SimulationParams`, a mapping for :meth:`SimulationParams.from_dict`,
            or None for the defaults.
        seed: any integer; part of every draw and of ``settings_key``.
        chooser: how draws are made; default hashes the draw's key. Exact enumeration
            (:func:`operators.simulation.exact.enumerate_exact`) replaces it.
        latent: force every problem's latent class (exact enumeration); None draws it per
            problem from ``params.latent_shares``.
        sandbox: who runs the Programmer programs it writes: ``"process"`` (the real process
            sandbox, as for a model executor) or ``"in_process"`` (:func:`simulated_sandbox`:
            the same answers without starting a process; refuses any other program). Exposed
            as the ``sandbox`` attribute, which :func:`operators.interpreter.run_workflows`
            uses when it is given none (None: the process sandbox).
    """

    #: every repeat of a workflow draws afresh (``RequestContext.repeat`` is in the draw key)
    repeats_differ = True

    def __init__(
        self,
        params: SimulationParams | Mapping[str, Any] | None = None,
        seed: int = 0,
        chooser: Chooser | None = None,
        latent: int | None = None,
        sandbox: str = "process",
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"SimulatedExecutor seed must be an integer, got {seed!r}")
        if sandbox not in SANDBOXES:
            raise ValueError(
                f"SimulatedExecutor sandbox must be one of {SANDBOXES}, got {sandbox!r}"
            )
        self.sandbox = simulated_sandbox if sandbox == "in_process" else None
        self.params = SimulationParams.from_dict(params)
        self.seed = seed
        self.chooser = chooser or _hash_chooser
        self.latent = latent
        self.settings_key = f"simulated:seed={seed}:params={self.params.digest()}"
        if latent is not None:
            self.settings_key += f":latent={latent}"
        self.requests = 0
        logger.info("SIMULATED executor (no model): seed %d, params %s", seed, self.params.digest())

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; unsimulated requests get an error result."""
        self.requests += len(requests)
        return [self._result(request) for request in requests]

    def _result(self, request: GenerationRequest) -> GenerationResult:
        prompt_tokens = sum(len(m.content.split()) for m in request.messages)
        try:
            text = self._respond(request)
        except NotSimulated as exc:
            logger.warning("SIMULATED executor cannot answer: %s", exc)
            return GenerationResult("", prompt_tokens, error=f"SIMULATED executor: {exc}")
        return GenerationResult(text, prompt_tokens, completion_tokens=len(text.split()))

    def _respond(self, request: GenerationRequest) -> str:
        context = request.context
        if context is None:
            raise NotSimulated(
                "the request has no RequestContext (only operator calls are simulated)"
            )
        problem = context.problem
        if problem.domain != "math":
            raise NotSimulated(f"{problem.domain} problems are not simulated (math only)")
        handler = _HANDLERS.get(context.op)
        if handler is None:
            raise NotSimulated(f"operator {context.op} is not simulated")
        kind = self.params.kind_of(problem)  # its difficulty, and template where it matters
        latent = self.latent
        if latent is None:
            latent = model.latent_of(self.params, self.seed, problem.id, problem.question)
        prompt = request.messages[-1].content
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
        call = _Call(self, problem, self.params.probs(kind, latent), prompt, context, digest)
        return handler(call)


def simulated_sandbox(codes: Sequence[str], timeouts: Sequence[float]) -> list[ExecResult]:
    """An in-process stand-in for the process sandbox that runs ONLY the simulated executor's
    Programmer programs (``solve()`` returns a literal or raises the simulated bug), with the
    output the real sandbox gives; anything else is refused, never executed."""
    return [_run_simulated(code) for code in codes]


def _run_simulated(code: str) -> ExecResult:
    body = code.replace("# simulated executor\n", "", 1)
    match = _RETURN.fullmatch(body)
    if match:
        value = ast.literal_eval(match.group(1))
        return ExecResult(True, f"{value}\n", "", 0, False, "", 0.0)
    if f'raise ValueError("{CRASH}")' in body:
        stderr = f"Traceback (most recent call last):\nValueError: {CRASH}\n"
        return ExecResult(False, "", stderr, 1, False, "exit code 1", 0.0)
    return ExecResult(False, "", "", None, False, "not a simulated program (refused)", 0.0)


@lru_cache(maxsize=4096)
def _reference_number(answer: str | None) -> float | None:
    """The number a problem's reference answer states, read once per answer rather than once
    per operator call (a twelfth of a ``flowgrpo search`` before)."""
    return extract_number(answer)


def _hash_chooser(weights: Sequence[float], key: tuple) -> int:
    return model.choose(weights, model.unit_draw(*key))


class _Call:
    """One request being answered: the problem, its probabilities and the parsed prompt."""

    def __init__(self, sim: SimulatedExecutor, problem, probs: Probs, prompt: str, ctx, digest):
        self.sim, self.problem, self.probs, self.prompt = sim, problem, probs, prompt
        # repeat 0 keeps the key of a single execution (cached results stay valid)
        repeat = (ctx.repeat,) if ctx.repeat else ()
        self.key = (sim.seed, problem.id, ctx.op, ctx.call, digest, *repeat)
        self.reference = _reference_number(problem.answer)
        if self.reference is None:
            raise NotSimulated(f"problem {problem.id} has no numeric reference answer")
        marker = f"Problem:\n{problem.question.strip()}"
        # the last one: the operators write the problem after the instruction, so one before
        # it is the workflow's text, which may forge a solution or feedback section
        start = prompt.rfind(marker)
        if start < 0:
            raise NotSimulated("the prompt does not show the problem in the operators' format")
        self.tail = prompt[start + len(marker) :]

    def draw(self, weights: Sequence[float], label: str = "") -> int:
        return self.sim.chooser(weights, (*self.key, label))

    def unit(self, label: str) -> float:
        return model.unit_draw(*self.key, label)

    # ------------------------------------------------------------------ the prompt

    def solution_and_feedback(self) -> tuple[str | None, str | None]:
        """The current solution and feedback sections of the prompt (None when absent)."""
        tail, feedback = self.tail, None
        head, sep, rest = tail.partition("\n\nFeedback:\n")
        if sep:
            tail, feedback = head, rest
        prefix = "\n\nCurrent solution:\n"
        solution = tail[len(prefix) :] if tail.startswith(prefix) else None
        return solution, feedback

    def klass(self, solution: str | None) -> int:
        """NONE, RIGHT or WRONG, by the real checker."""
        if not solution:
            return model.NONE
        return model.RIGHT if check_answer(self.problem, solution).correct else model.WRONG

    def candidates(self) -> list[str]:
        parts = _CANDIDATE.split(self.tail)
        return [text.strip() for text in parts[2::2]]

    # ------------------------------------------------------------------ answers

    def value(self, right: bool, label: str = "value") -> str:
        """The right answer, or a plausible wrong one (reference +- a small offset)."""
        if right:
            return _number(self.reference)
        u = self.unit(label)
        offset = _OFFSETS[int(u * len(_OFFSETS))]
        scale = 10 ** max(0, int(math.log10(abs(self.reference) or 1)) - 2)
        sign = (
            -1 if self.unit(label + "-sign") < 0.5 and self.reference - offset * scale >= 0 else 1
        )
        wrong = self.reference + sign * offset * scale
        while check_answer(self.problem, _number(wrong)).correct:  # a loose tolerance: go further
            offset *= 2
            wrong = self.reference + offset * scale
        return _number(wrong)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _text(call: _Call, right: bool, lead: str) -> str:
    return f"(simulated executor) {lead}\nThe final answer is {call.value(right)}."


# --------------------------------------------------------------------------- operators


def _custom(call: _Call) -> str:
    solution, _ = call.solution_and_feedback()
    shown = call.klass(solution) if solution else None
    p = model.custom_right(call.probs, shown)
    return _text(call, call.draw([p, 1 - p]) == 0, "Working through the problem step by step.")


def _answer_generate(call: _Call) -> str:
    p = call.probs.answer_generate_correct
    right = call.draw([p, 1 - p]) == 0
    lead = "(simulated executor) Thought: combine the quantities in order."
    return f"{lead}\nAnswer: {call.value(right)}"


def _programmer(call: _Call) -> str:
    outcome = call.draw(model.programmer_weights(call.probs))
    body = f'raise ValueError("{CRASH}")' if outcome == 0 else f"return {call.value(outcome == 1)}"
    return f"```python\n# simulated executor\ndef solve():\n    {body}\n```"


def _review(call: _Call) -> str:
    solution, _ = call.solution_and_feedback()
    p = model.review_fail(call.probs, call.klass(solution))
    return REVIEW_FAIL if call.draw([p, 1 - p]) == 0 else REVIEW_PASS


def _revise(call: _Call) -> str:
    solution, feedback = call.solution_and_feedback()
    critique = bool(feedback) and feedback.startswith("FAIL")
    p = model.revise_right(call.probs, call.klass(solution), critique)
    return _text(call, call.draw([p, 1 - p]) == 0, "Revised solution after the feedback.")


def _format(call: _Call) -> str:
    """Keeps the answer: the solution's own final number (a NONE solution: a wrong number)."""
    solution, _ = call.solution_and_feedback()
    number = extract_number(solution) if solution else None
    return call.value(False) if number is None else _number(number)


def _ensemble(call: _Call) -> str:
    candidates = call.candidates()
    right = [call.klass(c) == model.RIGHT for c in candidates]
    if not candidates:
        raise NotSimulated("no candidates in the ensemble prompt")
    index = call.draw(model.candidate_weights(right, call.probs.ensemble_tie_skill))
    return chr(65 + index)


_HANDLERS: dict[str, Callable[[_Call], str]] = {
    "Custom": _custom,
    "AnswerGenerate": _answer_generate,
    "Programmer": _programmer,
    "Review": _review,
    "Revise": _revise,
    "Format": _format,
    "ScEnsemble": _ensemble,
    "MdEnsemble": _ensemble,
}


NOTICE = (
    "SIMULATED executor (operators/simulation): accuracies are from a model, not an LLM "
    "(seed {seed}, params {digest}; docs/SIMULATED_EXECUTOR.md)"
)
"""Logged as a warning when a run's executor section builds the simulated executor."""


def make_simulated(section: Any = None, **kwargs: Any) -> SimulatedExecutor:
    """The factory registered as backend ``"simulated"``: from a run's executor section
    (``section.options``: seed, params, sandbox; the notice is logged), or from ``params``
    (mapping) and ``seed``."""
    if section is not None:
        settings = simulation_settings(section)
        logger.warning(NOTICE.format(seed=settings.seed, digest=settings.params.digest()))
        return SimulatedExecutor(settings.params, seed=settings.seed, sandbox=settings.sandbox)
    unknown = sorted(set(kwargs) - {"params", "seed", "sandbox"})
    if unknown:
        raise ValueError(
            f"the simulated executor takes 'params', 'seed' and 'sandbox', not {unknown}; put "
            "probabilities under 'params'"
        )
    return SimulatedExecutor(
        kwargs.get("params"), seed=kwargs.get("seed", 0), sandbox=kwargs.get("sandbox", "process")
    )


__all__ = ["NOTICE", "NotSimulated", "SimulatedExecutor", "make_simulated", "simulated_sandbox"]
