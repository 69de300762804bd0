"""The shortest way to finish a partial workflow: the sampler's end game (docs/CONSTRAINED.md).

A sample cut by ``max_new_tokens`` does not parse, and a workflow written past the call budget
does not validate. The constrained sampler (``trainer/loop/constrain.py``) avoids both by
asking, for the text written so far, how it can be finished at the least cost:
:func:`shortest_closing` scans the prefix (written in the constraint grammar's canonical
spacing, :mod:`dsl.constrained`) into a stack of open constructs and closes each one with the
shortest legal text: ``")`` for an instruction, ``1`` for a loop count, the domain's shortest
generator for a missing operand (``done`` in a branch), ``, G]`` for a parallel block of one
branch, ``]`` / ``)`` for the others, `` : done`` for an open conditional. The result is
scanned back (optionally checked with :func:`~dsl.validate.validate`), and carries the
worst-case call count of the finished workflow: the least any finish of the prefix can cost
(a closing adds only the operands every finish needs, loop counts of 1 and ``done`` branches).

Pure text, no matcher: the caller maps the closing to tokens and checks them against its own
matcher.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from flowgrpo.dsl.operators import GENERATOR, OperatorTable
from flowgrpo.dsl.operators import default_table as _default_table
from flowgrpo.dsl.validate import (
    DEFAULT_STATIC_LIMITS,
    StaticLimits,
    heavy_operators,
    validate,
)

_AFTER = (" -> ", " * ", " ? ", " : ", ", ", "]", ")", "(")  # what may follow a unit
_AFTER_BY_FIRST = {c: tuple(a for a in _AFTER if a[0] == c) for c in {a[0] for a in _AFTER}}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"\d+")
_BRANCH = ("then", "else")
_NEEDS = {" : ": "then", ", ": "par", "]": "par", ")": "group"}  # the construct a separator ends
_STATE_AFTER = {" * ": "count", "(": "open", "]": "after", ")": "after"}  # else: operand


@dataclass(frozen=True)
class Closing:
    """How to finish a prefix: ``text`` to append (possibly empty) and ``calls``, the worst-case
    executor calls of the finished workflow (``shape.count_calls``, each operator counted with
    the limits' ``op_calls``)."""

    text: str
    calls: int


@dataclass
class _Frame:
    """An open construct and the worst-case calls counted in it so far (``count_calls``'s
    rules: a chain and a parallel block add, a loop multiplies, a conditional is its check
    plus its longer branch)."""

    kind: str  # top | group | par | then | else
    branches: int = 1
    total: int = 0  # calls of the current chain (of the current branch, in a par)
    last: int = 0  # calls of the chain's last unit (what a loop count multiplies)
    done: int = 0  # par: calls of the finished branches; else: calls of the then branch


def _unit(frames: list[_Frame], calls: int) -> None:
    frames[-1].total += calls
    frames[-1].last = calls


def _pop(frames: list[_Frame]) -> None:
    """Close the top construct and count it as a unit of the one below."""
    frame = frames.pop()
    if frame.kind == "else":
        _unit(frames, max(frame.done, frame.total))  # the check is already counted
    else:
        _unit(frames, frame.done + frame.total)


def _after_unit(text: str, i: int, frames: list[_Frame]) -> tuple[int, str] | None:
    """Consume what follows a complete unit at ``i``: (new position, new state), or None."""
    lit = next((a for a in _AFTER_BY_FIRST.get(text[i], ()) if text.startswith(a, i)), None)
    if lit is None:
        return None
    if lit in (" -> ", ", ", "]", ")"):
        while frames[-1].kind == "else":  # a conditional ends with its else branch
            _pop(frames)
    need = _NEEDS.get(lit)
    if need is not None and frames[-1].kind != need:
        return None  # not this construct's separator: the text is not a prefix
    state = _STATE_AFTER.get(lit, "operand")
    top = frames[-1]
    if lit == " ? ":
        frames.append(_Frame("then"))
    elif lit == " : ":
        top.kind, top.done, top.total = "else", top.total, 0
    elif lit == ", ":
        top.branches, top.done, top.total = top.branches + 1, top.done + top.total, 0
    elif lit in ("]", ")"):
        _pop(frames)
    return i + len(lit), state


_Scan = tuple[list[_Frame], str, int]
_Weigh = dict[str, int]  # an operator's calls where more than one (validate.heavy_operators)


def _scan(
    text: str, names: frozenset[str], start: _Scan | None = None, weigh: _Weigh | None = None
) -> _Scan:
    """(open constructs, state, where the scan stopped) for a canonical prefix. State: operand
    (a unit is due), after (a unit ended), count (after `` * ``), open (after ``Name(``),
    string (inside an instruction), shut (after its closing quote). ``start``: a scan of a
    prefix of ``text`` to go on from (its frames are copied, not changed), so the closings of
    one prefix do not rescan it. ``weigh``: the calls each operator counts (``heavy_operators``;
    None: one each)."""
    calls_of = weigh.get if weigh is not None else (lambda _name, one: one)
    if start is None:
        frames, state, i = [_Frame("top")], "operand", 0
    else:
        frames = [_Frame(f.kind, f.branches, f.total, f.last, f.done) for f in start[0]]
        state, i = start[1], start[2]
    n = len(text)
    while i < n:
        if state == "string":
            j = text.find('"', i)
            i, state = (n, state) if j < 0 else (j + 1, "shut")
        elif state in ("open", "shut", "count"):
            ok = {"open": text[i] == '"', "shut": text[i] == ")", "count": text[i].isdigit()}
            if state == "count" and ok[state]:
                digits = _DIGITS.match(text, i).group()
                top = frames[-1]  # the loop repeats its unit: count - 1 more times
                top.total, top.last = top.total + top.last * (int(digits) - 1), 0
                i, state = i + len(digits), "after"
                continue
            if not ok[state]:
                break
            i, state = i + 1, {"open": "string", "shut": "after"}[state]
        elif state == "operand":
            if text[i] in "([":
                frames.append(_Frame("group" if text[i] == "(" else "par"))
                i += 1
                continue
            word = _NAME.match(text, i)
            name = None if word is None else word.group()
            if name is None or (name != "done" and name not in names):
                break
            _unit(frames, 0 if name == "done" else calls_of(name, 1))
            i, state = word.end(), "after"
        else:
            step = _after_unit(text, i, frames)
            if step is None:
                break
            i, state = step
    return frames, state, i


@dataclass(frozen=True)
class PrefixScan:
    """A scan of ``text`` that reached its end (:func:`scan_prefix`): a longer prefix that goes
    on from it between two lexemes is scanned from here, not from its start."""

    text: str
    names: frozenset[str]  # the domain's operators it was scanned with
    weights: _Weigh  # and the calls each one counts (heavy_operators)
    frames: tuple[_Frame, ...]  # copied by a scan that goes on from it, never changed
    state: str


def scan_prefix(prefix: str, domain: str = "math", operators: OperatorTable | None = None,
                limits: StaticLimits | None = None) -> PrefixScan | None:  # fmt: skip
    """The scan of ``prefix`` for :func:`shortest_closing`'s ``start`` (None when the scan stops
    before the end: ``prefix`` ends inside a separator or is not a prefix of a workflow);
    ``limits`` as :func:`shortest_closing` is given them."""
    table = operators if operators is not None else _default_table()
    names = table.for_domain(domain)
    weigh = heavy_operators(table, limits or DEFAULT_STATIC_LIMITS)
    frames, state, i = _scan(prefix, names, weigh=weigh)
    if i < len(prefix):
        return None
    return PrefixScan(prefix, names, weigh, tuple(frames), state)


def _resume_from(
    start: PrefixScan | None, text: str, names: frozenset[str], weigh: _Weigh
) -> _Scan | None:
    """``start`` as a scan to go on from when ``text`` is ``start.text`` and more, cut between
    two lexemes (not inside a name or a number: "Custom" of "CustomCodeGenerate"; a scan ends
    only after a whole separator) and scanned with the same operators and weights; else None."""
    if start is None or start.names != names or not text.startswith(start.text):
        return None
    if start.weights != weigh:
        return None
    n = len(start.text)
    between = n == 0 or n == len(text) or not (text[n - 1] + text[n]).replace("_", "a").isalnum()
    return (list(start.frames), start.state, n) if between else None


def _close(frames: list[_Frame], state: str, generator: str) -> str:
    """The text that closes every open construct from ``state`` (no partial lexeme)."""
    head = {"string": '")', "open": '"")', "shut": ")", "count": "1"}.get(state, "")
    if state == "operand":
        head = "done" if frames[-1].kind in _BRANCH else generator
    tail = []
    for frame in reversed(frames[1:]):
        if frame.kind == "then":
            tail.append(" : done")
        elif frame.kind == "group":
            tail.append(")")
        elif frame.kind == "par":
            tail.append(("" if frame.branches >= 2 else f", {generator}") + "]")
    return head + "".join(tail)


def _completions(rest: str, state: str, names: frozenset[str]) -> list[str]:
    """The ways to complete a cut lexeme ``rest`` (a proper prefix of a name or a literal)."""
    words = names | {"done"} if state == "operand" else set(_AFTER)
    return sorted(w[len(rest) :] for w in words if w.startswith(rest) and w != rest)


def _generator(table: OperatorTable, names, measure, weigh: _Weigh) -> str | None:
    """The generator a closing writes where an operand is due: the first of the shortest
    (by ``measure``), of the fewest calls among those; None when the domain has none."""
    generators = (n for n in table.names_with_role(GENERATOR) if n in names)
    return min(generators, key=lambda n: (measure(n), weigh.get(n, 1)), default=None)


def shortest_closing(
    prefix: str,
    domain: str = "math",
    operators: OperatorTable | None = None,
    limits: StaticLimits | None = None,
    measure: Callable[[str], int] = len,
    check: bool = False,
    start: PrefixScan | None = None,
) -> Closing | None:
    """The shortest text (by ``measure``, e.g. a token count) that finishes ``prefix``, with the
    finished workflow's worst-case calls; None when the prefix cannot be scanned. ``check``:
    also run :func:`~dsl.validate.validate` on the result (None when it fails, e.g. over the
    call budget); without it the count comes from the scan alone (about 10x faster), and only a
    prefix cut inside an ambiguous separator is validated. ``prefix`` is assumed to be a prefix
    of a valid workflow in canonical spacing (what the constraint grammar lets through).
    ``start``: a :func:`scan_prefix` of a shorter prefix (the text before the last token); used
    only where ``prefix`` goes on from it between lexemes, so the result is the same without it.

    >>> shortest_closing("[Programmer, Custom").text
    ']'
    >>> shortest_closing("Custom -> Review ? (Revise", check=True)
    Closing(text=') : done', calls=3)
    """
    table = operators if operators is not None else _default_table()
    names = table.for_domain(domain)
    limits = limits or DEFAULT_STATIC_LIMITS
    weigh = heavy_operators(table, limits)
    generator = _generator(table, names, measure, weigh)
    if generator is None:
        return None
    scanned = _scan(prefix, names, _resume_from(start, prefix, names, weigh), weigh)
    i = scanned[2]
    cuts = [""] if i == len(prefix) else _completions(prefix[i:], scanned[1], names)
    candidates = []  # (closing text, the scan of prefix + its cut lexeme to go on from)
    for cut in cuts:
        # a scan stops only before a lexeme it cannot take, so going on from it is exact
        at = scanned if not cut else _scan(prefix + cut, names, scanned, weigh)
        if at[2] == len(prefix) + len(cut):
            candidates.append((cut + _close(at[0], at[1], generator), at))
    # a cut lexeme with several completions (" " opens " -> ", " * ", " ? " or " : ") may
    # complete into a separator the construct does not take (" * " after a loop): validate
    check = check or len(candidates) > 1
    for text, at in sorted(candidates, key=lambda c: measure(c[0])):
        frames, state, j = _scan(prefix + text, names, at, weigh)
        while state == "after" and frames[-1].kind == "else":  # a conditional at the end
            _pop(frames)
        if j < len(prefix + text) or len(frames) > 1 or state != "after":
            continue
        if (
            check
            and not validate(
                prefix + text,
                domain=domain,
                limits=limits,
                operators=table,
            ).ok
        ):
            continue
        return Closing(text, frames[0].total)
    return None
