"""The simulation is one plugin: outside its own files no production module names the simulated
executor in code (issue 21). It registers its backend and its ``sim/*`` metrics hook through the
extension points a user's plugin has, and ``executor.kind: simulated`` loads it by kind.

The scan reads the source (it imports nothing): every identifier, attribute and string literal
of a module, minus docstrings and comments (they describe; they do not depend on it), searched
for ``simulat`` (any case). The plugin's files are the package ``operators/simulation/`` and its
registering module ``operators/backends/simulated.py``. One other place may mention it, only
where :data:`JUSTIFIED` says, with the reason there.
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("dsl", "operators", "rewards", "trainer", "flowgrpo")
WORD = re.compile("simulat", re.IGNORECASE)


def plugin_files() -> set[str]:
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "operators/simulation").glob("*.py")}
    return package | {"operators/backends/simulated.py"}


#: file -> the only source lines (stripped) that may mention it there, and why.
JUSTIFIED = {
    # the scripted test backend's fail_on error: a simulated SERVER failure of that backend,
    # not the simulated executor (tests/operators/test_backends.py reads "simulated" in it)
    "operators/backends/scripted.py": {
        '"", prompt_tokens=prompt_tokens, error="simulated server failure (fail_on)"',
    },
}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.add(id(value))
    # attribute docstrings: a string expression right after an assignment
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for prev, stmt in itertools.pairwise(stmts):
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and isinstance(prev, (ast.Assign, ast.AnnAssign))
                ):
                    ids.add(id(stmt.value))
    return ids


def mentions(source: str) -> list[tuple[int, str]]:
    """(line, stripped source line) of each mention in code: names, attributes, strings that are
    not docstrings, import paths (comments are not code; docstrings describe)."""
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    lines = source.splitlines()
    found: set[int] = set()
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            text = " ".join([getattr(node, "module", "") or ""] + [a.name for a in node.names])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            text = getattr(node, "name", None) or getattr(node, "arg", None)
        elif isinstance(node, ast.keyword):
            text = node.arg
        if text and WORD.search(text):
            found.add(node.lineno)
    # a mention inside a comment only is not code: keep lines whose code part mentions it
    code = _code_without_comments(source)
    return [(n, lines[n - 1].strip()) for n in sorted(found) if WORD.search(code[n - 1])]


def _code_without_comments(source: str) -> list[str]:
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return lines


def production_mentions() -> dict[str, list[tuple[int, str]]]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = mentions(path.read_text(encoding="utf-8"))
            if found:
                out[path.relative_to(ROOT).as_posix()] = found
    return out


def test_only_the_plugins_files_name_the_simulated_executor():
    found = production_mentions()
    outside = {f: m for f, m in found.items() if f not in plugin_files() and f not in JUSTIFIED}
    assert not outside, f"the simulation is a plugin; these name it in code: {outside}"
    for path, allowed in JUSTIFIED.items():
        extra = [(n, line) for n, line in found.get(path, []) if line not in allowed]
        assert not extra, f"{path}: only {sorted(allowed)} may mention it, not {extra}"
    # the list is exactly the plugin's files (and the justified place)
    assert set(found) == plugin_files() | set(JUSTIFIED)


def test_the_scan_finds_code_and_skips_docs():
    source = (
        '"""About the simulated executor."""\n'
        "import x  # a simulated comment\n"
        "KIND = 'simulated'\n"
        "def f(simulation=None):\n"
        '    """Docs: simulation."""\n'
        "    return x.Simulator\n"
    )
    assert [n for n, _ in mentions(source)] == [3, 4, 6]


def test_the_loop_setup_cli_and_reports_do_not_import_the_plugin():
    for folder in ("trainer/loop", "trainer/cli", "trainer/reports"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "operators.simulation" not in text and "backends.simulated" not in text, path


def test_simulated_kind_loads_the_plugin_through_the_plugin_path(monkeypatch):
    """``executor.kind: simulated`` without ``plugins:``: find_backend imports the plugin module
    with flowgrpo.plugins.import_plugin, which registers the backend and the metrics hook."""
    import sys

    from flowgrpo.metrics_hooks import METRICS_HOOKS
    from flowgrpo.operators import backends

    calls = []
    real = backends.import_plugin
    monkeypatch.setattr(backends, "import_plugin", lambda name: calls.append(name) or real(name))
    if "simulated" in backends.BACKENDS:  # loaded earlier in this process: unload it
        monkeypatch.delitem(sys.modules, "flowgrpo.operators.backends.simulated")
        backends.BACKENDS.unregister("simulated")
        METRICS_HOOKS.unregister("sim")
    factory = backends.find_backend("simulated")
    assert calls == ["flowgrpo.operators.backends.simulated"]
    assert "simulated" in backends.BACKENDS and "sim" in METRICS_HOOKS
    assert factory(seed=1).settings_key.startswith("simulated:seed=1")


def test_the_sim_hook_starts_with_the_sections_limits():
    """The loop hands each hook the run's limits (the plugin imports no builder): the regret
    uses the section's call budget; a run with another executor leaves the hook off."""
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.loop.metric_hooks import start_hooks

    cfg = load_config("configs/tiny-known-optimum.yaml", ("executor.max_calls=5",))
    (sim,) = [entry for entry in start_hooks(cfg) if entry.name == "sim"]
    assert sim.settings.limits.max_llm_calls == 5
    other = load_config(
        "configs/tiny-known-optimum.yaml", ("executor.kind=hf", "executor.options:={}")
    )
    assert "sim" not in [entry.name for entry in start_hooks(other)]
