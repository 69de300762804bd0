"""Find the workflow in raw model output. Nothing is repaired: prose is a fallback.

Places looked at, in order of preference: ``<workflow>...</workflow>`` tags, fenced code blocks,
lines after a ``Workflow:`` or ``DSL:`` prefix, and bare lines (including inline ``code``).
A candidate that parses wins over one that does not; among equals, the earlier place wins. A
candidate in an explicit container (tags, fence, prefix) that does not parse is still returned
(the model tried to write a workflow and got the syntax wrong, which scores above prose). A bare
line is only a candidate if it parses or clearly looks like DSL (operator names and DSL symbols,
no sentence).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from flowgrpo.dsl.errors import DSLSyntaxError
from flowgrpo.dsl.operators import OperatorTable, default_table
from flowgrpo.dsl.parser import parse

_TAG_RE = re.compile(r"<workflow>(.*?)(?:</workflow>|$)", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[^\n`]*\n?(.*?)(?:```|$)", re.DOTALL)
_PREFIX_RE = re.compile(
    r"^[\s>*_#-]*(?:final\s+)?(?:workflow|dsl)\s*[*_]*\s*[:=]\s*[*_]*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_INLINE_CODE_RE = re.compile(r"`([^`\n]+)`")
_DSL_ONLY_RE = re.compile(r"""^[\sA-Za-z0-9_\->?:*()\[\],"'.]+$""")
_SOURCES = ("tag", "fence", "prefix", "line")


@dataclass(frozen=True)
class Extraction:
    """Where the workflow was found in a model output.

    Attributes:
        dsl: the workflow text, or None when the output holds none.
        fallback: True when the output holds no workflow (the model answered with prose).
        source: tag, fence, prefix or line; None on a fallback.
        parses: whether ``dsl`` parses.
        exact: the output is exactly the workflow, nothing around it (for a format reward).
    """

    dsl: str | None
    fallback: bool
    source: str | None = None
    parses: bool = False
    exact: bool = False


FALLBACK = Extraction(dsl=None, fallback=True)


@functools.lru_cache(maxsize=64)
def _operator_re(table: OperatorTable) -> re.Pattern:
    """Any operator name of ``table`` as a whole word."""
    return re.compile(r"\b(" + "|".join(map(re.escape, table)) + r")\b")


def extract(model_output: str, operators: OperatorTable | None = None) -> Extraction:
    """Find the workflow in ``model_output``.

    A bare line counts only when it names an operator of ``operators`` (default: the
    process-wide table, :func:`dsl.operators.default_table`).

    >>> extract("Sure!\\n```\\nCustom -> Review ? Revise : done\\n```").dsl
    'Custom -> Review ? Revise : done'
    >>> extract("### Step 1: Analyze the problem").fallback
    True
    """
    if not isinstance(model_output, str):
        raise TypeError(f"extract() takes a string, got {type(model_output).__name__}")
    table = default_table() if operators is None else operators
    return _extract_cached(model_output, table)


@functools.lru_cache(maxsize=65536)
def _extract_cached(output: str, table: OperatorTable) -> Extraction:
    best: Extraction | None = None
    names = _operator_re(table)
    for source, text in _candidates(output):
        if source == "line" and not names.search(text):
            continue  # a bare "Sure" or "Answer" parses, but names no operator: not a workflow
        if _parses(text):
            return Extraction(text, False, source, True, exact=text == output.strip())
        if best is None and (source != "line" or _looks_like_dsl(text, names)):
            best = Extraction(text, False, source, False, exact=text == output.strip())
    return best or FALLBACK


def _candidates(output: str):
    """(source, text) pairs in order of preference; each text stripped and non-empty."""
    for source, texts in (
        ("tag", _TAG_RE.findall(output)),
        ("fence", _fence_texts(output)),
        ("prefix", (_strip_code(m) for m in _PREFIX_RE.findall(output))),
        ("line", _line_texts(output)),
    ):
        for text in texts:
            text = text.strip()
            if text:
                yield source, text


def _fence_texts(output: str):
    for block in _FENCE_RE.findall(output):
        yield block
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if len(lines) > 1:
            yield from lines


def _line_texts(output: str):
    for line in output.splitlines():
        yield from _INLINE_CODE_RE.findall(line)
        yield _strip_code(line)


def _strip_code(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "`":
        return text.strip("`")
    return text


def _parses(text: str) -> bool:
    try:
        parse(text)
    except DSLSyntaxError:
        return False
    return True


def _looks_like_dsl(text: str, names: re.Pattern) -> bool:
    """A line that tries to be a workflow: starts with an operator, uses only DSL symbols."""
    first = text.lstrip("[( ")
    return bool(
        names.match(first)
        and _DSL_ONLY_RE.match(text)
        and ("->" in text or "?" in text or "[" in text or len(text.split()) == 1)
    )
