"""One builder: no production module constructs an executor backend or interpreter ``Limits``
except ``operators/executor/build.py`` (``build_executor``, ``executor_limits``), so train, run,
eval and the scripts cannot drift apart in how they read the ``executor:`` section (issue 21).

The check reads the source with ``ast`` (it imports nothing): every call whose callee is named
``Limits`` or one of :data:`EXECUTOR_CALLS` (``Limits(...)``, ``HFBackend.from_pretrained(...)``,
``make_backend(...)``) in dsl/, operators/, rewards/, trainer/, flowgrpo/, scripts/ and
research/. The few other places that must construct one are listed in :data:`ALLOWED`, each with
its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("dsl", "operators", "rewards", "trainer", "flowgrpo", "scripts", "research")
BUILDER = "operators/executor/build.py"
#: Callee names that construct an executor backend (a class or a factory).
EXECUTOR_CALLS = frozenset(
    {
        "make_backend",
        "HFBackend",
        "from_pretrained",  # only HFBackend.from_pretrained counts, see _constructions
        "OpenAIBackend",
        "ScriptedBackend",
        "SimulatedExecutor",
        "make_simulated",
    }
)
#: (file, callee) constructed outside the builder, and why that is not a second builder.
ALLOWED = {
    # the default limits of a run given none, beside the interpreter's Limits class (the dsl's
    # class is StaticLimits: the static bounds of a workflow, not a run's limits)
    ("operators/interpreter.py", "Limits"): "DEFAULT_LIMITS, beside the class",
    # the registered factories themselves: what the builder calls through make_backend
    ("operators/backends/__init__.py", "HFBackend"): "the 'hf' factory of BACKENDS",
    ("operators/backends/__init__.py", "from_pretrained"): "the 'hf' factory of BACKENDS",
    ("operators/simulation/executor.py", "SimulatedExecutor"): "the 'simulated' factory",
    # exact enumeration replays chosen outcomes: an analysis tool, not a run's executor
    ("operators/simulation/exact.py", "SimulatedExecutor"): "enumerate_exact's replay",
}


def _callee(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _constructions(path: Path) -> list[tuple[int, str]]:
    """(line, callee) of every Limits or executor construction in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        if name == "from_pretrained":  # only HFBackend's loads an executor
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            if not (isinstance(owner, ast.Name) and owner.id == "HFBackend"):
                continue
        if name == "Limits" or name in EXECUTOR_CALLS:
            found.append((node.lineno, name))
    return found


def production_files() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def test_only_the_builder_constructs_executors_and_limits():
    outside = []
    for path in production_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == BUILDER:
            continue
        outside += [
            f"{rel}:{line}: {name}(...)"
            for line, name in _constructions(path)
            if (rel, name) not in ALLOWED
        ]
    assert not outside, "build executors and Limits with operators.executor:\n" + "\n".join(outside)


def test_the_builder_constructs_both():
    names = {name for _, name in _constructions(ROOT / BUILDER)}
    assert {"Limits", "make_backend"} <= names


def test_the_scan_sees_a_construction(tmp_path):
    """The scan itself: a stray Limits(...) or HFBackend.from_pretrained(...) is found."""
    stray = tmp_path / "stray.py"
    stray.write_text(
        "from x import Limits, HFBackend\n"
        "a = Limits(max_llm_calls=3)\n"
        "b = HFBackend.from_pretrained('m')\n"
        "c = AutoModel.from_pretrained('m')\n",
        encoding="utf-8",
    )
    assert _constructions(stray) == [(2, "Limits"), (3, "from_pretrained")]


def test_every_allowed_entry_is_still_there():
    """An allowance whose construction is gone is stale: remove it."""
    present = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in production_files()
        for _, name in _constructions(path)
    }
    assert set(ALLOWED) <= present, set(ALLOWED) - present
