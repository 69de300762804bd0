"""Executor backend for any OpenAI-compatible chat-completions server (vLLM, llama.cpp, Ollama).

Built on the ``openai`` SDK: its client (connection pool, authentication, timeouts), its error
classes and its typed answers. Requests of one ``generate`` call go out concurrently (at most
``concurrency`` in flight, one thread each) through one shared client; results keep request
order. Timeouts, connection errors, HTTP 429 (``Retry-After`` honoured) and 5xx are retried with
exponential backoff and jitter; other 4xx answers are not retried. Nothing raises per request: a
failure becomes a result with ``error`` (the interpreter makes the run unscorable).

The retries are a small loop around the SDK call (the SDK's own ``max_retries`` is 0): the SDK's
backoff is fixed (0.5 s doubling to 8 s, 75-100 % jitter, not configurable), and the configured
backoff and retries must hold as configured (the executor fault tests bound each step's wait by
them). With the defaults below the two schedules are the same but for the jitter.

Not handled: streaming, tool calls, ``n`` > 1, and rate limits across processes (each backend
only bounds its own concurrency).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from flowgrpo.configuration import whole_number
from flowgrpo.operators.llm import (
    GenerationRequest,
    GenerationResult,
    decoding_key,
    request_seed,
)

logger = logging.getLogger(__name__)

ENV_BASE_URL = "FLOWGRPO_EXECUTOR_BASE_URL"
ENV_MODEL = "FLOWGRPO_EXECUTOR_MODEL"
ENV_API_KEY = "FLOWGRPO_EXECUTOR_API_KEY"


class _Retryable(Exception):
    """A failure worth another attempt; ``delay`` overrides the backoff (Retry-After)."""

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class _Fatal(Exception):
    """A failure another attempt will not fix (4xx other than 429, unusable answer)."""


class OpenAIBackend:
    """Chat completions over HTTP: ``POST {base_url}/chat/completions`` with the ``openai`` SDK.

    Args:
        base_url: server root including the API prefix (e.g. ``http://localhost:8000/v1``);
            default from ``FLOWGRPO_EXECUTOR_BASE_URL``, then ``OPENAI_BASE_URL``.
        model: model name sent to the server; default from ``FLOWGRPO_EXECUTOR_MODEL``.
        api_key: bearer token; default from ``FLOWGRPO_EXECUTOR_API_KEY``, then
            ``OPENAI_API_KEY``; when absent the placeholder ``EMPTY`` is sent (the SDK needs a
            key; servers started without one, as vLLM, llama.cpp and Ollama are by default,
            ignore it).
        max_new_tokens: cap on ``max_tokens`` (the request's own value is used when smaller).
        temperature: used when the request's temperature is 0 (0 = greedy).
        seed: base of the per-request ``seed`` sent with a sampled request
            (:func:`~flowgrpo.operators.llm.request_seed`): vLLM draws reproducibly from it,
            OpenAI on a best-effort basis; a server that ignores it samples unseeded.
        connect_timeout_s / read_timeout_s: per attempt, in seconds.
        max_retries: extra attempts after the first (attempts = max_retries + 1).
        backoff_s / max_backoff_s: the delay before retry i is ``min(max_backoff_s,
            backoff_s * 2**i)``, jittered to between half and all of it.
        concurrency: requests in flight at once.
        max_retry_after_s: cap on a server's ``Retry-After`` delay, in seconds.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        connect_timeout_s: float = 5,
        read_timeout_s: float = 120,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8,
        concurrency: int = 8,
        max_retry_after_s: float = 60,
        seed: int = 0,
    ) -> None:
        self.base_url = _resolve_base_url(base_url)
        self.model = model or os.environ.get(ENV_MODEL) or None
        if not self.model:
            raise ValueError(
                f"no executor model name: pass model=... or set {ENV_MODEL} "
                "(the name the server serves, e.g. Qwen/Qwen2.5-7B-Instruct)"
            )
        self.api_key = api_key or os.environ.get(ENV_API_KEY) or os.environ.get("OPENAI_API_KEY")
        _check_positive(
            max_new_tokens=max_new_tokens, concurrency=concurrency,
            connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
        )  # fmt: skip
        if max_retries < 0 or backoff_s < 0 or max_backoff_s < 0 or temperature < 0:
            raise ValueError("max_retries, backoff_s, max_backoff_s and temperature must be >= 0")
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_timeout_s = float(read_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = int(concurrency)
        self.max_retry_after_s = float(max_retry_after_s)
        self.url = f"{self.base_url}/chat/completions"
        self.settings_key = decoding_key(
            f"openai:{self.base_url}:{self.model}", self.max_new_tokens, self.temperature, self.seed
        )
        self._client: Any = None
        self._lock = threading.Lock()
        self._rng = random.Random()

    # -- lifecycle -------------------------------------------------------------------------

    def _get_client(self) -> Any:
        import openai  # heavy: pydantic and an HTTP client; flowgrpo.operators stays light

        with self._lock:
            if self._client is None:
                timeout = openai.Timeout(
                    self.read_timeout_s, connect=self.connect_timeout_s, pool=None
                )
                self._client = openai.OpenAI(
                    base_url=self.base_url,
                    api_key=self.api_key or "EMPTY",
                    timeout=timeout,
                    max_retries=0,  # the retries are ours: see the module docstring
                )
            return self._client

    def check_server(self) -> None:
        """Ask the server for its model list (``GET {base_url}/models``, one attempt, the
        configured timeouts) before a run loads anything: ``ValueError`` in one line when no
        server answers, or when it does not serve ``model``."""
        import openai  # heavy: see _get_client

        try:
            served = [m.id for m in self._get_client().models.list()]
            if not all(isinstance(name, str) for name in served):
                raise TypeError(f"model ids {served[:3]!r}... are not all names")
        except openai.APIError as exc:
            raise ValueError(
                f"executor.base_url {self.base_url}: GET /models got no model list (timeout "
                f"{self.read_timeout_s:g} s): {_server_message(exc)}; start the "
                "OpenAI-compatible server or fix executor.base_url"
            ) from None
        except (AttributeError, TypeError, KeyError, ValueError) as exc:  # the SDK on a non-list
            raise ValueError(
                f"executor.base_url {self.base_url}: GET /models answered, but not with an "
                f"OpenAI model list ({type(exc).__name__}: {str(exc)[:120]}); point "
                "executor.base_url at the server's OpenAI root (usually ending in /v1)"
            ) from None
        if served and self.model not in served:
            raise ValueError(
                f"executor.model {self.model!r} is not served at {self.base_url} (it serves: "
                f"{', '.join(served[:10])}); set executor.model to one of them"
            )

    def close(self) -> None:
        """Close the HTTP connection pool (a later ``generate`` opens a new one)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- generation ------------------------------------------------------------------------

    @property
    def repeats_differ(self) -> bool:
        """Repeated runs of one workflow (``rollout.executions``) differ only when sampling."""
        return self.temperature > 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; at most ``concurrency`` requests in flight."""
        if not requests:
            return []
        client = self._get_client()
        if len(requests) == 1:
            return [self._complete(client, requests[0])]
        workers = min(self.concurrency, len(requests))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="executor-http") as pool:
            return list(pool.map(lambda r: self._complete(client, r), requests))

    def _payload(self, request: GenerationRequest) -> dict[str, Any]:
        temperature = request.temperature if request.temperature > 0 else self.temperature
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": min(int(request.max_new_tokens), self.max_new_tokens),
            "temperature": temperature,
        }
        if temperature > 0:  # the repeats of a workflow draw afresh, a rerun draws the same
            payload["seed"] = request_seed(self.seed, request)
        return payload

    def _complete(self, client: Any, request: GenerationRequest) -> GenerationResult:
        """Send one request with retries; never raises."""
        started = time.perf_counter()
        attempts = self.max_retries + 1
        last_error = "no attempt made"
        try:
            payload = self._payload(request)
        except Exception as exc:
            return GenerationResult("", error=f"invalid request: {exc}")
        for attempt in range(attempts):
            try:
                text, prompt_tokens, completion_tokens = self._attempt(client, payload)
            except _Fatal as exc:
                return GenerationResult("", seconds=time.perf_counter() - started, error=str(exc))
            except _Retryable as exc:
                last_error = str(exc)
                if attempt + 1 < attempts:
                    delay = self._delay(attempt, exc.delay)
                    logger.info(
                        "executor request attempt %d/%d failed (%s); retrying in %.2f s",
                        attempt + 1, attempts, last_error, delay,
                    )  # fmt: skip
                    time.sleep(delay)
                continue
            seconds = time.perf_counter() - started
            return GenerationResult(
                text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                seconds=seconds,
            )  # fmt: skip
        message = (
            f"executor server at {self.url} failed after {attempts} attempts: "
            f"last error {last_error}"
        )
        logger.warning(message)
        return GenerationResult("", seconds=time.perf_counter() - started, error=message)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after_s)
        base = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        return base / 2 + self._rng.uniform(0, base / 2)

    def _attempt(self, client: Any, payload: dict[str, Any]) -> tuple[str, int, int]:
        """One SDK call: (text, prompt_tokens, completion_tokens), or raise _Retryable / _Fatal."""
        import openai  # heavy: see _get_client

        try:
            completion = client.chat.completions.create(**payload)
        except openai.APITimeoutError as exc:  # before APIConnectionError: it is one
            raise _Retryable(f"timeout ({type(exc.__cause__).__name__}): {exc}") from exc
        except openai.APIConnectionError as exc:
            cause = type(exc.__cause__).__name__
            raise _Retryable(f"connection error ({cause}): {exc.__cause__ or exc}") from exc
        except openai.RateLimitError as exc:
            delay = _parse_retry_after(exc.response.headers.get("retry-after"))
            raise _Retryable(f"HTTP 429 (rate limited): {_server_message(exc)}", delay) from exc
        except openai.InternalServerError as exc:
            raise _Retryable(f"HTTP {exc.status_code}: {_server_message(exc)}") from exc
        except openai.APIStatusError as exc:
            raise _Fatal(
                f"executor server at {self.url} rejected the request (HTTP {exc.status_code}): "
                f"{_server_message(exc)}"
            ) from exc
        except json.JSONDecodeError as exc:  # a JSON content type, but a body that is not
            raise _Fatal(f"{self._unusable}: the body is not JSON ({exc})") from None
        except Exception as exc:  # anything else the SDK raises: not worth retrying
            raise _Fatal(f"{self._unusable}: {type(exc).__name__}: {exc}") from exc
        return self._read_answer(completion)

    @property
    def _unusable(self) -> str:
        return f"executor server at {self.url} returned an unusable answer"

    def _read_answer(self, completion: Any) -> tuple[str, int, int]:
        where = self._unusable
        if isinstance(completion, str):  # the SDK hands back a body that is not JSON as text
            raise _Fatal(f"{where}: the body is not JSON: {completion[:200]!r}")
        try:
            text = completion.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            body = str(completion.to_dict() if hasattr(completion, "to_dict") else completion)
            raise _Fatal(f"{where}: no choices[0].message.content in {body[:200]}") from None
        if not isinstance(text, str):
            raise _Fatal(f"{where}: choices[0].message.content is {type(text).__name__}, not text")
        usage = getattr(completion, "usage", None)
        return (
            text,
            _as_int(getattr(usage, "prompt_tokens", None)),
            _as_int(getattr(usage, "completion_tokens", None)),
        )


