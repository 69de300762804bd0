"""Answer checkers, one module per task domain, and :func:`check_answer`, which picks one.

* :mod:`flowgrpo.operators.checkers.math`: numbers with tolerance and graded tiers, fractions,
  LaTeX, percentages, simple arithmetic and symbolic forms (:func:`check_math_answer`).
* :mod:`flowgrpo.operators.checkers.qa`: SQuAD exact match and token F1 (:func:`check_qa`).
* :mod:`flowgrpo.operators.checkers.code`: the solution and its tests in separate sandbox processes
  (:func:`check_code`).

Every checker returns a :class:`CheckResult`; :func:`check_answer` picks the checker from the
problem's domain through :data:`DOMAIN_CHECKERS`. A prediction that cannot be read (no number, no
code) is *incorrect*, never an exception. A *reference* that cannot be read, or a code problem
without tests, is a data bug and raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable

from flowgrpo.operators.checkers.code import check_code, check_code_problem, extract_code
from flowgrpo.operators.checkers.math import (
    GRADED_TIERS,
    check_math,
    check_math_answer,
    check_math_problem,
    extract_number,
    graded_math,
)
from flowgrpo.operators.checkers.qa import check_qa, check_qa_problem, normalize_answer, token_f1
from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.tasks.base import Problem

DomainChecker = Callable[[Problem, "str | None", bool], CheckResult]
#: The checker of each task domain: ``(problem, prediction, graded) -> CheckResult``.
DOMAIN_CHECKERS: dict[str, DomainChecker] = {
    "math": check_math_problem,
    "code": check_code_problem,
    "qa": check_qa_problem,
}


def check_answer(problem: Problem, prediction: str | None, graded: bool = False) -> CheckResult:
    """Check ``prediction`` against ``problem`` with the checker of ``problem.domain``.

    ``graded`` asks for partial credit where a domain has it (math: the :func:`graded_math`
    tiers; code always scores the fraction of tests passed; qa always scores F1).

    Raises:
        ValueError: an unknown domain, or a problem without a reference / tests.
    """
    checker = DOMAIN_CHECKERS.get(problem.domain)
    if checker is None:
        raise ValueError(
            f"no checker for domain {problem.domain!r} (problem {problem.id}); "
            f"known domains: {sorted(DOMAIN_CHECKERS)}"
        )
    return checker(problem, prediction, graded)


__all__ = [
    "DOMAIN_CHECKERS",
    "GRADED_TIERS",
    "CheckResult",
    "DomainChecker",
    "check_answer",
    "check_code",
    "check_math",
    "check_math_answer",
    "check_qa",
    "extract_code",
    "extract_number",
    "graded_math",
    "normalize_answer",
    "token_f1",
]
