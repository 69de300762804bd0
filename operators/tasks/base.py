"""The problem record shared by every task loader and answer checker."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One problem to solve.

    Attributes:
        id: stable identifier, unique within a task (e.g. ``gsm8k/test/17``); part of cache keys.
        domain: ``math``, ``code`` or ``qa`` (decides allowed operators and the checker).
        question: the text shown to the executor (for code: the prompt with the signature).
        answer: reference answer: a number as text for math, reference code or None for code,
            the answer string for qa.
        tests: for code: assert statements (hidden tests used for scoring).
        public_tests: for code: tests the Test operator may run while solving.
        entry_point: for code: the function name the tests call.
        meta: anything else a loader wants to keep (template, difficulty, source line).
    """

    id: str
    domain: str
    question: str
    answer: str | None = None
    tests: tuple[str, ...] = ()
    public_tests: tuple[str, ...] = ()
    entry_point: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)