def _resolve_base_url(base_url: str | None) -> str:
    url = base_url or os.environ.get(ENV_BASE_URL) or os.environ.get("OPENAI_BASE_URL")
    if not url:
        raise ValueError(
            f"no executor server URL: pass base_url=... or set {ENV_BASE_URL} "
            "(e.g. http://localhost:8000/v1)"
        )
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"executor base_url must start with http:// or https://, got {url!r}")
    return url.rstrip("/")


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta seconds or HTTP date); None when absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _server_message(exc: Any) -> str:
    """The server's error message (OpenAI ``{"error": {"message": ...}}``), else the SDK's, as
    one line of at most 300 characters: an HTML error page is reduced to its text."""
    body = exc.body  # the SDK has already unwrapped {"error": ...}
    if isinstance(body, dict) and body.get("message"):
        return _one_line(str(body["message"]))
    return _one_line(body if isinstance(body, str) and body else str(exc.message))


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` without HTML tags and line breaks, cut at ``limit`` characters."""
    if "<" in text and ">" in text:
        text = re.sub(r"<(script|style)\b.*?</\1>|<[^>]*>", " ", text, flags=re.S | re.I)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_int(value: Any) -> int:
    """A token count the server reported; 0 (not reported) for anything that is not a count,
    a negative number included (the cost reward adds these up)."""
    return value if whole_number(value) and value >= 0 else 0
