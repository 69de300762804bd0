"""The executor LLM interface: one small Protocol that every backend implements.

The interpreter only sees :class:`LLM`; it never knows whether it talks to an in-process Hugging
Face model, an OpenAI-compatible server or a scripted table (tests).

A backend never raises for a failed request: it returns a :class:`GenerationResult` with
``error`` set (e.g. the server was still down after the last retry). The interpreter marks the
workflow *unscorable* then, which is different from *wrong*.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Message:
    """One chat message (role: system, user or assistant)."""

    role: str
    content: str


@dataclass(frozen=True)
class RequestContext:
    """Which operator call a request is. A sampling executor (``executor.temperature`` > 0)
    seeds each request from it (:func:`request_seed`), so a run's draws are reproducible and
    the repeats of one workflow draw afresh; the SIMULATED executor keys its draws on it.

    Attributes:
        op: the operator making the call.
        problem: the problem being solved (a :class:`~operators.tasks.base.Problem`).
        call: index of the call among its run's LLM calls, in the order the operators ask
            (0-based; parallel branches in branch order): identical prompts of one run differ.
        repeat: which execution of the same workflow on the same problem this is (0-based;
            ``rollout.executions`` runs each sampled workflow several times): the SIMULATED
            executor draws afresh for each repeat, as a sampling executor LLM would.
    """

    op: str
    problem: Any
    call: int
    repeat: int = 0


@dataclass(frozen=True)
class GenerationRequest:
    """One chat completion to make.

    Attributes:
        messages: the conversation, rendered with the model's chat template by the backend.
        max_new_tokens: bound on generated tokens.
        temperature: 0 means greedy (the executor default).
        context: which operator call this is (set by the operators; None elsewhere). Not part of
            equality: two requests with the same messages and settings are equal.
    """

    messages: tuple[Message, ...]
    max_new_tokens: int = 256
    temperature: float = 0.0
    context: RequestContext | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of one request.

    Attributes:
        text: generated text ("" when ``error`` is set).
        prompt_tokens / completion_tokens: token counts (as reported or counted by the backend).
        seconds: wall time attributed to this request (batch time / batch size when batched).
        error: None on success; otherwise what went wrong, for the trace and logs.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class LLM(Protocol):
    """An executor backend.

    ``settings_key`` identifies everything that changes outputs (model, decoding settings), so
    execution results can be cached by (canonical workflow, problem, settings_key).

    Optional attributes the interpreter and trainer read when present: ``repeats_differ``
    (True when repeated runs of one workflow can answer differently, i.e. the backend samples;
    ``rollout.executions`` warns otherwise) and ``sandbox`` (the runner of the programs the
    backend writes, in place of the process sandbox).
    """

    settings_key: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Answer every request, in order; one result per request, never raising for a request."""
        ...


def decoding_key(
    prefix: str, max_new_tokens: int, temperature: float, seed: int, extra: str = ""
) -> str:
    """The ``settings_key`` of a decoding backend: ``prefix`` (the backend and its model), its
    token budget and temperature, ``extra`` (what else changes its outputs) and, when it
    samples, its seed. A greedy backend's key leaves the seed out, so cache files written
    before executors sampled stay valid."""
    key = f"{prefix}:max_new_tokens={max_new_tokens}:temperature={temperature:g}{extra}"
    return f"{key}:seed={seed}" if temperature > 0 else key


class CountingLLM:
    """An executor backend that counts the requests it passes on: the executor calls a run
    spends (cache hits and identical pairs run once never reach it). Every other attribute is
    the wrapped backend's."""

    def __init__(self, llm: LLM):
        self.llm = llm
        self.requests = 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.requests += len(requests)
        return self.llm.generate(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


def request_seed(base: int, request: GenerationRequest) -> int:
    """The seed of one sampled request: a stable hash (sha256) of ``base`` and the request's
    context (problem id, operator, call index, repeat), in [0, 2**31) as servers accept.

    Equal contexts give equal seeds in every process (no ``hash()`` salt), so a run repeated
    with the same ``executor.seed`` draws the same answers; the repeats of one workflow and
    identical prompts within one run (different ``call``) draw differently. A request without
    a context is seeded from its messages.
    """
    ctx = request.context
    if ctx is not None:
        parts: list = [base, str(getattr(ctx.problem, "id", ctx.problem)), ctx.op]
        parts += [ctx.call, ctx.repeat]
    else:
        parts = [base, [[m.role, m.content] for m in request.messages]]
    digest = hashlib.sha256(json.dumps(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def user(content: str, system: str | None = None) -> tuple[Message, ...]:
    """Messages for a single-turn request."""
    head = (Message("system", system),) if system else ()
    return (*head, Message("user", content))
