"""Executor backend for any OpenAI-compatible chat-completions server (vLLM, llama.cpp, Ollama).

Requests of one ``generate`` call go out concurrently (at most ``concurrency`` in flight) over
one shared ``httpx.Client``; results keep request order. Timeouts, connection errors, HTTP 429
(``Retry-After`` honoured) and 5xx are retried with exponential backoff and jitter; other 4xx
answers are not retried. Nothing raises per request: a failure becomes a result with ``error``.

Not handled: streaming, tool calls, ``n`` > 1, and rate limits across processes (each backend
only bounds its own concurrency).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from flowgrpo.operators.llm import GenerationRequest, GenerationResult

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
    """A failure another attempt will not fix (4xx other than 429, malformed answer)."""


class OpenAIBackend:
    """Chat completions over HTTP: ``POST {base_url}/chat/completions``.

    Args:
        base_url: server root including the API prefix (e.g. ``http://localhost:8000/v1``);
            default from ``FLOWGRPO_EXECUTOR_BASE_URL``, then ``OPENAI_BASE_URL``.
        model: model name sent to the server; default from ``FLOWGRPO_EXECUTOR_MODEL``.
        api_key: bearer token; default from ``FLOWGRPO_EXECUTOR_API_KEY``, then
            ``OPENAI_API_KEY``; none is sent when absent.
        max_new_tokens: cap on ``max_tokens`` (the request's own value is used when smaller).
        temperature: used when the request's temperature is 0 (0 = greedy).
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
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_timeout_s = float(read_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = int(concurrency)
        self.max_retry_after_s = float(max_retry_after_s)
        self.url = f"{self.base_url}/chat/completions"
        self.settings_key = (
            f"openai:{self.base_url}:{self.model}:max_new_tokens={self.max_new_tokens}"
            f":temperature={self.temperature:g}"
        )
        self._client: Any = None
        self._lock = threading.Lock()
        self._rng = random.Random()

    # -- lifecycle -------------------------------------------------------------------------

    def _get_client(self) -> Any:
        import httpx  # heavy: imported on first request so flowgrpo.operators.backends stays light

        with self._lock:
            if self._client is None:
                timeout = httpx.Timeout(
                    self.read_timeout_s, connect=self.connect_timeout_s, pool=None
                )
                limits = httpx.Limits(
                    max_connections=self.concurrency, max_keepalive_connections=self.concurrency
                )
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                self._client = httpx.Client(timeout=timeout, limits=limits, headers=headers)
            return self._client

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
        return {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": min(int(request.max_new_tokens), self.max_new_tokens),
            "temperature": temperature,
        }

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
                result = self._attempt(client, payload)
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
            except Exception as exc:  # e.g. httpx.DecodingError: not worth retrying
                error = f"executor request to {self.url} failed: {type(exc).__name__}: {exc}"
                return GenerationResult("", seconds=time.perf_counter() - started, error=error)
            seconds = time.perf_counter() - started
            return GenerationResult(
                result[0], prompt_tokens=result[1], completion_tokens=result[2], seconds=seconds
            )
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
        """One POST: (text, prompt_tokens, completion_tokens), or raise _Retryable / _Fatal."""
        import httpx  # heavy: see _get_client

        try:
            response = client.post(self.url, json=payload)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout ({type(exc).__name__}): {exc}") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"connection error ({type(exc).__name__}): {exc}") from exc
        status = response.status_code
        if status == 429:
            delay = _parse_retry_after(response.headers.get("retry-after"))
            raise _Retryable(f"HTTP 429 (rate limited): {_server_message(response)}", delay)
        if status >= 500:
            raise _Retryable(f"HTTP {status}: {_server_message(response)}")
        if status >= 400:
            raise _Fatal(
                f"executor server at {self.url} rejected the request (HTTP {status}): "
                f"{_server_message(response)}"
            )
        return self._parse_answer(response)

    def _parse_answer(self, response: Any) -> tuple[str, int, int]:
        where = f"executor server at {self.url} returned an unusable answer"
        try:
            body = response.json()
        except ValueError:
            raise _Fatal(f"{where}: the body is not JSON: {response.text[:200]!r}") from None
        try:
            text = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise _Fatal(f"{where}: no choices[0].message.content in {str(body)[:200]}") from None
        if not isinstance(text, str):
            raise _Fatal(f"{where}: choices[0].message.content is {type(text).__name__}, not text")
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        return text, _as_int(usage.get("prompt_tokens")), _as_int(usage.get("completion_tokens"))


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


def _server_message(response: Any) -> str:
    """The server's error message (OpenAI ``{"error": {"message": ...}}`` or the raw body)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if isinstance(error, str):
            return error[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return json.dumps(body)[:500]


def _as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
