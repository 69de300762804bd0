"""Reading math answers that are not plain numbers: whole-answer values and symbolic forms.

Used by :func:`operators.checkers.check_math_answer` (the math checker of ``check_answer``):

* :func:`parse_math_value` reads a WHOLE answer as one number: ``3/4``, ``\\frac{3}{4}``,
  ``1,000``, ``$5``, ``-$5``, ``12%`` (flagged as a percentage), ``x = 5``, ``5 apples`` (trailing
  unit words), ``2^{10}``, ``1/2 + 1/4``, ``3 \\times 4`` -- numbers joined by ``+ - * / ^`` and
  parentheses, evaluated exactly as floats (no names, no calls). Anything else -> None.
* :func:`final_region` finds where a model's answer states its result (the last ``\\boxed{}``,
  after ``####``, after "answer is"/"answer:", else the last non-empty line).
* :func:`symbolic_key` normalises an answer that is not a number (``\\sqrt{2}``, ``(1, 2)``,
  ``x^2+1``, a letter choice) for string comparison: LaTeX spacing and sizing commands,
  ``\\text{}``, ``$``, whitespace and a trailing period removed, lowercase.

Not handled: equivalence of different symbolic forms (``\\sqrt{2}/2`` vs ``1/\\sqrt{2}``), numbers
in words, mixed numbers (``1 1/2``), units converted (``1 km`` vs ``1000 m``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass

__all__ = ["MathValue", "final_region", "parse_math_value", "symbolic_key"]


@dataclass(frozen=True)
class MathValue:
    """A numeric answer; ``percent`` when it was written with ``%``."""

    value: float
    percent: bool = False

    def readings(self) -> tuple[float, ...]:
        """The values it may mean: ``12%`` is 12 or 0.12."""
        return (self.value, self.value / 100) if self.percent else (self.value,)


_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mathbf|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg|displaystyle|[,;:! ])")
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d,])")
_PREFIX = re.compile(r"^[A-Za-z]\w*\s*=\s*")  # "x = 5"
_UNITS = re.compile(r"(?<=[\d)])\s*[A-Za-z][A-Za-z .]*$")  # "5 apples", "3.5 hours"
_NOT_UNITS = {"pi", "e", "i", "inf", "infinity", "sqrt"}
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
        return _OPS[type(node.op)](left, right)
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


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"(?:final\s+)?answer(?:\s+is|\s+was|\s*[:=])", re.IGNORECASE)


def _last_boxed(text: str) -> str | None:
    starts = list(_BOXED.finditer(text))
    if not starts:
        return None
    begin, depth = starts[-1].end(), 1
    for position in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[begin:position]
    return text[begin:]


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
