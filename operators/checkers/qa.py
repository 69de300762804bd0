"""The QA checker: SQuAD exact match (``correct``) and token F1 (``score``)."""

from __future__ import annotations

import re
import string
from collections import Counter

from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.tasks.base import Problem

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1 between the normalised texts (1.0 when both are empty)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def check_qa(prediction: str | None, reference: str) -> CheckResult:
    """Exact match after :func:`normalize_answer` (``correct``) and token F1 (``score``).

    The whole prediction is compared: reduce it to the answer first (the Format operator).
    """
    prediction = prediction or ""
    exact = normalize_answer(prediction) == normalize_answer(reference)
    f1 = 1.0 if exact else token_f1(prediction, reference)
    return CheckResult(exact, f1, f"exact match {exact}, F1 {f1:.3f}")


def check_qa_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    """The checker of the ``qa`` domain (F1 is always the score; ``graded`` changes nothing)."""
    if problem.answer is None:
        raise ValueError(f"qa problem {problem.id} has no reference answer")
    return check_qa(prediction, problem.answer)
