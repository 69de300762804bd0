"""Executor backends by name: ``make_backend("hf" | "openai" | "scripted" | kind, **kw)``.

:data:`BACKENDS` holds factories ``(**kwargs) -> LLM``; ``make_backend("my_pkg.module:factory",
...)`` builds a backend from outside flowgrpo by dotted path. Importing this package imports
neither torch, transformers nor the openai SDK: the backends import them on first use (tested).

Built-in plugins: a module of this package that is not imported with it (``simulated``) is a
plugin like a user's. :func:`find_backend` (and so :func:`make_backend`) imports the module named
as the kind asked for, with :func:`flowgrpo.plugins.import_plugin` (what ``plugins:`` uses), when
no backend of that kind is registered yet; the module registers it. Runs build their executor
with :func:`flowgrpo.operators.executor.build_executor`.

Not handled here: validating the keyword arguments (each backend does that itself and raises a
clear ``ValueError``/``TypeError``).
"""

from __future__ import annotations

import difflib
import pkgutil
import sys
from collections.abc import Callable
from typing import Any

from flowgrpo.operators.backends.hf import HFBackend
from flowgrpo.operators.backends.openai_http import OpenAIBackend
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.llm import LLM
from flowgrpo.plugins import import_plugin
from flowgrpo.registry import Registry

BackendFactory = Callable[..., LLM]

#: Executor backend factories by kind.
BACKENDS: Registry[BackendFactory] = Registry("executor backend")


def register_backend(
    kind: str, factory: BackendFactory, *, check: Callable[..., None] | None = None
) -> BackendFactory:
    """Register ``factory`` under ``kind``; registering a kind twice raises ``ValueError``.

    ``check(section, task)``: the kind's own check of a run's executor section (its
    ``options``) and of the run's task spec, called when the run is built, before any model
    loads (:func:`flowgrpo.operators.executor.check_executor`); it raises ``ValueError`` (or
    ``ConfigError``) naming the field. None: the kind takes no options.
    """
    return BACKENDS.register(kind, factory, check=check)


def backend_check(kind: str) -> Callable[..., None] | None:
    """The ``check`` registered with backend ``kind`` (None when it gave none)."""
    return BACKENDS.meta(kind).get("check") if kind in BACKENDS else None


def available_backends() -> tuple[str, ...]:
    """The backend kinds: registered ones and built-in plugins not imported yet, sorted."""
    return tuple(sorted({*BACKENDS.names(), *_plugin_kinds()}))


def _plugin_kinds() -> tuple[str, ...]:
    """Modules of this package not imported yet: built-in plugins, named as their kind."""
    return tuple(
        m.name for m in pkgutil.iter_modules(__path__) if f"{__name__}.{m.name}" not in sys.modules
    )


def find_backend(kind: str) -> BackendFactory:
    """The factory of backend ``kind``: a registered kind, a dotted path (imported), or a
    built-in plugin, imported now (see the module docstring).

    Raises ``ValueError`` naming the available kinds when ``kind`` is none of them.
    """
    if isinstance(kind, str) and kind not in BACKENDS and kind in _plugin_kinds():
        import_plugin(f"{__name__}.{kind}")
    if kind in BACKENDS or (isinstance(kind, str) and ":" in kind):
        return BACKENDS.get(kind)
    close = difflib.get_close_matches(str(kind), available_backends(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"unknown executor backend {kind!r}{hint}; choose one of: "
        f"{', '.join(available_backends())}, or a dotted path 'package.module:function'"
    )


def make_backend(kind: str, **kwargs: Any) -> LLM:
    """Build the executor backend ``kind`` (see :func:`find_backend`) with ``kwargs``.

    Raises ``ValueError`` naming the available kinds when ``kind`` is unknown.
    """
    return find_backend(kind)(**kwargs)


def _make_hf(**kwargs: Any) -> LLM:
    """An :class:`HFBackend` around a loaded ``model``/``tokenizer``, or loaded by name."""
    if "model" in kwargs or "tokenizer" in kwargs:
        return HFBackend(**kwargs)
    return HFBackend.from_pretrained(**kwargs)


register_backend("hf", _make_hf)
register_backend("openai", OpenAIBackend)
register_backend("scripted", ScriptedBackend)

__all__ = [
    "BACKENDS",
    "BackendFactory",
    "available_backends",
    "find_backend",
    "make_backend",
    "register_backend",
]
