"""The math checker: numbers with tolerance and graded tiers, and answers that are not numbers.

:func:`check_math_answer` (what ``check_answer`` uses for math) reads the reference and the
prediction's stated result as whole values:

* :func:`parse_math_value` reads a WHOLE answer as one number: ``3/4``, ``\\frac{3}{4}``,
  ``1,000``, ``$5``, ``-$5``, ``12%`` (flagged as a percentage), ``x = 5``, ``5 apples`` (trailing
  unit words), ``2^{10}``, ``1/2 + 1/4``, ``3 \\times 4`` -- numbers joined by ``+ - * / ^`` and
  parentheses, evaluated exactly as floats (no names, no calls). Anything else -> None.
* :func:`final_region` finds where a model's answer states its result (the last ``\\boxed{}``,
  after ``####``, after "answer is"/"answer:", else the last non-empty line).
* :func:`symbolic_key` normalises an answer that is not a number (``\\sqrt{2}``, ``(1, 2)``,
  ``x^2+1``, a letter choice) for string comparison: LaTeX spacing and sizing commands,
  ``\\text{}``, ``$``, whitespace and a trailing period removed, lowercase.
* :func:`extract_number` finds the final number anywhere in a free-form text (the fallback, and
  what :func:`check_math` and :func:`graded_math` compare).

A prediction that cannot be read is incorrect; a reference that cannot be read raises
``ValueError`` (a data bug). Not handled: equivalence of different symbolic forms
(``\\sqrt{2}/2`` vs ``1/\\sqrt{2}``), numbers in words, mixed numbers (``1 1/2``), units converted
(``1 km`` vs ``1000 m``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from functools import lru_cache

from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.tasks.base import Problem

_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"answer(?:\s+is|\s+was|\s*[:=])", re.IGNORECASE)


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


# --------------------------------------------------------------------------- numbers in text
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−])?[ \t]*\$?[ \t]*"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
    r"(?:[ \t]*/[ \t]*(?P<den>\d+(?:\.\d+)?)(?![\d,]))?"
)


def _clean(text: str) -> str:
    """Undo LaTeX number spellings: ``\\frac{a}{b}``, ``1{,}234``, ``1\\,000``, ``\\!``."""
    text = _FRAC.sub(r"\1/\2", text)
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


def numbers_in(text: str | None) -> list[float]:
    """Every number of ``text`` as :func:`extract_number` reads numbers, in order."""
    return _numbers(_clean(text)) if text else []


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
    error = _relative_error(pred, ref)
    return CheckResult(
        False,
        _tier(pred, ref),
        f"predicted {pred:g} != expected {ref:g} (relative error {error:.3g})",
    )


def _relative_error(pred: float, ref: float) -> float:
    return abs(pred - ref) / abs(ref) if ref != 0 else math.inf


def _tier(pred: float, ref: float) -> float:
    """The :data:`GRADED_TIERS` score of a number that is not the reference."""
    error = _relative_error(pred, ref)
    return next((tier for limit, tier in GRADED_TIERS if error <= limit), 0.0)


def same_number(pred: float, ref: float) -> bool:
    """Whether ``pred`` states the reference number ``ref``.

    An integer reference needs that integer (to 1e-6, the rounding of float arithmetic such as
    ``0.1 * 30``): a relative tolerance would let ``192000150`` pass for ``192000000``. Any other
    reference needs a relative error of at most 1e-6, and no absolute slack: ``0.0000001`` is not
    ``0.0000005``.
    """
    if ref.is_integer():
        return abs(pred - ref) <= 1e-6
    return math.isclose(pred, ref, rel_tol=1e-6, abs_tol=0.0)


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


# --------------------------------------------------------------------------- whole answers
@dataclass(frozen=True)
class MathValue:
    """A numeric answer; ``percent`` when it was written with ``%``."""

    value: float
    percent: bool = False

    def readings(self) -> tuple[float, ...]:
        """The values it may mean: ``12%`` is 12 or 0.12."""
        return (self.value, self.value / 100) if self.percent else (self.value,)


_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mathbf|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg|displaystyle|[,;:! ])")
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d,])")
_PREFIX = re.compile(r"^[A-Za-z]\w*\s*=\s*")  # "x = 5"
_UNITS = re.compile(r"(?<=[\d)])\s*[A-Za-z][A-Za-z .]*$")  # "5 apples", "3.5 hours"
_NOT_UNITS = {"pi", "e", "i", "inf", "infinity", "sqrt"}
#: A stated result that names a constant or a function is not the number written before it
#: (``5\\pi`` is not 5): no falling back to :func:`extract_number` then.
_SYMBOLS = re.compile(
    r"\\(?:pi|sqrt|infty|log|ln|exp|sin|cos|tan)(?![A-Za-z])"
    r"|\b(?:pi|sqrt|inf|infinity)\b|\d\s*[ei]\b"
)
_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow,
}  # fmt: skip


def _latex_to_plain(text: str) -> str:
    text = _TEXT.sub(r"\1", text)
    for _ in range(3):  # nested \frac{\frac{1}{2}}{3}
        text = _FRAC.sub(r"((\1)/(\2))", text)
    text = _SPACING.sub("", text).replace("{,}", ",").replace("\\%", "%").replace("\\$", "$")
    text = text.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    return text.replace("{", "(").replace("}", ")").replace("−", "-")


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ValueError("power too large")
        value = _OPS[type(node.op)](left, right)
        if not isinstance(value, float):  # (-8) ** (1/3) is complex: not a real number
            raise ValueError("not a real number")
        return value
    raise ValueError("not arithmetic")


def parse_math_value(text: str | None) -> MathValue | None:
    """The whole of ``text`` as one number (see the module docstring), or None."""
    if not text or len(text) > 200:
        return None
    s = _latex_to_plain(text).strip().rstrip(".").strip()
    s = s.replace("$", "").strip()
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    s = _PREFIX.sub("", s)
    units = _UNITS.search(s)
    if units and units.group().strip().lower() not in _NOT_UNITS:
        s = s[: units.start()].strip()
    s = _THOUSANDS.sub(lambda m: m.group().replace(",", ""), s)
    if not s or not re.fullmatch(r"[\d\s.+\-*/^()eE]+", s) or re.search(r"[eE]\D|^[eE]", s):
        return None
    try:
        value = _eval(ast.parse(s.replace("^", "**"), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return MathValue(value, percent) if math.isfinite(value) else None


def final_region(text: str | None) -> str:
    """Where ``text`` states its result: the last ``\\boxed{...}``, the line after the last
    ``####`` or "answer is"/"answer:", else the last non-empty line ('' for no text)."""
    if not text or not text.strip():
        return ""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().split("\n")[0].strip()
    found = list(_ANSWER_IS.finditer(text))
    if found:
        return text[found[-1].end() :].strip().split("\n")[0].strip()
    return [line for line in text.splitlines() if line.strip()][-1].strip()


