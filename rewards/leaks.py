"""Answers written into a workflow's instructions.

The policy reads the problem, so it can solve it itself and have the executor copy the result:
``Custom("Reply with exactly: 5")``. Accuracy would then pay for the policy's own answer, not
for what the workflow makes the executor do, and RL would learn to answer instead of to build
workflows. :func:`states_answer` says whether an instruction states the problem's reference;
the accuracy component then scores the sample 0 (``rewards.components.accuracy``).

What counts as stating it, by domain:

* math: a number in the instruction that is the reference (as the checker compares numbers),
  or the instruction as a whole read as the answer (``x = \\sqrt{2}``);
* qa: the normalised reference as whole words in the normalised instruction, unless the
  instruction names both ``yes`` and ``no``; a reference that is a single letter (a choice)
  only as that capital letter, unless the instruction names other capital letters too (not
  the pronoun ``I``; best effort: ``"B, not A"`` names two and passes);
* code: a definition of the entry point or a ``lambda`` (code is the answer).

An instruction that happens to hold the answer for another reason (``Custom("in 2 steps")`` on
a problem whose answer is 2) loses that sample's accuracy too: rare, and cheaper than paying
for a leak.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from flowgrpo.dsl import op_nodes
from flowgrpo.operators.checkers import check_math_answer, normalize_answer
from flowgrpo.operators.checkers.math import numbers_in
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards.sample import Sample

_CAPITAL = re.compile(r"\b[A-Z]\b")


def states_answer(sample: Sample) -> bool:
    """Whether an instruction of ``sample``'s workflow states its problem's reference answer
    (see the module docstring); False without a parsed workflow or a check for the domain."""
    report = sample.report
    if report is None or report.workflow is None:
        return False
    check = _BY_DOMAIN.get(sample.problem.domain)
    texts = [op.instruction for op in op_nodes(report.workflow) if op.instruction]
    return check is not None and any(check(text, sample.problem) for text in texts)


def _math(text: str, problem: Problem) -> bool:
    if not problem.answer:
        return False
    try:
        if check_math_answer(text, problem.answer).correct:
            return True
        return any(check_math_answer(repr(n), problem.answer).correct for n in numbers_in(text))
    except ValueError:  # a reference without a number or form: nothing to compare
        return False


def _qa(text: str, problem: Problem) -> bool:
    reference = (problem.answer or "").strip()
    if len(reference) == 1 and reference.isalpha():  # a choice: B, not the article "a"
        letters = set(_CAPITAL.findall(text)) - ({"I"} - {reference.upper()})  # the pronoun
        return letters == {reference.upper()}
    ref = normalize_answer(reference).split()
    words = normalize_answer(text).split()
    if not ref or (" ".join(ref) in ("yes", "no") and {"yes", "no"} <= set(words)):
        return False
    return any(words[i : i + len(ref)] == ref for i in range(len(words) - len(ref) + 1))


def _code(text: str, problem: Problem) -> bool:
    name = re.escape(problem.entry_point or "")
    return bool(re.search(rf"\bdef\s+{name}\s*\(|\blambda\b", text))


_BY_DOMAIN: dict[str, Callable[[str, Problem], bool]] = {
    "math": _math,
    "qa": _qa,
    "code": _code,
}
