"""THE one function that builds an executor and its limits from an ``executor:`` section.

:func:`build_executor` turns an :class:`~flowgrpo.operators.executor.section.ExecutorConfig`
into the executor backend and the interpreter's
:class:`~flowgrpo.operators.interpreter.Limits`; training (``trainer.loop.setup``),
``flowgrpo run``, ``flowgrpo eval`` and the scripts all call it, so an option means the same
everywhere (``tests/test_one_builder.py`` keeps this the only module that constructs a backend or
``Limits``). :func:`executor_limits` is its half for the limits alone.

Kinds: ``shared`` (the policy's own weights with the adapter disabled: pass the policy),
``hf`` (a separate model loaded by name), ``openai`` (an OpenAI-compatible server) and any kind
in :data:`~flowgrpo.operators.backends.BACKENDS`: one a plugin registered, a built-in plugin
(``flowgrpo.operators.backends.<kind>``, imported on first use) or a dotted path
``pkg.mod:make``. Such a factory is called ``make(section=ExecutorConfig)`` when it has a
parameter named ``section``, else ``make(max_new_tokens=..., [base_url=..., model=...])`` with
the fields that are set.
"""

from __future__ import annotations

import inspect
from typing import Any

from flowgrpo.operators.backends import backend_check, find_backend, make_backend
from flowgrpo.operators.executor.section import BUILT_IN_KINDS, ExecutorConfig
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.llm import LLM
from flowgrpo.operators.ops import OpSettings

__all__ = [
    "BUILT_IN_KINDS",
    "build_executor",
    "check_executor",
    "executor_limits",
    "probe_executor",
]


def check_executor(section: ExecutorConfig, task: str | None = None) -> tuple[str, ...]:
    """Look ``section.kind`` up without building anything (a built-in plugin of that kind is
    imported now, registering its backend and hooks) and run the kind's own ``check`` on the
    section's ``options`` and on ``task`` (a task spec; None: not checked); the backend kinds it
    names in ``BACKENDS`` (empty for shared, hf and openai). ``ValueError`` naming the field."""
    if section.kind in BUILT_IN_KINDS:
        return ()
    try:
        factory = find_backend(section.kind)
    except ValueError as exc:
        raise ValueError(f"executor.kind: {exc}; or {', '.join(BUILT_IN_KINDS)}") from None
    try:
        _bind(factory, section)
    except TypeError as exc:
        raise ValueError(
            f"executor.kind: the {section.kind!r} backend cannot be built from the executor "
            f"section ({exc}): it is built in Python (make_backend); choose "
            f"{', '.join(BUILT_IN_KINDS)} or a kind made for configs"
        ) from None
    check = backend_check(section.kind)
    if check is not None:
        check(section, task)
    elif section.options:
        raise ValueError(
            f"executor.options: executor kind {section.kind!r} registered no check of options, "
            "so it takes none; remove them or register the kind with check="
        )
    return (section.kind,)


def executor_limits(section: ExecutorConfig, ops: OpSettings | None = None) -> Limits:
    """The interpreter's per-workflow limits of ``section``: ``max_calls`` and
    ``max_seconds``; ``ops``: the operators' own settings (default :class:`OpSettings`)."""
    return Limits(
        max_llm_calls=section.max_calls,
        max_seconds=section.max_seconds,
        ops=ops if ops is not None else OpSettings(),
    )


def build_executor(
    section: ExecutorConfig,
    model: Any = None,
    tokenizer: Any = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    ops: OpSettings | None = None,
) -> tuple[LLM, Limits]:
    """(executor backend, interpreter limits) of ``section``.

    Args:
        section: the executor section (``TrainConfig.executor``, or one the CLI built).
        model / tokenizer: kind shared only: the model whose weights it runs (the policy, its
            adapter disabled; or a base model) and its tokenizer.
        device / dtype: kind hf only: where and in which precision the model is loaded.
        ops: the operators' own settings in the limits (default :class:`OpSettings`).

    Raises ``ValueError`` naming ``executor.kind`` for an unknown kind or a shared executor
    without a model; a backend's own errors (bad URL, missing package) pass through.
    """
    limits = executor_limits(section, ops)
    kind = section.kind
    if kind == "shared":
        return _shared(section, model, tokenizer), limits
    if kind == "hf":
        llm = make_backend(
            "hf",
            name_or_path=section.model,
            max_new_tokens=section.max_new_tokens,
            temperature=section.temperature,
            seed=section.seed,
            device=device,
            dtype=dtype,
        )
        return llm, limits
    if kind == "openai":
        return make_backend("openai", **_openai_kwargs(section)), limits
    check_executor(section)
    factory = find_backend(kind)
    return factory(**_bind(factory, section).arguments), limits


def _bind(factory: Any, section: ExecutorConfig) -> inspect.BoundArguments:
    """The arguments a plugin backend gets: the whole section when its factory takes
    ``section``, else max_new_tokens, base_url and model (those set). ``TypeError`` when the
    factory's signature does not take them (a backend built in Python, such as scripted)."""
    signature = inspect.signature(factory)
    if "section" in signature.parameters:
        return signature.bind(section=section)
    kwargs: dict[str, Any] = {"max_new_tokens": section.max_new_tokens}
    kwargs |= {"base_url": section.base_url} if section.base_url else {}
    kwargs |= {"model": section.model} if section.model != "default" else {}
    return signature.bind(**kwargs)


def _shared(section: ExecutorConfig, model: Any, tokenizer: Any) -> LLM:
    """Kind shared: the hf backend on ``model``'s weights, its adapter disabled."""
    if model is None or tokenizer is None:
        raise ValueError(
            "executor.kind: shared runs on the policy's weights, and none were given; "
            "use hf (a model of its own) or openai"
        )
    name = getattr(getattr(model, "config", None), "name_or_path", None) or "policy"
    return make_backend(
        "hf",
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=section.max_new_tokens,
        temperature=section.temperature,
        seed=section.seed,
        disable_adapter=True,
        name=f"shared:{name}",
    )


def probe_executor(section: ExecutorConfig) -> None:
    """Check, before any model loads, that the executor of ``section`` can answer: a backend
    kind whose class has ``check_server`` (the OpenAI-compatible one: its model list, with the
    configured timeout) is built and asked; kinds that run a model in-process (hf, shared) are
    not (building them loads weights). ``ValueError`` in one line otherwise."""
    if section.kind in ("hf", "shared"):
        return
    check_executor(section)
    if not hasattr(find_backend(section.kind), "check_server"):
        return
    backend, _ = build_executor(section)
    try:
        backend.check_server()
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def _openai_kwargs(section: ExecutorConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "base_url": section.base_url,
        "max_new_tokens": section.max_new_tokens,
        "read_timeout_s": section.timeout_s,
        "connect_timeout_s": min(5.0, section.timeout_s),
        "max_retries": section.max_retries,
        "backoff_s": section.backoff_s,
        "temperature": section.temperature,
        "seed": section.seed,
    }
    if section.model != "default":
        kwargs["model"] = section.model
    return kwargs
