"""Layering: a lower package never imports a higher one (docs/ARCHITECTURE.md, "Packages").

Layers, lowest first::

    core (flowgrpo/: registry, configuration, __init__)  <-  dsl  <-  operators  <-  rewards
        <-  trainer

Inside the trainer, each subpackage's ``__init__`` docstring says in a "May import" sentence
what it may import; :data:`TRAINER_RULES` is that sentence as data, and
:func:`test_trainer_docstrings_state_the_rules` keeps the two in step.

The check reads the source (it imports nothing): every ``import flowgrpo.x`` and
``from flowgrpo.x import y`` anywhere in a file -- module level, inside functions, under
``if TYPE_CHECKING:`` -- is an edge, since each one ties the reader of one module to the other.
Relative imports are resolved first. A bare ``import trainer`` (the folder name, not the
installed ``flowgrpo.trainer``) is reported too: it only works from the repository root and
never from an installed wheel. Imports through ``importlib`` strings are not seen.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Layer order, lowest first; ``core`` is everything under flowgrpo/ (the namespace itself).
LAYERS = ("core", "dsl", "operators", "rewards", "trainer")
FOLDERS = {"core": "flowgrpo", **{name: name for name in LAYERS[1:]}}
#: The trainer's parts: its subpackages (``config``: the training configuration as data, the
#: lowest part) and ``trainer`` (trainer/__init__.py, which imports nothing).
TRAINER_PARTS = (
    "trainer", "config", "algorithms", "monitoring", "loop", "reports", "search", "cli",
)  # fmt: skip
_BELOW_TRAINER = frozenset(LAYERS[:-1])
#: Core modules that are front ends over the whole library, as the CLI is: ``flowgrpo.api``
#: (``flowgrpo.train``, ``flowgrpo.evaluate``) imports the trainer inside its functions, so
#: ``import flowgrpo`` stays light (tests/test_api.py checks that); like the CLI it may import
#: every part of flowgrpo.
FRONT_ENDS = frozenset({"flowgrpo.api"})
#: What each trainer part may import besides itself and ``trainer`` (the empty package init):
#: lower layers and other trainer parts, as the subpackages' docstrings state them.
TRAINER_RULES: dict[str, frozenset[str]] = {
    "trainer": frozenset(),
    "algorithms": frozenset({"core", "rewards", "config"}),
    "monitoring": frozenset({"core"}),
    "config": _BELOW_TRAINER | {"monitoring"},
    "loop": _BELOW_TRAINER | {"config", "algorithms", "monitoring"},
    "reports": _BELOW_TRAINER | {"config", "algorithms", "monitoring", "loop"},
    "search": _BELOW_TRAINER | {"config", "loop"},
    "cli": _BELOW_TRAINER | {"config", "algorithms", "monitoring", "loop", "reports", "search"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    """The module name of a source file: ``dsl/parser.py`` -> ``flowgrpo.dsl.parser``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == "flowgrpo":
        parts.pop(0)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(["flowgrpo", *parts])


def source_files(root: Path = ROOT) -> list[Path]:
    """Every .py file of the installed namespace (flowgrpo/ and the four package folders)."""
    return [p for folder in FOLDERS.values() for p in sorted((root / folder).rglob("*.py"))]


def part_of(module: str) -> tuple[str, str | None]:
    """(layer, trainer part or None) of a ``flowgrpo...`` module name."""
    parts = module.split(".")[1:]
    if not parts or parts[0] not in LAYERS[1:]:
        return "core", None
    if parts[0] != "trainer":
        return parts[0], None
    return "trainer", parts[1] if len(parts) > 1 else "trainer"


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> list:
    """``(line, target)`` for every flowgrpo module ``source`` imports anywhere.

    ``from a.b import c`` targets ``a.b.c`` when that is a module in ``known``, else ``a.b``.
    A bare ``import dsl`` (one of the four folder names) is returned as ``("bare", "dsl")``.
    """
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{alias.name}" for alias in node.names]
            names = [sub if sub in known else base for sub in subs]
        else:
            continue
        for name in names:
            head = name.split(".")[0]
            if head == "flowgrpo":
                found.append((node.lineno, name))
            elif head in LAYERS[1:]:
                found.append((node.lineno, ("bare", name)))
    unique = list(dict.fromkeys(found))  # ``from a import b, c`` may name ``a`` twice
    return sorted(unique, key=lambda item: item[0])  # ast.walk is breadth-first


