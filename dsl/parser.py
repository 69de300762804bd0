"""Parse workflow text into the AST of :mod:`dsl.ast`.

The grammar lives in ``workflow.lark`` and is loaded once, as an LALR(1) parser in strict mode
(collisions and conflicts are grammar errors). The AST is built inline while parsing, so no parse
tree is materialised. Syntax errors become :class:`~dsl.errors.DSLSyntaxError` with a message a
person understands, chosen with Lark's ``match_examples`` (the parser state of the error is
compared with the states reached by labelled malformed examples).
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from importlib.resources import files

from lark import Lark, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

from flowgrpo.dsl.ast import Cond, Loop, Op, Parallel, Seq, Workflow, steps_of
from flowgrpo.dsl.errors import DSLSyntaxError
from flowgrpo.dsl.operators import OPERATORS

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)
_EXAMPLE = "Custom -> Programmer -> Review ? Revise : done"


def _unquote(token: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), token[1:-1])


class _ToAST(Transformer):
    """Builds AST nodes from tokens as the LALR parser reduces (no tree in between). Each
    callback takes the rule's children as one list: lark calls it directly, without the
    per-reduction wrapper ``v_args(inline=True)`` adds (about 5% of an uncached validation)."""

    def op(self, children) -> Op:
        name = children[0]
        text = _unquote(children[1].value) if len(children) > 1 else None
        return Op(name.value, text, name.line, name.column)

    def seq(self, steps):
        flat = []
        for step in steps:  # A -> (B -> C) is A -> B -> C: the parentheses are redundant
            flat.extend(steps_of(step))
        if len(flat) == 1:
            return flat[0]
        return Seq(tuple(flat), flat[0].line, flat[0].column)

    def parallel(self, branches) -> Parallel:
        return Parallel(tuple(branches), branches[0].line, branches[0].column)

    def loop(self, children) -> Loop:
        body, count = children
        return Loop(body, int(count.value), count.line, count.column)

    def cond(self, children) -> Cond:
        check, if_fail, if_pass = children
        if_fail = None if hasattr(if_fail, "type") else if_fail  # a token: 'done'
        if_pass = None if hasattr(if_pass, "type") else if_pass
        return Cond(check, if_fail, if_pass, check.line, check.column)

    def start(self, children) -> Workflow:
        return Workflow(children[0])


@functools.cache
def _lark() -> Lark:
    """The reference parser: pure-Python Lark, used for error reports (it knows ``accepts``)."""
    grammar = files(__package__).joinpath("workflow.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", strict=True, transformer=_ToAST())


@functools.cache
def _fast_lark() -> Lark:
    """The same grammar compiled with lark-cython when installed (about 1.4x faster parses).

    Only successful parses are taken from it; any failure is re-parsed by :func:`_lark` so the
    error message is the same with or without the accelerator.
    """
    try:
        import lark_cython  # optional: the compiled parser, used only when installed
    except ImportError:
        return _lark()
    grammar = files(__package__).joinpath("workflow.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        strict=True,
        transformer=_ToAST(),
        _plugins=lark_cython.plugins,
    )


def parse(text: str) -> Workflow:
    """Parse a workflow.

    >>> from flowgrpo.dsl import canonical
    >>> canonical(parse("Custom -> (Review ? Revise : done)"))
    'Custom -> Review ? Revise : done'

    Raises:
        DSLSyntaxError: the text does not follow the grammar; ``.line``, ``.column`` and
            ``.hint`` say where and what to do. Operator *names* are not checked here:
            :func:`dsl.validate` reports unknown operators with the closest known name.
        TypeError: ``text`` is not a string.
    """
    result = _parse_or_error(text)
    if isinstance(result, DSLSyntaxError):
        # a fresh copy per call (through DSLSyntaxError.__reduce__): raising the cached one
        # would attach this caller's traceback to it, and through its frames the cache would
        # keep every caller's locals (a training step's rollout, the model) alive
        raise copy.copy(result)
    return result


@functools.lru_cache(maxsize=65536)
def _parse_or_error(text: str) -> Workflow | DSLSyntaxError:
    if not isinstance(text, str):
        raise TypeError(f"parse() takes a string, got {type(text).__name__}")
    if not text.strip():
        return _error(
            text, 1, 1, "empty workflow at {pos}", f"write at least one operator, e.g. {_EXAMPLE}"
        )
    try:
        return _fast_lark().parse(text)
    except Exception:
        pass
    try:
        return _lark().parse(text)
    except UnexpectedInput as exc:
        return _friendly_error(text, exc)


# --------------------------------------------------------------------------- friendly errors

_MESSAGES = {
    "dangling_arrow": (
        "expected an operator after '->' at {pos}",
        "add an operator after the arrow or remove it, e.g. " + _EXAMPLE,
    ),
    "missing_colon": (
        "'?' without ':' at {pos}: a conditional needs two branches",
        "write 'X ? A : B', using 'done' for an empty branch, e.g. Review ? Revise : done",
    ),
    "missing_branch": (
        "expected a branch of the conditional at {pos}",
        "each branch is an operator, a group in parentheses, or 'done': Review ? Revise : done",
    ),
    "loop_count": (
        "expected a loop count after '*' at {pos}",
        "write the number of repetitions, e.g. (Review -> Revise) * 2",
    ),
    "single_branch": (
        "a parallel block needs at least two branches at {pos}",
        "separate branches with ',', e.g. [Custom, Custom, Programmer] -> ScEnsemble",
    ),
    "unclosed_paren": ("unbalanced parentheses: '(' is never closed at {pos}", "add ')'"),
    "unclosed_bracket": ("unbalanced brackets: '[' is never closed at {pos}", "add ']'"),
    "missing_arrow": (
        "expected '->' between steps at {pos}",
        "join steps with '->', e.g. Custom -> Programmer",
    ),
    "empty_group": (
        "empty group at {pos}",
        "put at least one operator inside the parentheses or brackets",
    ),
    "bad_instruction": (
        "bad instruction at {pos}",
        'an instruction is one quoted string in parentheses, e.g. Custom("think step by step")',
    ),
    "nothing_before": (
        "expected an operator at {pos}",
        f"a workflow starts with an operator, e.g. {_EXAMPLE}",
    ),
    "dangling_comma": (
        "expected a branch after ',' at {pos}",
        "remove the trailing ',' or add a branch, e.g. [Custom, Programmer]",
    ),
    "misplaced_done": (
        "'done' is only allowed as a branch of a conditional at {pos}",
        "write it as X ? A : done, or remove it",
    ),
    "unexpected_close": (
        "unbalanced brackets or parentheses: nothing to close at {pos}",
        "remove it or add the matching opening bracket",
    ),
}

_TERMINALS = {
    "COLON": "':'",
    "_ARROW": "'->'",
    "RPAR": "')'",
    "RSQB": "']'",
    "COMMA": "','",
    "$END": "end of input",
    "OPERATOR": "an operator",
    "INT": "a number",
    "STRING": "a string",
    "LPAR": "'('",
    "LSQB": "'['",
    "DONE": "'done'",
    "STAR": "'*'",
    "QMARK": "'?'",
}

_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _looks_like_prose(text: str) -> bool:
    words = _WORD_RE.findall(text)
    lowercase = [w for w in words if w.islower() and w != "done"]
    return len(lowercase) >= 3 or text.lstrip().startswith(("#", "**", "Step", "To ", "The "))


def _lowercase_operators(text: str) -> str | None:
    """``text`` with its operator names capitalised, when every word in it is an operator
    name in the wrong case (or ``done``): a workflow, not prose."""
    words = _WORD_RE.findall(text)
    names = {name.lower(): name for name in OPERATORS}
    if not words or any(w.lower() not in names and w != "done" for w in words):
        return None
    fixed = _WORD_RE.sub(lambda m: names.get(m.group(0).lower(), m.group(0)), text)
    return fixed if fixed != text else None


def _prose_error(text: str) -> DSLSyntaxError:
    """Prose is reported at its first character: the whole text is the problem; a workflow
    written with lower-case operator names gets the names to write instead."""
    fixed = _lowercase_operators(text)
    if fixed is not None:
        first = next(m for m in _WORD_RE.finditer(text) if m.group(0) != fixed[m.start() : m.end()])
        line = text.count("\n", 0, first.start()) + 1
        column = first.start() - (text.rfind("\n", 0, first.start()) + 1) + 1
        return _error(
            text, line, column, "operator names start with a capital letter (at {pos})",
            f"write {fixed.strip()}",
        )  # fmt: skip
    stripped = text.lstrip()
    before = text[: len(text) - len(stripped)]
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return _error(
        text,
        line,
        column,
        "this looks like prose, not a workflow (at {pos})",
        f"answer with only the workflow, e.g. {_EXAMPLE}",
    )


def _closest_operator(word: str) -> str | None:
    lower_names = {name.lower(): name for name in OPERATORS}  # live: declared operators too
    if word.lower() in lower_names:
        return lower_names[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(lower_names), n=1, cutoff=0.6)
    return lower_names[match[0]] if match else None


def _error(text: str, line: int, column: int, message: str, hint: str) -> DSLSyntaxError:
    """``message`` holds ``{pos}`` where the position goes (" at {pos}" is cut for ``reason``).

    Plain replacement, not ``str.format``: messages quote user text, which may hold braces.
    """
    reason = message.replace(" (at {pos})", "").replace(" at {pos}", "").replace("{pos}", "")
    full = message.replace("{pos}", f"{line}:{column}")
    return DSLSyntaxError(full, line, column, hint, text, reason=reason)


def _friendly_error(text: str, exc: UnexpectedInput) -> DSLSyntaxError:
    line, column = max(exc.line, 1), max(exc.column, 1)
    at_end = (
        isinstance(exc, UnexpectedEOF) or getattr(getattr(exc, "token", None), "type", "") == "$END"
    )
    if at_end:  # point just past the last character
        last = text.rstrip().splitlines()[-1] if text.strip() else ""
        line, column = max(len(text.rstrip().splitlines()), 1), len(last) + 1
    if isinstance(exc, UnexpectedCharacters):
        return _character_error(text, exc, line, column)
    if _looks_like_prose(text):
        return _prose_error(text)
    label = _classify(text, exc)
    if label is not None:
        message, hint = _MESSAGES[label]
        return _error(text, line, column, message, hint)
    token = getattr(exc, "token", None)
    found = repr(token.value) if token is not None and token.value else "end of input"
    expected = sorted(_TERMINALS.get(t, t) for t in _expected(exc))
    hint = "expected " + " or ".join(expected) if expected else "see the grammar in DESIGN.md"
    return _error(text, line, column, f"unexpected {found} at {{pos}}", hint)


def _expected(exc: UnexpectedInput) -> set[str]:
    """Terminals the parser would accept here (``accepts`` is exact; ``expected`` a superset)."""
    return set(getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ())


def _classify(text: str, exc: UnexpectedInput) -> str | None:
    """Name the common mistake behind a parse error from what the parser expected there.

    Like Lark's ``match_examples`` but keyed on the expected terminals and the preceding
    symbol, which does not depend on how deep in the workflow the mistake is.
    """
    expected = _expected(exc)
    token = getattr(exc, "token", None)
    got = "$END" if isinstance(exc, UnexpectedEOF) else getattr(token, "type", "$END")
    start = getattr(token, "start_pos", None)
    before = text[: start if got != "$END" and start is not None else len(text)].rstrip()
    if got == "DONE":
        return "misplaced_done"
    if expected == {"COLON"}:
        return "missing_colon"
    if expected == {"INT"}:
        return "loop_count"
    if "STRING" in expected or (before.endswith("(") and got == "OPERATOR"):
        return "bad_instruction"
    if "OPERATOR" in expected:
        return _classify_missing_unit(before, got)
    if got == "RSQB" and "COMMA" in expected:
        return "single_branch"
    if got in ("OPERATOR", "LPAR", "LSQB") and "_ARROW" in expected:
        return "missing_arrow"
    if got in ("$END", "RPAR", "RSQB"):
        return _classify_unbalanced(before, got)
    return None


def _classify_unbalanced(before: str, got: str) -> str | None:
    open_paren = before.count("(") > before.count(")")
    open_bracket = before.count("[") > before.count("]")
    if open_paren and got != "RPAR":
        return "unclosed_paren"
    if open_bracket and got != "RSQB":
        return "unclosed_bracket"
    return "unexpected_close" if got != "$END" else None


def _classify_missing_unit(before: str, got: str) -> str:
    if before.endswith("->"):
        return "dangling_arrow"
    if before.endswith(("?", ":")):
        return "missing_branch"
    if before.endswith(("(", "[")) and got in ("RPAR", "RSQB"):
        return "empty_group"
    if not before:
        return "nothing_before"
    return "dangling_comma" if before.endswith(",") else "nothing_before"


def _character_error(text: str, exc: UnexpectedCharacters, line: int, col: int) -> DSLSyntaxError:
    rest = text[exc.pos_in_stream :]
    word_match = _WORD_RE.match(rest)
    if rest.startswith(("→", "=>", "—>", "-->")) or (rest.startswith(">") and "->" not in rest):
        return _error(text, line, col, "unknown arrow at {pos}", "steps are joined with '->'")
    if _looks_like_prose(text):
        return _prose_error(text)
    if word_match:
        word = word_match.group(0)
        if word == "done":
            return _error(
                text,
                line,
                col,
                "'done' is only allowed as a branch of a conditional at {pos}",
                "write it as X ? A : done, or remove it",
            )
        guess = _closest_operator(word)
        hint = f"did you mean {guess!r}?" if guess else "operators: " + ", ".join(OPERATORS)
        return _error(
            text,
            line,
            col,
            f"{word!r} is not an operator (names are capitalised) at {{pos}}",
            hint,
        )
    char = rest[:1]
    return _error(
        text,
        line,
        col,
        f"unexpected character {char!r} at {{pos}}",
        "a workflow uses operator names and -> ? : * ( ) [ ] , only",
    )
