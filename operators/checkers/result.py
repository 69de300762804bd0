"""The verdict of every answer checker (:class:`CheckResult`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one prediction.

    Attributes:
        correct: fully right (numbers within tolerance, all tests passed, exact match).
        score: in [0, 1]: 1.0/0.0 for plain math, the graded tier, the fraction of tests
            passed, or the token F1.
        details: a short human-readable explanation (what was compared, what failed).
    """

    correct: bool
    score: float
    details: str
