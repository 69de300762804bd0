"""MBPP (sanitized) Python problems from a JSONL file.

Records have ``prompt``, ``code`` (reference solution), ``entry_point`` and the tests as
``test_list`` (assert strings) and/or ``test`` (a ``def check():`` block of the same asserts);
``test_imports`` (e.g. ``["import math"]``) is optional. The copies live in
``../shared/data/mbpp`` beside the project; ``mbpp_public_test.jsonl`` there names one public
test per ``entry_point``, written against ``candidate`` instead of the function name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import textwrap
from pathlib import Path

from flowgrpo.operators.tasks._io import check_limit, iter_jsonl, resolve_data_file
from flowgrpo.operators.tasks.base import Problem

log = logging.getLogger(__name__)

PUBLIC_TESTS_FILE = "mbpp_public_test.jsonl"


def signature_line(code: str, entry_point: str) -> str | None:
    """The ``def`` line(s) of ``entry_point`` in ``code`` up to the colon, or None if absent.

    Handles a signature spread over several lines and a return annotation; not nested or
    decorated definitions' decorators (only the def itself is returned).
    """
    pattern = re.compile(
        rf"^[ \t]*def[ \t]+{re.escape(entry_point)}[ \t]*\((?:[^()]|\([^()]*\))*\)"
        r"[ \t]*(?:->[^:\n]+)?:",
        re.MULTILINE,
    )
    match = pattern.search(code)
    return textwrap.dedent(match.group(0)).strip() if match else None


def tests_from_check_block(block: str) -> list[str]:
    """The assert statements of a ``def check(): ...`` block, one string each, dedented.

    Only single-line asserts are recovered; other statements in the block are ignored.
    """
    return [line.strip() for line in block.splitlines() if line.strip().startswith("assert ")]


def load_public_tests(folder: Path) -> dict[str, list[str]]:
    """``entry_point -> [public test, ...]`` from ``mbpp_public_test.jsonl`` in ``folder``.

    ``candidate`` in each test is replaced by the entry point's name. Empty when the file is
    absent. Several problems may share an entry point; their tests are all listed.
    """
    file = folder / PUBLIC_TESTS_FILE
    if not file.is_file():
        return {}
    table: dict[str, list[str]] = {}
    for _, record in iter_jsonl(file, "MBPP", ("entry_point", "test")):
        name = str(record["entry_point"])
        tests = record["test"] if isinstance(record["test"], list) else [record["test"]]
        for test in tests:
            table.setdefault(name, []).append(re.sub(r"\bcandidate\b", name, str(test)).strip())
    return table


def _pick_public(own: list[str], published: list[str]) -> str:
    """The first published test that is one of the problem's own tests, else its first test.

    The published file has a few broken entries (``set(`` replaced by ``candidate(``) and
    entry points shared by several problems; requiring membership in the own tests avoids both.
    """
    stripped = {test.strip() for test in own}
    for test in published:
        if test in stripped:
            return test
    return own[0]


def _record_tests(record: dict, file: Path, index: int) -> list[str]:
    tests = record.get("test_list") or tests_from_check_block(str(record.get("test") or ""))
    if not tests:
        raise ValueError(
            f"{file}: line {index + 1} has no tests: give 'test_list' (assert strings) or "
            "'test' (a def check(): block of asserts)."
        )
    return [str(test).strip() for test in tests]


def _make_problem(record: dict, file: Path, index: int, public: dict[str, list[str]]) -> Problem:
    entry_point = str(record["entry_point"])
    code = str(record["code"])
    prompt = str(record["prompt"]).rstrip()
    signature = signature_line(code, entry_point)
    if signature is None:
        raise ValueError(
            f"{file}: line {index + 1}: the reference code has no 'def {entry_point}(...)'; "
            "entry_point must name a function defined in 'code'."
        )
    question = prompt if f"def {entry_point}" in prompt else f"{prompt}\n\n{signature}"
    raw_tests = _record_tests(record, file, index)
    imports = "; ".join(str(line).strip() for line in record.get("test_imports") or [])
    prefix = f"{imports}; " if imports else ""  # one line, so a test stays a single statement
    public_test = _pick_public(raw_tests, public.get(entry_point, []))
    return Problem(
        id=f"mbpp/{file.stem}/{index}",
        domain="code",
        question=question,
        answer=code,
        tests=tuple(prefix + test for test in raw_tests),
        public_tests=(prefix + public_test,),
        entry_point=entry_point,
        meta={
            "task_id": record.get("task_id"),
            "signature": signature,
            "test_imports": list(record.get("test_imports") or []),
            "line": index + 1,
            "source": str(file),
        },
    )


def load_mbpp(path: str | os.PathLike, limit: int | None = None) -> list[Problem]:
    """Load MBPP problems from a JSONL file.

    Args:
        path: the JSONL file; a bare name (``mbpp_test``) is looked up in the shared data folder.
        limit: keep at most this many problems (file order); None for all.

    Returns:
        Problems with domain ``code``, id ``mbpp/<file stem>/<line index>`` (0-based physical
        line); question = the prompt, plus the function's ``def`` line taken from the reference
        code when the prompt does not already show it; tests = the asserts of ``test_list``
        (else parsed from ``test``), each prefixed with the record's ``test_imports`` on the same
        line (``import math; assert ...``);
        public_tests = one of those tests: the one ``mbpp_public_test.jsonl`` beside the file
        names for this entry point when present and valid, else the first; answer = the
        reference code; entry_point.

    Raises:
        FileNotFoundError: the file is missing. ValueError: a bad JSON line, a missing key, no
        tests, or reference code that does not define ``entry_point`` (with the line number).
    """
    check_limit(limit)
    file = Path(resolve_data_file(path, "mbpp"))
    problems: list[Problem] = []
    if limit == 0:
        return problems
    try:
        public = load_public_tests(file.parent) if file.is_file() else {}
    except (ValueError, json.JSONDecodeError) as exc:
        log.warning("ignoring %s beside %s: %s", PUBLIC_TESTS_FILE, file, exc)
        public = {}
    for index, record in iter_jsonl(file, "MBPP", ("prompt", "code", "entry_point")):
        problems.append(_make_problem(record, file, index, public))
        if limit is not None and len(problems) >= limit:
            break
    log.debug("loaded %d MBPP problems from %s", len(problems), file)
    return problems