def symbolic_key(text: str | None) -> str:
    """``text`` normalised for comparing non-numeric math answers (see the module docstring)."""
    s = _TEXT.sub(r"\1", text or "")
    s = _SPACING.sub("", s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("$", "").replace("\\%", "%")
    s = "".join(s.split()).rstrip(".").lower()
    if len(s) == 3 and s[0] == "(" and s[2] == ")" and s[1].isalpha():  # "(b)" -> "b"
        s = s[1]
    return s


# --------------------------------------------------------------------------- the checker
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
    ``2^{10}``; see :func:`parse_math_value`) is compared with the prediction's stated result
    read the same way (else :func:`extract_number`, unless the stated result names a constant
    or function: ``5\\pi``), as :func:`same_number` says; a percentage matches either reading
    (``12%`` = 12 or 0.12). ``graded`` gives the :data:`GRADED_TIERS` to a wrong number. A
    reference that is not a number (``\\sqrt{2}``, ``(1, 2)``, a letter choice) is compared as
    text after :func:`symbolic_key`, with the prediction's stated result
    (:func:`final_region`) or its whole text; score 1.0 or 0.0.
    """
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"the math reference answer {reference!r} is empty")
    if prediction is None or len(prediction) <= _MEMO_CHARS:
        return _check_memo(prediction, reference, graded)
    return _check(prediction, reference, graded)


#: Verdicts on predictions up to this many characters are remembered (:func:`_check_memo`).
_MEMO_CHARS = 1000


@lru_cache(maxsize=16384)
def _check_memo(prediction: str | None, reference: str, graded: bool) -> CheckResult:
    """:func:`_check`, remembered: the verdict is a pure function of its three arguments and
    the same short answers are checked again and again (the SIMULATED executor asks the checker
    whether each current solution is right, about once per operator call: 29% of a
    ``flowgrpo search`` before; docs/BENCHMARKS.md). Bounded: at most 16,384 verdicts on
    answers of at most 1,000 characters."""
    return _check(prediction, reference, graded)


def _check(prediction: str | None, reference: str, graded: bool) -> CheckResult:
    ref = _reference_value(reference)
    if ref is None:
        key = symbolic_key(reference)
        ok = key in (symbolic_key(final_region(prediction)), symbolic_key(prediction))
        relation = "==" if ok else "!="
        return CheckResult(ok, float(ok), f"predicted form {relation} expected {reference!r}")
    region = final_region(prediction)
    pred = parse_math_value(region)
    if pred is None and not _SYMBOLS.search(region):
        number = extract_number(prediction)
        pred = None if number is None else MathValue(number)
    if pred is None:
        return CheckResult(
            False, 0.0, f"no number found in the prediction (expected {ref.value:g})"
        )
    pairs = [(p, r) for p in pred.readings() for r in ref.readings()]
    if any(same_number(p, r) for p, r in pairs):
        return CheckResult(True, 1.0, f"predicted {pred.value:g} == expected {ref.value:g}")
    if graded:
        score = _tier(pred.value, ref.value)
        return CheckResult(False, score, f"predicted {pred.value:g} != expected {ref.value:g}")
    return CheckResult(False, 0.0, f"predicted {pred.value:g} != expected {ref.value:g}")


def check_math_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    """The checker of the ``math`` domain: :func:`check_math_answer` against the reference."""
    if problem.answer is None:
        raise ValueError(f"math problem {problem.id} has no reference answer")
    return check_math_answer(prediction, problem.answer, graded)
