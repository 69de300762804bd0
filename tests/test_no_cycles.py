"""Import structure: no import cycles among the modules of dsl/, operators/, rewards/ and
trainer/; in dsl/, operators/ and rewards/, a function-local import only for a heavy or optional
dependency, and saying so.

The check reads the source (it imports nothing): every ``import flowgrpo.x`` and
``from flowgrpo.x import y`` anywhere in a module (module level, inside functions, and under
``if TYPE_CHECKING:``) is an edge from that module to ``flowgrpo.x`` -- or only to
``flowgrpo.x.y`` when ``y`` is itself a module (importing a submodule of one's own package is
no cycle: the package is already being imported). A function-local import still ties two modules
together (a reader of one has to read the other), so it counts. A cycle fails the test and is
printed as ``a -> b -> a``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dsl", "operators", "rewards", "trainer")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["flowgrpo", *parts])


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _edges(path: Path, known: set[str]) -> set[str]:
    """The flowgrpo modules among ``known`` that the file at ``path`` imports."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                targets.add(submodule if submodule in known else node.module)
    return {t for t in targets if t in known}


def import_graph() -> dict[str, set[str]]:
    """Module name -> the modules it imports (within dsl/operators/rewards/trainer)."""
    modules = _modules()
    known = set(modules)
    return {name: _edges(path, known) - {name} for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected component of more than one module (Tarjan's).

    Fixing the printed cycle may leave another one in the same component; the test then prints
    that one on the next run.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_edges_cover_function_level_imports(tmp_path):
    source = (
        "def f():\n    from flowgrpo.dsl import ast, parse\n    import flowgrpo.rewards\n"
        "from flowgrpo.operators import state\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    known = {"flowgrpo.dsl", "flowgrpo.dsl.ast", "flowgrpo.rewards", "flowgrpo.operators.state"}
    assert _edges(path, known | {"flowgrpo.operators", "flowgrpo.trainer"}) == known


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    """No cycle runs through a module of ``package`` (each cycle reported with its path)."""
    prefix = f"flowgrpo.{package}"
    cycles = [
        c
        for c in find_cycles(import_graph())
        if any(m == prefix or m.startswith(prefix + ".") for m in c)
    ]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def folder_graph() -> dict[str, set[str]]:
    """Folder -> the other folders its modules import (``operators/simulation``, ``operators``
    for the package's own top-level modules, ...)."""
    modules = _modules()
    folder = {name: path.parent.relative_to(ROOT).as_posix() for name, path in modules.items()}
    graph: dict[str, set[str]] = {f: set() for f in folder.values()}
    for name, targets in import_graph().items():
        graph[folder[name]] |= {folder[t] for t in targets} - {folder[name]}
    return graph


def test_no_folder_level_import_cycles():
    """No two folders import each other, even through different modules (issue 21: the
    simulation imported a backend that imported the simulation)."""
    cycles = find_cycles(folder_graph())
    assert not cycles, "folder-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_folder_graph_sees_a_loop_through_different_modules(tmp_path, monkeypatch):
    for rel, source in {
        "operators/a/x.py": "from flowgrpo.operators.b import y\n",
        "operators/b/y.py": "",
        "operators/b/z.py": "from flowgrpo.operators.a import w\n",
        "operators/a/w.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert find_cycles(folder_graph()) == [["operators/a", "operators/b", "operators/a"]]


#: Where function-local imports must say why; operators/sandbox/ is its own case (its owner's).
LIGHT_CASES = ("dsl", "operators", "operators/sandbox", "rewards")
# "# child": code of the sandbox's child interpreter (operators/sandbox/_child.py and the
# files it loads), which imports as late as possible: every import is paid on every run.
REASONS = ("# heavy", "# optional", "# child")


def local_imports_without_reason(path: Path) -> list[str]:
    """``file:line: import`` for each import inside a function of ``path`` without a reason.

    The reason is a comment starting ``# heavy`` or ``# optional``, on the import's line or on
    the line above the block of consecutive import lines it belongs to.
    """
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), filename=str(path))
    local = {
        node.lineno
        for func in ast.walk(tree)
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(func)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not _has_reason(lines, node)
    }
    return [f"{path}:{n}: {lines[n - 1].strip()}" for n in sorted(local)]


def _has_reason(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    here = lines[node.lineno - 1]
    if "#" in here:
        return here[here.index("#") :].startswith(REASONS)
    above = node.lineno - 2
    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith(REASONS)


def test_local_import_check_flags_an_unexplained_import(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import os\n"
        "def f():\n    import json\n"
        "def g():\n    import torch  # heavy: torch\n"
        "def h():\n    # optional: the accelerator\n    import lark_cython\n    import x\n"
        "class C:\n    def m(self):\n        from a import b  # lazily\n"
        "def k():\n    y = 1\n    import z\n"
    )
    assert local_imports_without_reason(path) == [
        f"{path}:3: import json",
        f"{path}:12: from a import b  # lazily",
        f"{path}:15: import z",
    ]


@pytest.mark.parametrize("case", LIGHT_CASES)
def test_function_local_imports_are_heavy_or_optional(case):
    """Other imports belong at module level, where a reader sees a module's dependencies."""
    others = [ROOT / c for c in LIGHT_CASES if c != case and c.startswith(case + "/")]
    found = [
        line
        for path in sorted((ROOT / case).rglob("*.py"))
        if not any(path.is_relative_to(other) for other in others)
        for line in local_imports_without_reason(path)
    ]
    assert not found, (
        "function-local imports without a '# heavy: ...' or '# optional: ...' comment (move "
        "them to module level, or say why they must stay):\n" + "\n".join(found)
    )
