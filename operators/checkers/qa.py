"""The QA checker: SQuAD exact match (``correct``) and token F1 (``score``)."""

from __future__ import annotations

import re
import string
from collections import Counter

from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.tasks.base import Problem

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


#: Answers F1 gives no partial credit between (HotpotQA's evaluation): "yes no" would
#: otherwise score 0.67 against either, paying a hedge.
_CLOSED = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str, articles: bool = False) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and (unless ``articles``) articles,
    collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    text = text if articles else _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str, articles: bool = False) -> float:
    """SQuAD token F1 between the normalised texts (1.0 when both are empty); 0 between
    different answers when either is yes, no or noanswer (HotpotQA's rule)."""
    pred = normalize_answer(prediction, articles).split()
    ref = normalize_answer(reference, articles).split()
    if not pred or not ref:
        return float(pred == ref)
    if pred != ref and (" ".join(pred) in _CLOSED or " ".join(ref) in _CLOSED):
        return 0.0
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
    # a reference that is all article ("A", a letter choice) keeps its articles: else every
    # empty answer ("", ".", "the") would match it
    articles = not normalize_answer(reference)
    pred = normalize_answer(prediction, articles)
    exact = bool(pred) and pred == normalize_answer(reference, articles)
    f1 = 1.0 if exact else (token_f1(prediction, reference, articles) if pred else 0.0)
    return CheckResult(exact, f1, f"exact match {exact}, F1 {f1:.3f}")


def check_qa_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    """The checker of the ``qa`` domain (F1 is always the score; ``graded`` changes nothing)."""
    if problem.answer is None:
        raise ValueError(f"qa problem {problem.id} has no reference answer")
    return check_qa(prediction, problem.answer)