def violations(source: str, path: str, module: str, is_package: bool, known: set[str]) -> list:
    """``path:line: source -> target (why)`` for each import of ``source`` that breaks a rule."""
    layer, part = part_of(module)
    if module in FRONT_ENDS:
        return []
    out = []
    for line, target in imported_modules(source, module, is_package, known):
        if isinstance(target, tuple):
            out.append(f"{path}:{line}: imports {target[1]!r}; write flowgrpo.{target[1]}")
            continue
        to_layer, to_part = part_of(target)
        if LAYERS.index(to_layer) > LAYERS.index(layer):
            out.append(f"{path}:{line}: {module} -> {target} ({layer} imports {to_layer})")
        elif part is not None and not _trainer_allowed(part, to_layer, to_part):
            out.append(f"{path}:{line}: {module} -> {target} (trainer.{part} may not import it)")
    return out


def _trainer_allowed(part: str, to_layer: str, to_part: str | None) -> bool:
    if to_part in (part, "trainer"):
        return True
    return (to_part or to_layer) in TRAINER_RULES[part]


def all_violations(root: Path = ROOT) -> list[str]:
    """Every rule broken by a file of the namespace under ``root``."""
    files = source_files(root)
    known = {module_name(p, root) for p in files}
    found = []
    for path in files:
        found += violations(
            path.read_text(encoding="utf-8"),
            str(path.relative_to(root)),
            module_name(path, root),
            path.name == "__init__.py",
            known,
        )
    return found


# --------------------------------------------------------------------------- the checker itself

KNOWN = {"flowgrpo.operators.tasks", "flowgrpo.operators.tasks.base", "flowgrpo.trainer.loop"}


def test_checker_flags_upward_imports_anywhere_in_a_file():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import flowgrpo.registry\n"  # down: fine
        "if TYPE_CHECKING:\n    from flowgrpo.trainer.config import TrainConfig\n"
        "def f():\n    import flowgrpo.rewards\n"
        "from flowgrpo.operators.tasks import base\n"
    )
    found = violations(source, "dsl/x.py", "flowgrpo.dsl.x", False, KNOWN)
    assert found == [
        "dsl/x.py:4: flowgrpo.dsl.x -> flowgrpo.trainer.config (dsl imports trainer)",
        "dsl/x.py:6: flowgrpo.dsl.x -> flowgrpo.rewards (dsl imports rewards)",
        "dsl/x.py:7: flowgrpo.dsl.x -> flowgrpo.operators.tasks.base (dsl imports operators)",
    ]
    # The same imports from the trainer's loop break no rule.
    assert violations(source, "l.py", "flowgrpo.trainer.loop.x", False, KNOWN) == []


def test_checker_flags_core_importing_a_package_and_bare_folder_names():
    source = "from flowgrpo.dsl import parse\nimport rewards.score\nfrom flowgrpo import registry\n"
    found = violations(source, "flowgrpo/c.py", "flowgrpo.c", False, {"flowgrpo.registry"})
    assert found == [
        "flowgrpo/c.py:1: flowgrpo.c -> flowgrpo.dsl (core imports dsl)",
        "flowgrpo/c.py:2: imports 'rewards.score'; write flowgrpo.rewards.score",
    ]


def test_checker_resolves_relative_imports():
    source = "from ..loop import step\nfrom . import tokens\n"
    known = {"flowgrpo.trainer.loop.step", "flowgrpo.trainer.algorithms.tokens"}
    found = violations(source, "a.py", "flowgrpo.trainer.algorithms.x", False, known)
    assert found == [
        "a.py:1: flowgrpo.trainer.algorithms.x -> flowgrpo.trainer.loop.step "
        "(trainer.algorithms may not import it)"
    ]


