"""Size limits that keep the code readable in one sitting: no file over 500 lines, no function or
method over 60 lines (``end_lineno - lineno + 1``, decorators and docstring included).

One case per package directory, so a package over the limit fails on its own without hiding the
others; ``operators/sandbox`` is its own case, apart from the rest of ``operators``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
CASES = (
    "dsl", "operators", "operators/sandbox", "rewards", "trainer", "flowgrpo", "scripts",
    "research",
)  # fmt: skip


def oversized(path: Path, max_file: int = MAX_FILE_LINES, max_function: int = MAX_FUNCTION_LINES):
    """``"path: N lines"`` for the file and ``"path:line name: N lines"`` for each function or
    method (nested ones too) over the limits."""
    text = path.read_text(encoding="utf-8")
    found = []
    n_lines = len(text.splitlines())
    if n_lines > max_file:
        found.append(f"{path}: {n_lines} lines (max {max_file})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > max_function:
                found.append(
                    f"{path}:{node.lineno} {node.name}: {length} lines (max {max_function})"
                )
    return sorted(found)


def _files(case: str) -> list[Path]:
    """The .py files of ``case``, without those of a more specific case inside it."""
    inner = [ROOT / c for c in CASES if c.startswith(case + "/")]
    return [
        path
        for path in sorted((ROOT / case).rglob("*.py"))
        if not any(path.is_relative_to(other) for other in inner)
    ]


def test_oversized_reports_long_files_and_functions(tmp_path):
    path = tmp_path / "m.py"
    body = "\n".join(f"        x{i} = {i}" for i in range(4))
    path.write_text(f"def short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert oversized(path, max_file=100, max_function=5) == []
    assert oversized(path, max_file=6, max_function=4) == [
        f"{path}: 10 lines (max 6)",
        f"{path}:6 long: 5 lines (max 4)",
    ]


def test_cases_cover_every_file_once():
    files = [path for case in CASES for path in _files(case)]
    assert len(files) == len(set(files))
    assert ROOT / "operators" / "interpreter.py" in files


@pytest.mark.parametrize("case", CASES)
def test_no_oversized_files_or_functions(case):
    found = [line for path in _files(case) for line in oversized(path)]
    assert not found, "over the size limits (split them):\n" + "\n".join(found)
