"""Every dotted path the docs and docstrings name resolves (issue 21 item 7).

Collected:

* in the Markdown (``docs/*.md``, README.md, CONTRIBUTING.md) and in the strings and comments
  of the production ``.py`` files (dsl, operators, rewards, trainer, flowgrpo, scripts): every
  ``flowgrpo.x.y[.z]`` and ``flowgrpo.x.y:attr`` path;
* in the ``.py`` files also the dotted targets of Sphinx roles (``:func:`...```): one that starts
  with a package folder (``operators.ops``) is ``flowgrpo.`` + it; one that starts with dots
  (``..update.policy_update``) names an object whose full path ends with it, as Sphinx reads it.

A path resolves when the longest importable module prefix imports and the rest is found by
``getattr``. Bare names in roles (``:func:`check```) and other packages' paths are not checked.
The imports run in a child process, so the imports and registrations they make stay out of the
test process.
"""

from __future__ import annotations

import doctest
import importlib
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = (
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "research" / "README.md",
)
SOURCE_FOLDERS = ("dsl", "operators", "rewards", "trainer", "flowgrpo", "scripts", "research")
PACKAGES = ("dsl", "operators", "rewards", "trainer")

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
#: ``flowgrpo.a.b`` or ``flowgrpo.a.b:c.d``; not inside a longer name (``my_flowgrpo.x``).
FULL_PATH = re.compile(rf"(?<![\w.])flowgrpo(?:\.{_IDENT})+(?::{_IDENT}(?:\.{_IDENT})*)?")
#: ``:func:`~a.b.c``` and the like.
ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|exc|obj):`~?([^`<>\s]+)`")


def paths_in_text(text: str) -> list[str]:
    """The ``flowgrpo.`` paths written in ``text`` (``module:attr`` kept as written)."""
    return FULL_PATH.findall(text)


def role_paths(text: str) -> list[str]:
    """The dotted role targets of ``text``: ``flowgrpo.``-prefixed ones as they are, ones that
    start with a package folder prefixed with ``flowgrpo.``, relative ones (``.x``) kept."""
    out = []
    for target in ROLE.findall(text):
        target = target.rstrip("()")
        head = target.split(".")[0]
        if target.startswith("."):
            out.append(target)
        elif head in PACKAGES and "." in target:
            out.append(f"flowgrpo.{target}")
    return out


#: ``>>> from operators... import`` / ``>>> import dsl``: a package by its folder name.
BARE_IMPORT = re.compile(rf">>> (?:from|import) ((?:{'|'.join(PACKAGES)})(?:\.{_IDENT})*)\b")


def bare_doctest_imports(text: str) -> list[str]:
    """Modules a ``>>>`` example imports by folder name (``operators.tasks``): they import only
    from the repository root, never from an installed wheel (write ``flowgrpo.operators``)."""
    return BARE_IMPORT.findall(text)


def docstring_text(source: str) -> str:
    """The strings and comments of a Python source (what a reader reads as prose)."""
    parts = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            parts.append(token.string)
    return "\n".join(parts)


def collected(root: Path = ROOT) -> dict[str, list[str]]:
    """path -> the files (``file:line``) that name it, over the docs and production sources."""
    found: dict[str, list[str]] = {}

    def add(path: str, where: str) -> None:
        found.setdefault(path, []).append(where)

    for md in MARKDOWN:
        for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            for path in paths_in_text(line):
                add(path, f"{md.relative_to(root)}:{n}")
    for folder in SOURCE_FOLDERS:
        for py in sorted((root / folder).rglob("*.py")):
            text = docstring_text(py.read_text(encoding="utf-8"))
            rel = str(py.relative_to(root))
            for path in [*paths_in_text(text), *role_paths(text)]:
                add(path, rel)
            for module in bare_doctest_imports(text):
                add(module, rel)  # a bare name: never resolved (see unresolved)
    return found


# --------------------------------------------------------------------------- resolution


def resolve(path: str) -> str | None:
    """None when ``path`` (``a.b.c`` or ``a.b:c``) names a module or an object in one, else
    why not. Imports the longest importable module prefix, then ``getattr`` the rest."""
    dotted = path.replace(":", ".")
    if ":" in path and path.count(":") > 1:
        return "more than one ':'"
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                return f"importing {name} fails: {exc}"
            continue
        except Exception as exc:  # a module that exists but does not import
            return f"importing {name} fails: {type(exc).__name__}: {exc}"
        for j, attr in enumerate(parts[i:], i):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:j])} has no attribute {attr!r}"
            obj = getattr(obj, attr)
        return None
    return f"no module {parts[0]!r}"


def _module_files(root: Path = ROOT) -> list[Path]:
    """Every importable .py file of the installed namespace (``__main__`` runs the CLI)."""
    files = [
        py for folder in ("flowgrpo", *PACKAGES) for py in sorted((root / folder).rglob("*.py"))
    ]
    return [py for py in files if py.name != "__main__.py"]


def _all_modules(root: Path = ROOT) -> list[str]:
    """The module name of each of :func:`_module_files` (as tests/test_layering names them:
    ``dsl/parser.py`` is ``flowgrpo.dsl.parser``)."""
    names = []
    for py in _module_files(root):
        parts = list(py.relative_to(root).with_suffix("").parts)
        parts = parts[1:] if parts[0] == "flowgrpo" else parts
        parts = parts[:-1] if parts and parts[-1] == "__init__" else parts
        names.append(".".join(["flowgrpo", *parts]))
    return names


def resolve_relative(target: str, modules: list[str]) -> str | None:
    """A role target written ``.x.y`` / ``..x.y``: some module ``m`` has ``m.x.y`` (Sphinx's
    suffix search)."""
    suffix = target.lstrip(".")
    for module in modules:
        if module.endswith("." + suffix) or resolve(f"{module}.{suffix}") is None:
            return None
    return f"no flowgrpo module or object ends with .{suffix}"


def unresolved(paths: list[str]) -> dict[str, str]:
    """path -> why it does not resolve, for each of ``paths`` that does not."""
    out, modules = {}, None
    for path in paths:
        if path.split(".")[0] in PACKAGES:
            why = f"a bare package name: write flowgrpo.{path}"
        elif path.startswith("."):
            modules = modules if modules is not None else _all_modules()
            why = resolve_relative(path, modules)
        else:
            why = resolve(path)
        if why is not None:
            out[path] = why
    return out


def unresolved_in_child(paths: list[str]) -> dict[str, str]:
    """:func:`unresolved` in a fresh interpreter (its imports stay there)."""
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_doc_paths import unresolved\n"
        "print(json.dumps(unresolved(json.load(sys.stdin))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the checker itself


def test_the_collector_finds_full_paths_module_attr_forms_and_roles():
    text = (
        "Built by ``flowgrpo.operators.executor.build_executor``; see flowgrpo.rewards. "
        "A plugin names flowgrpo.trainer.loop.trainer:Trainer, not my_flowgrpo.x."
    )
    assert paths_in_text(text) == [
        "flowgrpo.operators.executor.build_executor",
        "flowgrpo.rewards",
        "flowgrpo.trainer.loop.trainer:Trainer",
    ]
    roles = ":func:`~operators.ops.register_operator`, :mod:`.update`, :func:`check`, "
    roles += ":class:`accelerate.Accelerator`"
    assert role_paths(roles) == ["flowgrpo.operators.ops.register_operator", ".update"]
    source = '"""Doc: flowgrpo.dsl.ast."""\nx = 1  # see flowgrpo.dsl.parser\n'
    source += 'y = "flowgrpo.plugins"\n'
    assert paths_in_text(docstring_text(source)) == [
        "flowgrpo.dsl.ast",
        "flowgrpo.dsl.parser",
        "flowgrpo.plugins",
    ]


def test_the_checker_fails_on_planted_bad_paths():
    planted = (
        "See ``flowgrpo.operators.executor.build_executorr`` and flowgrpo.trainer.loop.nothing, "
        "flowgrpo.dsl.ast:NoSuchNode and :mod:`..no_such_module`; >>> from operators.ops import x; "
        "flowgrpo.dsl.ast.Visitor and flowgrpo.trainer.config:load_config are fine."
    )
    paths = [*paths_in_text(planted), *role_paths(planted), *bare_doctest_imports(planted)]
    broken = unresolved_in_child(paths)
    assert sorted(broken) == [
        "..no_such_module",
        "flowgrpo.dsl.ast:NoSuchNode",
        "flowgrpo.operators.executor.build_executorr",
        "flowgrpo.trainer.loop.nothing",
        "operators.ops",
    ]
    assert (
        "has no attribute 'build_executorr'"
        in broken["flowgrpo.operators.executor.build_executorr"]
    )


# --------------------------------------------------------------------------- the repository


def test_every_dotted_path_in_docs_and_docstrings_resolves():
    found = collected()
    assert len(found) > 50  # the collector sees the docs (a broken glob would pass vacuously)
    broken = unresolved_in_child(sorted(found))
    lines = [f"{path}: {why} (in {', '.join(sorted(set(found[path])))})" for path, why in
             sorted(broken.items())]  # fmt: skip
    assert not broken, "dotted paths that do not resolve:\n" + "\n".join(lines)


def doctest_modules(root: Path = ROOT) -> list[str]:
    """The production modules whose source holds a ``>>>`` example."""
    return [
        name
        for name, py in zip(_all_modules(root), _module_files(root))
        if ">>>" in py.read_text(encoding="utf-8")
    ]


def test_the_docstring_examples_run():
    """Every ``>>>`` example of the production modules runs as written (``flowgrpo.`` imports:
    a bare ``from operators ...`` only works from the repository root)."""
    names = doctest_modules()
    assert "flowgrpo.rewards.sample" in names
    failed = []
    for name in names:
        importlib.import_module(name)
        module = sys.modules[name]  # not the package attribute: dsl.canonical is a function
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
        if result.failed:
            failed.append(f"{name}: {result.failed} of {result.attempted} examples fail")
    assert not failed, "run python -m doctest on these files:\n" + "\n".join(failed)
