"""Executor backends by name: ``make_backend("hf" | "openai" | "scripted" | "simulated", **kw)``.

:data:`BACKENDS` holds factories ``(**kwargs) -> LLM``; ``make_backend("my_pkg.module:factory",
...)`` builds a backend from outside flowgrpo by dotted path. Importing this package imports
neither torch, transformers nor the openai SDK: the backends import them on first use (tested).

Not handled here: validating the keyword arguments (each backend does that itself and raises a
clear ``ValueError``/``TypeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowgrpo.operators.backends.hf import HFBackend
from flowgrpo.operators.backends.openai_http import OpenAIBackend
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.backends.simulated import make_simulated
from flowgrpo.operators.llm import LLM
from flowgrpo.registry import Registry

BackendFactory = Callable[..., LLM]

#: Executor backend factories by kind.
BACKENDS: Registry[BackendFactory] = Registry("executor backend")


def register_backend(kind: str, factory: BackendFactory) -> BackendFactory:
    """Register ``factory`` under ``kind``; registering a kind twice raises ``ValueError``."""
    return BACKENDS.register(kind, factory)


def available_backends() -> tuple[str, ...]:
    """The registered backend kinds, sorted."""
    return BACKENDS.names()


def make_backend(kind: str, **kwargs: Any) -> LLM:
    """Build the executor backend ``kind`` (a registered kind or a dotted path) with ``kwargs``.

    Raises ``ValueError`` naming the registered kinds when ``kind`` is unknown.
    """
    return BACKENDS.get(kind)(**kwargs)


def _make_hf(**kwargs: Any) -> LLM:
    """An :class:`HFBackend` around a loaded ``model``/``tokenizer``, or loaded by name."""
    if "model" in kwargs or "tokenizer" in kwargs:
        return HFBackend(**kwargs)
    return HFBackend.from_pretrained(**kwargs)


register_backend("hf", _make_hf)
register_backend("openai", OpenAIBackend)
register_backend("scripted", ScriptedBackend)
register_backend("simulated", make_simulated)  # a SIMULATED executor, not a model

__all__ = ["BACKENDS", "BackendFactory", "available_backends", "make_backend", "register_backend"]
