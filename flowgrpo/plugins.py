"""Plugins: your own modules, imported so that their registrations run (config key ``plugins``).

A plugin is a Python module that registers things when imported -- reward components
(``@register_component``), tasks (``@register_task``), executor backends
(``register_backend``), operators (``register_operator(..., role=...)`` or
``register_prompt_operator``), advantage estimators, policy losses. Name it by module
(``my_pkg.rewards``, importable from ``sys.path``) or by file (``plugins/my_rewards.py``, a path
relative to the working folder). A file is imported as the module named by its stem
(``my_rewards``) and that folder is put on ``sys.path``, so its own imports of neighbouring
files resolve; importing the same plugin again is a no-op. What a plugin registers is looked up
by the name it registered (a dotted path ``pkg.module:fn`` names a function inside a package:
the dot tells it from a task's ``name:argument``, so a plugin file's ``my_rewards:fn`` is not one).

This module imports nothing from flowgrpo's packages (it sits below ``flowgrpo.dsl``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["check_plugins", "import_plugin", "import_plugins"]


def check_plugins(entries: Sequence[str]) -> None:
    """Check ``entries`` as data (a list of non-empty module names or paths); imports nothing.
    ``ValueError`` names ``plugins[i]``."""
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)):
        raise ValueError(f"plugins: expected a list of module names or .py paths, got {entries!r}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"plugins[{i}]: a plugin is a module name or a .py file path, "
                             f"got {entry!r}")  # fmt: skip


def import_plugin(entry: str) -> ModuleType:
    """Import one plugin (a module name or a ``.py`` file path); ``ValueError`` says why not."""
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"a plugin is a module name or a .py file path, got {entry!r}")
    entry = entry.strip()
    if entry.endswith(".py") or "/" in entry or "\\" in entry:
        return _import_file(Path(entry))
    try:
        return importlib.import_module(entry)
    except ImportError as exc:
        raise ValueError(
            f"plugin {entry!r}: cannot import it ({exc}); is it installed or on PYTHONPATH? "
            "(a file is named by its path, e.g. plugins/my_rewards.py)"
        ) from None


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ValueError(f"plugin file {str(path)!r} does not exist (paths are relative to the "
                         "working folder)")  # fmt: skip
    if path.suffix != ".py":  # no loader for another suffix: it failed on a None spec
        raise ValueError(f"plugin file {str(path)!r} is not a .py file; name a Python file")
    name, folder = path.stem, str(path.resolve().parent)
    if not name.isidentifier():
        raise ValueError(f"plugin file {str(path)!r}: {name!r} is not a valid module name")
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
            return loaded
        raise ValueError(f"plugin file {str(path)!r}: a different module {name!r} is loaded")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except ImportError as exc:  # what it imports is missing: one line, as for a module
        del sys.modules[name]
        raise ValueError(f"plugin file {str(path)!r}: {exc}") from None
    except SyntaxError as exc:  # one line naming where; an error its code raises keeps the
        del sys.modules[name]  # traceback into that code, which is what its author needs
        raise ValueError(
            f"plugin file {str(path)!r}: line {exc.lineno}: {exc.msg}; fix the file"
        ) from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def import_plugins(entries: Sequence[str]) -> list[ModuleType]:
    """Import every plugin of ``entries`` in order (see the module docstring)."""
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)):
        raise ValueError(f"plugins must be a list of module names or .py paths, got {entries!r}")
    return [import_plugin(entry) for entry in entries]