@pytest.mark.parametrize(
    ("part", "source", "bad"),
    [
        ("algorithms", "from flowgrpo.trainer.monitoring.metrics import x\n", True),
        ("algorithms", "from flowgrpo.dsl import parse\n", True),  # only core and rewards
        ("algorithms", "from flowgrpo.rewards import weighted_sum\n", False),
        ("monitoring", "from flowgrpo.trainer.algorithms.advantages import x\n", True),
        ("monitoring", "from flowgrpo.trainer.config import TrainConfig\n", True),
        ("monitoring", "from flowgrpo.configuration import check\n", False),
        ("loop", "from flowgrpo.trainer.reports import diagnose\n", True),
        ("loop", "from flowgrpo.trainer.cli.app import main\n", True),
        ("loop", "from flowgrpo.trainer.monitoring.health import HealthMonitor\n", False),
        ("reports", "import flowgrpo.trainer.cli\n", True),
        ("reports", "from flowgrpo.trainer.loop.rollout import generate_rollout\n", False),
        ("config", "from flowgrpo.trainer.loop import trainer\n", True),
        ("config", "from flowgrpo.trainer.algorithms.losses import x\n", True),  # torch
        ("algorithms", "from flowgrpo.trainer.config import LossConfig\n", False),
        ("cli", "from flowgrpo.trainer.reports.diagnose import diagnose\n", False),
    ],
)
def test_checker_applies_the_trainer_rules(part, source, bad):
    module = f"flowgrpo.trainer.{part}.x"
    found = violations(source, "f.py", module, False, {"flowgrpo.trainer.loop.trainer"})
    assert bool(found) == bad, found


def test_a_planted_upward_import_in_a_copy_of_the_tree_fails(tmp_path):
    for folder in FOLDERS.values():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "operators" / "bad.py").write_text(
        "def run():\n    from flowgrpo.rewards import score_batch\n"
    )
    assert all_violations(tmp_path) == [
        "operators/bad.py:2: flowgrpo.operators.bad -> flowgrpo.rewards (operators imports rewards)"
    ]


# --------------------------------------------------------------------------- the repository


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_or_forbidden_imports(layer):
    """No file of ``layer`` imports a higher layer or, in the trainer, a forbidden part."""
    folder = FOLDERS[layer] + "/"
    found = [v for v in all_violations() if v.startswith(folder)]
    assert not found, "imports that break the layering (docs/ARCHITECTURE.md):\n" + "\n".join(found)


#: How each subpackage docstring's "May import" sentence names things.
_NAMED = re.compile(r"``(?:flowgrpo)?(?:\.trainer)?\.(\w+)``")
_BELOW = "every package below the trainer"


def stated_rules(docstring: str) -> frozenset[str]:
    """The parts a subpackage docstring's "May import" sentence allows (core = registry and
    configuration; "every package below the trainer" = the four lower layers)."""
    match = re.search(r"May import(.*?)(?:\.\s|\.$|;)", docstring, re.S)
    assert match, "the docstring has no 'May import ...' sentence"
    sentence = " ".join(match.group(1).split())
    if "every other part of flowgrpo" in sentence:
        return TRAINER_RULES["cli"]
    names = {n for n in _NAMED.findall(sentence)}
    allowed = {"core" if n in ("registry", "configuration") else n for n in names}
    return frozenset(allowed | (_BELOW_TRAINER if _BELOW in sentence else set()))


def test_stated_rules_reads_a_may_import_sentence():
    doc = "Holds: x.\n\nMay import: ``flowgrpo.registry``, ``.algorithms`` and\nevery package "
    doc += "below the trainer. Not ``.cli``."
    assert stated_rules(doc) == _BELOW_TRAINER | {"algorithms"}
    assert stated_rules("May import: torch, ``flowgrpo.rewards``. Nothing else.") == {"rewards"}


@pytest.mark.parametrize("part", ["config", "algorithms", "monitoring", "loop", "reports", "cli"])
def test_trainer_docstrings_state_the_rules(part):
    """The rule table above is what trainer/<part>/__init__.py tells its reader."""
    init = ROOT / "trainer" / part / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    assert stated_rules(docstring) == TRAINER_RULES[part], (
        f"{init.relative_to(ROOT)}'s 'May import' sentence and TRAINER_RULES['{part}'] in "
        "tests/test_layering.py disagree: change both together"
    )


