"""Answer checkers: numbers with tolerance, code by running tests in the sandbox, QA by EM/F1.

Math answers need not be plain numbers: :func:`check_math_answer` (what ``check_answer`` uses
for math) reads fractions, LaTeX forms, thousands commas, currency, percentages and simple
arithmetic, and compares non-numeric references (``\\sqrt{2}``, tuples, letters) as normalised
text (:mod:`operators.math_answers`).

Every checker returns a :class:`CheckResult`; :func:`check_answer` picks the checker from the
problem's domain through :data:`DOMAIN_CHECKERS`. A prediction that cannot be read (no number, no
code) is *incorrect*, never an exception. A *reference* that cannot be read, or a code problem
without tests, is a data bug and raises ``ValueError``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flowgrpo.operators.math_answers import MathValue, final_region, parse_math_value, symbolic_key
from flowgrpo.operators.sandbox import run_python
from flowgrpo.operators.tasks.base import Problem

log = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------- numbers
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−])?[ \t]*\$?[ \t]*"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
    r"(?:[ \t]*/[ \t]*(?P<den>\d+(?:\.\d+)?)(?![\d,]))?"
)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_ANSWER_IS = re.compile(r"answer(?:\s+is|\s+was|\s*[:=])", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _clean(text: str) -> str:
    """Undo LaTeX number spellings: ``\\frac{a}{b}``, ``1{,}234``, ``1\\,000``, ``\\!``."""
    text = _LATEX_FRAC.sub(r"\1/\2", text)
    return text.replace("{,}", ",").replace("\\,", "").replace("\\!", "").replace("\\$", "$")


def _to_float(match: re.Match) -> float | None:
    value = float(match.group("num").replace(",", ""))
    if match.group("den") is not None:
        denominator = float(match.group("den"))
        if denominator == 0:
            return None
        value /= denominator
    return -value if match.group("sign") else value


def _numbers(text: str) -> list[float]:
    values = (_to_float(match) for match in _NUMBER.finditer(text))
    return [value for value in values if value is not None and math.isfinite(value)]


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces); None when there is none."""
    starts = list(_BOXED.finditer(text))
    if not starts:
        return None
    begin = starts[-1].end()
    depth = 1
    for position in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[begin:position]
    return text[begin:]


def extract_number(text: str | None) -> float | None:
    """The final numeric answer in ``text``, or None.

    Looked for in order, the first place that holds a number wins:
    the last ``\\boxed{...}`` (its last number), the text after the last ``####`` (its first
    number), the text after the last "answer is" / "answer:" / "answer =" (its first number),
    then the last number anywhere. Numbers may have thousands commas (``1,234``), a ``$``,
    a sign (``-``/``−``), decimals, an exponent (``1e3``), be a fraction ``3/4`` or
    ``\\frac{3}{4}``; units and ``%`` after them are ignored (``12%`` -> 12.0, not 0.12).

    Not handled: numbers written in words, mixed numbers (``1 1/2``), thousands separators other
    than commas, a sign after ``$`` (``$-5``); a hyphen glued to a word or digit is not a sign
    (``16-3`` is 16 and 3).
    """
    if not text:
        return None
    text = _clean(text)
    boxed = _last_boxed(text)
    if boxed is not None and (found := _numbers(boxed)):
        return found[-1]
    regions = []
    if "####" in text:
        regions.append(text.rsplit("####", 1)[1])
    answer_is = list(_ANSWER_IS.finditer(text))
    if answer_is:
        regions.append(text[answer_is[-1].end() :])
    for region in regions:
        if found := _numbers(region):
            return found[0]
    found = _numbers(text)
    return found[-1] if found else None


def _reference_number(reference: str | None) -> float:
    value = extract_number(reference)
    if value is None:
        raise ValueError(f"the reference answer {reference!r} contains no number to compare with")
    return value


