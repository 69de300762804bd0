"""The one registry helper: variants chosen by name (estimators, losses, rewards, tasks, ...).

Every pluggable kind of thing in flowgrpo is a :class:`Registry` of plain callables, in the style
of verl's ``core_algos.py``::

    ESTIMATORS = Registry("advantage estimator")

    @ESTIMATORS.register("grpo")          # decorator style
    def grpo(rewards_NC, group_size, weights_C, eps): ...

    ESTIMATORS.register("mine", my_fn)    # call style
    ESTIMATORS.get("grpo")                # the function; unknown names list the choices
    ESTIMATORS.names()                    # sorted tuple of names

Rules shared by all registries: names are non-empty strings; registering a name twice raises
(naming where the first one came from); an unknown name raises ``ValueError`` listing the choices
and the closest match. ``get`` also accepts a dotted path ``"my_pkg.module:attr"`` to a callable
outside flowgrpo: it is imported and registered under that path on first use.

This module imports nothing from flowgrpo's packages (it sits below ``flowgrpo.dsl``).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "import_object"]


def import_object(path: str) -> Any:
    """The object a dotted path ``"package.module:attribute"`` names.

    Raises ``ValueError`` saying what is wrong (no colon, module not importable, attribute
    missing) and what a valid path looks like.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not a dotted path; write 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"cannot import module {module_name!r} of {path!r} ({exc}); is it installed or on "
            "PYTHONPATH?"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})")
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named callables of one kind, with optional metadata per entry.

    Args:
        kind: what the entries are, used in every message ("advantage estimator").
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, obj: T | None = None, **meta: Any):
        """Register ``obj`` under ``name`` (call style) or return a decorator that does.

        ``meta`` is kept beside the entry (see :meth:`meta`). Raises ``ValueError`` for an empty
        name or a name already taken.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def add(value: T) -> T:
            if name in self._entries:
                old = self._entries[name]
                where = getattr(old, "__module__", None), getattr(old, "__qualname__", None)
                origin = ".".join(p for p in where if p) or repr(old)
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({origin}); choose another "
                    "name, or unregister it first where the same code runs again (a notebook "
                    "cell, a plugin re-imported after an error)"
                )
            self._entries[name] = value
            self._meta[name] = dict(meta)
            return value

        return add if obj is None else add(obj)

    def get(self, name: str) -> T:
        """The entry registered as ``name`` (or a dotted path ``"pkg.mod:attr"``, imported)."""
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        if isinstance(name, str) and ":" in name and "." in name.partition(":")[0]:
            obj = import_object(name)
            if not callable(obj):
                raise ValueError(f"{name!r} is not callable, so it cannot be a {self.kind}")
            return self.register(name, obj)
        raise ValueError(self.unknown_message(name))

    def unknown_message(self, name: object) -> str:
        """'unknown X 'name'; choose one of: ... (did you mean ...?)'."""
        close = difflib.get_close_matches(str(name), list(self._entries), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (
            f"unknown {self.kind} {name!r}{hint}; choose one of: {', '.join(self.names())}, "
            "or a dotted path 'package.module:function'"
        )

    def meta(self, name: str) -> Mapping[str, Any]:
        """The metadata given at registration (empty when none)."""
        self.get(name)
        return dict(self._meta.get(name, {}))

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._entries))

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests and notebooks that re-register); unknown names raise."""
        self.get(name)
        del self._entries[name]
        self._meta.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self.names())})"