# --------------------------------------------------------------------------- research/ and scripts/

#: Folders outside the installed namespace: they use flowgrpo as a user's code would, through its
#: public names only (research/README.md, CONTRIBUTING.md).
OUTSIDE = ("research", "scripts")


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) for each private flowgrpo name ``source`` uses: an import of or from a module
    with a ``_``-prefixed part, an imported ``_name``, and ``x._name`` on a name bound by a
    flowgrpo import (a module, a class, a function). Dunders are public; an attribute of an
    instance (``trainer._x`` on a ``Trainer(...)``) is not seen."""
    tree = ast.parse(source)
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
        else:
            continue
        for full, name in names:
            if full.split(".")[0] == "flowgrpo":
                bound.add(name)
                if _private(full):
                    found.append((node.lineno, full))
    for node in ast.walk(tree):
        dotted = _dotted(node) if isinstance(node, ast.Attribute) else None
        if dotted and dotted.split(".")[0] in bound and _private(dotted):
            found.append((node.lineno, dotted))
    return sorted(set(found))


def research_modules(root: Path = ROOT) -> set[str]:
    """The names research/ code imports itself by (research/ is on sys.path when its scripts
    run): each script's and each folder's name, and ``research``."""
    folder = root / "research"
    return (
        {"research"}
        | {p.stem for p in folder.glob("*.py")}
        | {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    )


def research_imports(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, module) for each import in ``source`` of a module named in ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] in names
        ):
            found.append((node.lineno, node.module))
    return found


def test_private_uses_flags_private_modules_names_and_attributes():
    source = (
        "import flowgrpo.dsl\nfrom flowgrpo.dsl.parser import _parse_or_error\n"
        "from flowgrpo.operators.sandbox._api import run_python\n"
        "from flowgrpo.trainer.loop import step as step_mod\n"
        "from flowgrpo.trainer.loop.trainer import Trainer\n"
        "import json\n"
        "def f():\n    step_mod._resample(1)\n    Trainer._train_step\n    json._default_encoder\n"
        "    flowgrpo.dsl.validate._validate_cached.cache_clear()\n    flowgrpo.__version__\n"
    )
    assert private_uses(source) == [
        (2, "flowgrpo.dsl.parser._parse_or_error"),
        (3, "flowgrpo.operators.sandbox._api.run_python"),
        (8, "step_mod._resample"),
        (9, "Trainer._train_step"),
        (11, "flowgrpo.dsl.validate._validate_cached"),
        (11, "flowgrpo.dsl.validate._validate_cached.cache_clear"),
    ]
    assert private_uses("from flowgrpo.dsl.validate import clear_caches\n") == []


def test_research_imports_finds_the_labs_modules_only():
    source = "import studylib.pool\nfrom collapse_report import write\nimport json\n"
    source += "from flowgrpo.trainer.reports.evaluate import evaluate\n"
    names = {"studylib", "collapse_report", "research"}
    assert research_imports(source, names) == [(1, "studylib.pool"), (2, "collapse_report")]


@pytest.mark.parametrize("folder", OUTSIDE)
def test_research_and_scripts_use_public_flowgrpo_names_only(folder):
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in private_uses(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        f"{folder}/ uses private flowgrpo names (give the library a public name for what it "
        "needs, or write the few lines in the script):\n" + "\n".join(found)
    )


def test_neither_the_library_nor_scripts_import_research_code():
    """The lab depends on the product, never the other way round: an installed flowgrpo has no
    research/ folder, and scripts/ are the tools a user runs."""
    names = research_modules()
    assert {"studylib", "learn_known_optimum"} <= names  # the collector sees the lab
    files = [*source_files(), *sorted((ROOT / "scripts").rglob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in files
        for line, module in research_imports(path.read_text(encoding="utf-8"), names)
    ]
    assert not found, "imports of research/ code:\n" + "\n".join(found)
