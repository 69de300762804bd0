"""Your own problems: the record schema shared by the ``jsonl`` and ``hf`` tasks.

One problem per record (a JSONL line, or a row of a Hugging Face dataset):

=================  ========  ====================================================================
key                needed    meaning
=================  ========  ====================================================================
``question``       always    the problem text shown to the executor (non-empty string)
``domain``         no        ``math`` (default), ``code`` or ``qa``: which operators are allowed
                             and how answers are checked
``answer``         math, qa  the reference answer, a string or a number. math: compared as a
                             number when it is one (``0.75``, ``3/4``, ``\\frac{3}{4}``,
                             ``1,000``, ``$5``, ``12%``, ``2^{10}``), else as a normalised form
                             (``\\sqrt{2}``, ``(1, 2)``); qa: SQuAD exact match after
                             normalising case, punctuation, articles and whitespace (F1 as score)
``tests``          code      list of test strings (asserts, or code that raises on failure); a
                             single string is one test
``entry_point``    no        code: the function name the tests call (bound to ``candidate``)
``public_tests``   no        code: tests the Test operator may run while solving (default:
                             none, and Test only runs the solution; ``tests`` are never shown)
``id``             no        unique id (string or integer); default: the line/row index
``meta``           no        an object kept with the problem (not shown to anyone)
=================  ========  ====================================================================

Any other key is kept in ``meta`` too. A record that breaks the schema raises ``ValueError``
naming where it is (``data.jsonl: line 7: missing 'question'``) and, for a missing key, a
present key that looks like a typo of it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from flowgrpo.operators.tasks.base import Problem

__all__ = ["KEYS", "RECORD_DOMAINS", "problem_from_record"]

RECORD_DOMAINS = ("math", "code", "qa")
KEYS = ("question", "domain", "answer", "tests", "entry_point", "public_tests", "id", "meta")


def _missing(record: Mapping[str, Any], key: str, why: str = "") -> ValueError:
    typo = difflib.get_close_matches(key, [k for k in record if k not in KEYS], n=1, cutoff=0.6)
    hint = f" (found {typo[0]!r}: a typo?)" if typo else ""
    return ValueError(f"missing {key!r}{why}{hint}")


def _text(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{key!r} must be a string, got {type(value).__name__}")
    return str(value)


def _tests(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"{key!r} must be a list of strings (test code), got {value!r:.80}")
    return tuple(t for t in value if t.strip())


def _domain(record: Mapping[str, Any], default: str) -> str:
    domain = record.get("domain")
    domain = default if domain in (None, "") else domain
    if domain not in RECORD_DOMAINS:
        raise ValueError(f"'domain' is {domain!r}; use one of {', '.join(RECORD_DOMAINS)}")
    return domain


def _reference(record: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """The answer/tests fields of a record, checked for its domain."""
    if domain == "code":
        if "tests" not in record:
            raise _missing(record, "tests", " (a code problem is scored by its tests)")
        tests = _tests(record["tests"], "tests")
        if not tests:
            raise ValueError("'tests' is empty; a code problem needs at least one test")
        public = _tests(record.get("public_tests") or [], "public_tests")
        entry = record.get("entry_point")
        if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
            raise ValueError(f"'entry_point' must be a function name, got {entry!r}")
        answer = record.get("answer")
        answer = None if answer is None else _text(answer, "answer")
        return {"tests": tests, "public_tests": public, "entry_point": entry, "answer": answer}
    if "answer" not in record or record["answer"] is None:
        raise _missing(record, "answer", f" (a {domain} problem needs a reference answer)")
    answer = _text(record["answer"], "answer").strip()
    if not answer:
        raise ValueError("'answer' is empty")
    return {"answer": answer}


def problem_from_record(
    record: Any, where: str, index: int, prefix: str, default_domain: str = "math"
) -> Problem:
    """The :class:`Problem` of one record (see the module docstring for the schema).

    Args:
        record: the parsed record (a JSON object / dataset row).
        where: how errors name the record, e.g. ``"data.jsonl: line 7"``.
        index: the record's position, the id when it has none.
        prefix: put before the id (``"data/"``), so ids from different files differ.
        default_domain: the domain of records without ``domain``.
    """
    try:
        if not isinstance(record, Mapping):
            raise ValueError(f"expected an object with 'question', got {type(record).__name__}")
        if "question" not in record:
            raise _missing(record, "question")
        question = _text(record["question"], "question").strip()
        if not question:
            raise ValueError("'question' is empty")
        domain = _domain(record, default_domain)
        fields = _reference(record, domain)
        meta = record.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ValueError(f"'meta' must be an object, got {type(meta).__name__}")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    extra = {k: v for k, v in record.items() if k not in KEYS}
    ident = record.get("id")
    ident = index if ident in (None, "") else ident
    meta = {**extra, **meta, "location": where}
    return Problem(id=f"{prefix}{ident}", domain=domain, question=question, meta=meta, **fields)
