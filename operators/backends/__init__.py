"""Executor backends by name: ``make_backend("hf" | "openai" | "scripted", **kwargs)``.

The registry holds factories, not classes, and the built-in factories import their module only
when called: importing this package imports neither torch, transformers nor httpx.

Not handled here: validating the keyword arguments (each backend does that itself and raises a
clear ``ValueError``/``TypeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowgrpo.operators.llm import LLM

BackendFactory = Callable[..., LLM]

_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(kind: str, factory: BackendFactory) -> None:
    """Register ``factory`` under ``kind``; registering a kind twice raises ``ValueError``."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"backend kind must be a non-empty string, got {kind!r}")
    if kind in _REGISTRY:
        raise ValueError(f"executor backend kind {kind!r} is already registered; pick another name")
    _REGISTRY[kind] = factory


def available_backends() -> list[str]:
    """The registered backend kinds, sorted."""
    return sorted(_REGISTRY)


def make_backend(kind: str, **kwargs: Any) -> LLM:
    """Build the executor backend ``kind`` with ``kwargs``.

    Raises ``ValueError`` naming the registered kinds when ``kind`` is unknown.
    """
    try:
        factory = _REGISTRY[kind]
    except KeyError:
        choices = ", ".join(available_backends())
        raise ValueError(f"unknown executor backend {kind!r}; choose one of: {choices}") from None
    return factory(**kwargs)


def _make_hf(**kwargs: Any) -> LLM:
    from flowgrpo.operators.backends.hf import HFBackend

    if "model" in kwargs or "tokenizer" in kwargs:
        return HFBackend(**kwargs)
    return HFBackend.from_pretrained(**kwargs)


def _make_openai(**kwargs: Any) -> LLM:
    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    return OpenAIBackend(**kwargs)


def _make_scripted(**kwargs: Any) -> LLM:
    from flowgrpo.operators.backends.scripted import ScriptedBackend

    return ScriptedBackend(**kwargs)


register_backend("hf", _make_hf)
register_backend("openai", _make_openai)
register_backend("scripted", _make_scripted)

__all__ = ["BackendFactory", "available_backends", "make_backend", "register_backend"]