def check_math(
    prediction: str | None, reference: str, rel_tol: float = 1e-6, abs_tol: float = 1e-6
) -> CheckResult:
    """Compare the numbers :func:`extract_number` finds in prediction and reference.

    Correct when ``math.isclose(pred, ref, rel_tol=rel_tol, abs_tol=abs_tol)``; score 1.0 or 0.0.
    A prediction without a number is incorrect. Raises ValueError when the reference has none.
    """
    ref = _reference_number(reference)
    pred = extract_number(prediction)
    if pred is None:
        return CheckResult(False, 0.0, f"no number found in the prediction (expected {ref:g})")
    ok = math.isclose(pred, ref, rel_tol=rel_tol, abs_tol=abs_tol)
    relation = "==" if ok else "!="
    return CheckResult(ok, 1.0 if ok else 0.0, f"predicted {pred:g} {relation} expected {ref:g}")


GRADED_TIERS: tuple[tuple[float, float], ...] = ((0.01, 0.7), (0.10, 0.4), (0.50, 0.2))
"""(largest relative error, score) pairs below the exact tier, tightest first."""


def _graded(prediction: str | None, reference: str, rel_tol: float, abs_tol: float) -> CheckResult:
    ref, pred = _reference_number(reference), extract_number(prediction)
    if pred is None:
        return CheckResult(False, 0.0, f"no number found in the prediction (expected {ref:g})")
    if math.isclose(pred, ref, rel_tol=rel_tol, abs_tol=abs_tol):
        return CheckResult(True, 1.0, f"predicted {pred:g} == expected {ref:g}")
    error = abs(pred - ref) / abs(ref) if ref != 0 else math.inf
    score = next((tier for limit, tier in GRADED_TIERS if error <= limit), 0.0)
    return CheckResult(
        False, score, f"predicted {pred:g} != expected {ref:g} (relative error {error:.3g})"
    )


def graded_math(
    prediction: str | None, reference: str, rel_tol: float = 1e-6, abs_tol: float = 1e-6
) -> float:
    """Partial credit by relative error ``|pred - ref| / |ref|``.

    1.0 when :func:`check_math` says correct (within the tolerances); else 0.7 if the error is
    <= 1%, 0.4 if <= 10%, 0.2 if <= 50%, 0.0 beyond (and when there is no number). A reference of
    0 has no relative error: only the exact tier applies. Raises ValueError for a reference
    without a number.
    """
    return _graded(prediction, reference, rel_tol, abs_tol).score


# --------------------------------------------------------------------------- QA
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


# --------------------------------------------------------------------------- code
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_TEST_STARTUP_S = 2.0  # interpreter start-up allowance added to the process time limit

# The harness runs in one sandbox process: the solution, then each test, each with its own
# SIGALRM time limit, in one shared namespace. Results are lines "<nonce> <json>" on stdout;
# whatever the solution or tests print goes to a discarded buffer.
_HARNESS = """\
import builtins as _fg_builtins, contextlib as _fg_ctx, io as _fg_io, json as _fg_json
import signal as _fg_signal, sys as _fg_sys

_FG_OUT = _fg_sys.stdout
_FG_NONCE = {nonce!r}
_FG_LIMIT = {limit!r}
_FG_ENTRY = {entry!r}
_FG_SOLUTION = {solution!r}
_FG_TESTS = {tests!r}


class _FgTimeout(BaseException):
    pass


def _fg_alarm(signum, frame):
    raise _FgTimeout()


def _fg_emit(*parts):
    _FG_OUT.write(_FG_NONCE + " " + _fg_json.dumps(parts) + "\\n")
    _FG_OUT.flush()


def _fg_run(source, name, namespace):
    try:
        _fg_signal.setitimer(_fg_signal.ITIMER_REAL, _FG_LIMIT)
        try:
            with _fg_ctx.redirect_stdout(_fg_io.StringIO()):
                exec(compile(source, name, "exec"), namespace)
        finally:
            _fg_signal.setitimer(_fg_signal.ITIMER_REAL, 0)
    except _FgTimeout:
        return "timeout after %g s" % _FG_LIMIT
    except BaseException as exc:
        return ("%s: %s" % (type(exc).__name__, exc))[:300]
    return None


_fg_signal.signal(_fg_signal.SIGALRM, _fg_alarm)
_fg_ns = {{"__name__": "solution", "__builtins__": _fg_builtins}}
_fg_emit("solution", _fg_run(_FG_SOLUTION, "<solution>", _fg_ns))
if _FG_ENTRY is not None:
    if _FG_ENTRY in _fg_ns:
        _fg_ns.setdefault("candidate", _fg_ns[_FG_ENTRY])
    else:
        _fg_emit("missing", _FG_ENTRY)
for _fg_i, _fg_test in enumerate(_FG_TESTS):
    _fg_emit("test", _fg_i, _fg_run(_fg_test, "<test %d>" % _fg_i, _fg_ns))
_fg_emit("done")
"""


