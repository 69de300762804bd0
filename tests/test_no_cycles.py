"""No import cycles among the modules of dsl/, operators/, rewards/ and trainer/.

The check reads the source (it imports nothing): every ``import flowgrpo.x`` and
``from flowgrpo.x import y`` anywhere in a module (module level, inside functions, and under
``if TYPE_CHECKING:``) is an edge from that module to ``flowgrpo.x`` -- or to
``flowgrpo.x.y`` when ``y`` is itself a module. A function-local import still ties two modules
together (a reader of one has to read the other), so it counts. A cycle fails the test and is
printed as ``a -> b -> a``.
"""

from __future__ import annotations

import ast
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
            targets.add(node.module)
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
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
    source = "def f():\n    from flowgrpo.dsl import ast\n    import flowgrpo.rewards\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    known = {"flowgrpo.dsl", "flowgrpo.dsl.ast", "flowgrpo.rewards", "flowgrpo.trainer"}
    assert _edges(path, known) == {"flowgrpo.dsl", "flowgrpo.dsl.ast", "flowgrpo.rewards"}


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
