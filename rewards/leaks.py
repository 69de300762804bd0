"""Answers written into a workflow's instructions.

The policy reads the problem, so it can solve it itself and have the executor copy the result:
``Custom("Reply with exactly: 5")``. Accuracy would then pay for the policy's own answer, not
for what the workflow makes the executor do, and RL would learn to answer instead of to build
workflows. :func:`states_answer` says whether an instruction states the problem's reference;
the accuracy component then scores the sample 0 (``rewards.components.accuracy``).

What counts as stating it, by domain:

* math: a number in the instruction that is the reference (as the checker compares numbers),
  an arithmetic span the checker reads as the reference (``40+2``, ``(1, 2)``), or the
  instruction as a whole read as the answer (``x = \\sqrt{2}``);
* qa: the normalised reference as whole words in the normalised instruction, once the
  alternatives ``yes or no`` / ``yes/no`` (either order) are taken out of it; a reference that
  is a single letter (a choice) only as that letter, either case (not the article ``a`` or
  the pronoun ``I``), unless the instruction names other such letters too (best effort:
  ``"B, not A"`` names two and passes);
* code: a definition of the entry point, a ``lambda``, or the entry point's name assigned or
  imported (``add = operator.add``, ``from operator import add``): code is the answer.

Not caught (best effort): numbers in words (``forty-two``), an answer spread over several
instructions or spelled out letter by letter.

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

_LETTER = re.compile(r"\b[A-Za-z]\b")
#: a run of digits, arithmetic and brackets that starts and ends with a digit or a bracket
_SPAN = re.compile(r"[\d(\[][\d\s+\-*/^().,\[\]]*[\d)\]]|\d")
#: "yes or no", "yes/no", "no, yes": naming the options states neither
_OPTIONS = re.compile(r"\b(?:yes\s*(?:/|,|or)\s*no|no\s*(?:/|,|or)\s*yes)\b")


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
        spans = [repr(n) for n in numbers_in(text)] + _SPAN.findall(text)
        return any(check_math_answer(span, problem.answer).correct for span in spans)
    except ValueError:  # a reference without a number or form: nothing to compare
        return False


def _qa(text: str, problem: Problem) -> bool:
    reference = (problem.answer or "").strip()
    if len(reference) == 1 and reference.isalpha():  # a choice: B, not the article "a"
        named = {x.upper() for x in _LETTER.findall(text) if x not in ("a", "i")}
        letters = named - ({"I"} - {reference.upper()})  # the pronoun
        return letters == {reference.upper()}
    ref = normalize_answer(reference).split()
    words = normalize_answer(_OPTIONS.sub(" ", text.lower())).split()
    return bool(ref) and any(
        words[i : i + len(ref)] == ref for i in range(len(words) - len(ref) + 1)
    )


def _code(text: str, problem: Problem) -> bool:
    name = re.escape(problem.entry_point or "")
    if re.search(rf"\bdef\s+{name}\s*\(|\blambda\b", text):
        return True
    named = rf"\b{name}\s*=(?!=)|\bimport\b[^\n]*\b{name}\b"
    return bool(name) and re.search(named, text) is not None


_BY_DOMAIN: dict[str, Callable[[str, Problem], bool]] = {
    "math": _math,
    "qa": _qa,
    "code": _code,
}