def extract_code(text: str) -> str:
    """The code in a model answer: the first ```python fenced block, else the first fenced block
    of any language, else the whole text. An unclosed fence runs to the end of the text."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for tag, body in blocks:
        if tag in _PYTHON_TAGS:
            return body
    return blocks[0][1] if blocks else text


def _parse_harness(
    stdout: str, nonce: str, n_tests: int
) -> tuple[dict[int, str | None], list[str]]:
    """Per-test outcomes (None = passed, else the error) and notes about the solution."""
    outcomes: dict[int, str | None] = {}
    notes: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            parts = json.loads(line[len(nonce) + 1 :])
        except json.JSONDecodeError:
            continue
        if parts[0] == "test" and 0 <= parts[1] < n_tests:
            outcomes[parts[1]] = parts[2]
        elif parts[0] == "solution" and parts[1] is not None:
            notes.append(f"the solution raised {parts[1]}")
        elif parts[0] == "missing":
            notes.append(f"the solution does not define {parts[1]!r}")
    return outcomes, notes


def check_code(
    solution_code: str | None,
    tests: Sequence[str],
    entry_point: str | None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
) -> CheckResult:
    """Run ``tests`` against a solution in ONE sandbox process; score = fraction passed.

    The code is taken from the first ```python fence of ``solution_code`` when there is one
    (:func:`extract_code`). It is executed (``__name__ == "solution"``, so a ``__main__`` block
    does not run), then each test string (an assert, or any code such as HumanEval's ``check``
    function plus its call) runs in the same namespace, where ``candidate`` is bound to
    ``entry_point`` when the solution defines it. A test passes when it raises nothing.

    Limits: ``timeout_s`` seconds for the solution and for each test (SIGALRM inside the
    process); the process as a whole gets ``timeout_s * (len(tests) + 1) + 2`` seconds and
    ``memory_mb`` MiB; tests not reached before a hard kill count as failed.

    Not protected: the solution runs in the same interpreter as the harness, so deliberately
    hostile code can forge results (a per-run random nonce only stops accidental forgery); the
    sandbox's own limits are described in :mod:`operators.sandbox`. A test that swallows
    ``BaseException`` can defeat the per-test time limit.

    Raises:
        ValueError: ``tests`` is empty (a problem without tests cannot be scored).
    """
    tests = [tests] if isinstance(tests, str) else list(tests)
    if not tests:
        raise ValueError("check_code needs at least one test; this problem has none")
    code = extract_code(solution_code or "")
    if not code.strip():
        return CheckResult(False, 0.0, f"0/{len(tests)} tests passed: no code in the solution")
    nonce = secrets.token_hex(8)
    program = _HARNESS.format(
        nonce=nonce, limit=float(timeout_s), entry=entry_point, solution=code, tests=tests
    )
    limit = timeout_s * (len(tests) + 1) + _TEST_STARTUP_S
    result = run_python(program, timeout_s=limit, memory_mb=memory_mb)
    outcomes, notes = _parse_harness(result.stdout, nonce, len(tests))
    passed = sum(1 for error in outcomes.values() if error is None)
    failures = [f"test {i}: {error}" for i, error in sorted(outcomes.items()) if error is not None]
    missing = len(tests) - len(outcomes)
    if missing:
        failures.append(f"{missing} test(s) not run ({result.reason or 'harness stopped'})")
    details = "; ".join([f"{passed}/{len(tests)} tests passed", *notes, *failures[:3]])
    return CheckResult(passed == len(tests), passed / len(tests), details)


# --------------------------------------------------------------------------- math answers
def _reference_value(reference: str) -> MathValue | None:
    """The reference as a number: read whole, else the number of its stated result (a GSM8K
    solution's ``#### 7``, a ``\\boxed{}``); None for a symbolic reference (``\\sqrt{2}``)."""
    whole = parse_math_value(reference)
    if whole is not None:
        return whole
    region = final_region(reference)
    value = parse_math_value(region)
    if value is None and region != reference.strip() and extract_number(region) is not None:
        value = MathValue(extract_number(region))  # type: ignore[arg-type]
    return value


def check_math_answer(prediction: str | None, reference: str, graded: bool = False) -> CheckResult:
    """The math checker of :func:`check_answer`: numbers when the reference is one, else forms.

    A numeric reference (``0.75``, ``3/4``, ``\\frac{3}{4}``, ``1,000``, ``$5``, ``12%``,
    ``2^{10}``; see :func:`operators.math_answers.parse_math_value`) is compared with the
    prediction's stated result read the same way (else :func:`extract_number`), within 1e-6;
    a percentage matches either reading (``12%`` = 12 or 0.12). ``graded`` gives the
    :func:`graded_math` tiers. A reference that is not a number (``\\sqrt{2}``, ``(1, 2)``, a
    letter choice) is compared as text after :func:`operators.math_answers.symbolic_key`, with
    the prediction's stated result (:func:`operators.math_answers.final_region`) or its whole
    text; score 1.0 or 0.0.
    """
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"the math reference answer {reference!r} is empty")
    ref = _reference_value(reference)
    if ref is None:
        key = symbolic_key(reference)
        ok = key in (symbolic_key(final_region(prediction)), symbolic_key(prediction))
        relation = "==" if ok else "!="
        return CheckResult(ok, float(ok), f"predicted form {relation} expected {reference!r}")
    pred = parse_math_value(final_region(prediction))
    if pred is None and (number := extract_number(prediction)) is not None:
        pred = MathValue(number)
    if pred is None:
        return CheckResult(
            False, 0.0, f"no number found in the prediction (expected {ref.value:g})"
        )
    pairs = [(p, r) for p in pred.readings() for r in ref.readings()]
    if any(math.isclose(p, r, rel_tol=1e-6, abs_tol=1e-6) for p, r in pairs):
        return CheckResult(True, 1.0, f"predicted {pred.value:g} == expected {ref.value:g}")
    if graded:
        return _graded(f"{pred.value!r}", f"{ref.value!r}", 1e-6, 1e-6)
    return CheckResult(False, 0.0, f"predicted {pred.value:g} != expected {ref.value:g}")


# --------------------------------------------------------------------------- dispatch
def _check_math_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    if problem.answer is None:
        raise ValueError(f"math problem {problem.id} has no reference answer")
    return check_math_answer(prediction, problem.answer, graded)


def _check_code_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    if not problem.tests:
        raise ValueError(f"code problem {problem.id} has no tests to run")
    return check_code(prediction, problem.tests, problem.entry_point)


def _check_qa_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    if problem.answer is None:
        raise ValueError(f"qa problem {problem.id} has no reference answer")
    return check_qa(prediction, problem.answer)


DomainChecker = Callable[[Problem, "str | None", bool], CheckResult]
DOMAIN_CHECKERS: dict[str, DomainChecker] = {
    "math": _check_math_problem,
    "code": _check_code_problem,
    "qa": _check_qa_problem,
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
