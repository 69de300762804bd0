"""The OpenAI-compatible HTTP backend against a local fake server: retries, errors, limits."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flowgrpo.operators.backends import (
    make_backend,
)
from flowgrpo.operators.llm import GenerationRequest, RequestContext, request_seed, user


def req(text: str, max_new_tokens: int = 256, temperature: float = 0.0) -> GenerationRequest:
    return GenerationRequest(user(text), max_new_tokens=max_new_tokens, temperature=temperature)


# --------------------------------------------------------------------------- OpenAI backend


@dataclass
class Reply:
    status: int = 200
    body: object = None  # dict -> JSON; str -> raw text
    headers: dict = field(default_factory=dict)
    sleep: float = 0.0


def ok_body(text: str = "answer") -> dict:
    return {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }


class FakeServer:
    """A local chat-completions server whose replies come from ``script(n, body)``."""

    def __init__(self, script: Callable[[int, dict], Reply]) -> None:
        self.script = script
        self.count = 0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    n = server.count
                    server.count += 1
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                counted = True
                try:
                    reply = server.script(n, body)
                    time.sleep(reply.sleep)
                    raw = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                    data = raw.encode()
                    # Stop counting before the reply goes out: once the client has it, it may
                    # send its next request before this thread reaches ``finally``.
                    with server.lock:
                        server.in_flight -= 1
                        counted = False
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (read timeout)
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int, dict], Reply]], FakeServer]]:
    servers: list[FakeServer] = []

    def start(script: Callable[[int, dict], Reply]) -> FakeServer:
        servers.append(FakeServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def backend_for(server: FakeServer, **kwargs):
    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    options = {"model": "m", "backoff_s": 0.001, "max_backoff_s": 0.01, **kwargs}
    return OpenAIBackend(base_url=server.url, **options)


@pytest.mark.parametrize("count", [-5, 2.5, "7", None, True])
def test_a_token_count_that_is_no_count_reads_as_not_reported(serve, count):
    body = {**ok_body(), "usage": {"prompt_tokens": count, "completion_tokens": count}}
    server = serve(lambda n, _: Reply(body=body))
    with backend_for(server) as backend:
        result = backend.generate([req("hello")])[0]
    assert result.ok and (result.prompt_tokens, result.completion_tokens) == (0, 0)


def test_openai_success_sends_payload_and_reads_usage(serve):
    server = serve(lambda n, body: Reply(body=ok_body(f"echo {body['messages'][-1]['content']}")))
    with backend_for(server, api_key="sk-test", max_new_tokens=50, temperature=0.2) as backend:
        result = backend.generate([req("hello", max_new_tokens=20)])[0]
    assert result.ok and result.text == "echo hello"
    assert (result.prompt_tokens, result.completion_tokens) == (11, 3)
    body = server.bodies[0]
    assert body["model"] == "m" and body["max_tokens"] == 20 and body["temperature"] == 0.2
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_a_sampled_request_sends_its_own_seed_and_a_greedy_one_none(serve):
    from types import SimpleNamespace

    server = serve(lambda n, body: Reply(body=ok_body("x")))
    problem = SimpleNamespace(id="p1")
    requests = [
        GenerationRequest(user("q"), context=RequestContext("Custom", problem, 0, repeat))
        for repeat in (0, 1)
    ]
    with backend_for(server, temperature=0.8, seed=5) as backend:
        assert all(r.ok for r in backend.generate(requests))
    with backend_for(server) as greedy:
        assert greedy.generate(requests[:1])[0].ok
    sent = sorted(body.get("seed") for body in server.bodies[:2])
    assert sent == sorted(request_seed(5, r) for r in requests) and sent[0] != sent[1]
    assert "seed" not in server.bodies[2]  # greedy: no seed, as before
    assert backend.settings_key.endswith(":temperature=0.8:seed=5")


def test_openai_retries_500_then_succeeds(serve):
    server = serve(lambda n, _b: Reply(500, {"error": {"message": "busy"}}) if n < 2 else Reply(
        body=ok_body("fine")))  # fmt: skip
    result = backend_for(server).generate([req("q")])[0]
    assert result.ok and result.text == "fine"
    assert server.count == 3


def test_openai_honours_retry_after_on_429(serve):
    server = serve(
        lambda n, _b: (
            Reply(429, {"error": "slow down"}, {"Retry-After": "0.3"})
            if n == 0
            else Reply(body=ok_body())
        )
    )
    started = time.perf_counter()
    result = backend_for(server).generate([req("q")])[0]
    assert result.ok and server.count == 2
    assert time.perf_counter() - started >= 0.3


def test_openai_always_500_gives_clear_error_after_max_retries(serve):
    server = serve(lambda _n, _b: Reply(503, {"error": {"message": "overloaded"}}))
    backend = backend_for(server, max_retries=3)
    result = backend.generate([req("q")])[0]
    assert not result.ok and result.text == ""
    assert server.count == 4
    assert f"executor server at {server.url}/chat/completions failed after 4 attempts" in (
        result.error
    )
    assert "HTTP 503" in result.error and "overloaded" in result.error


def test_openai_400_is_not_retried(serve):
    server = serve(lambda _n, _b: Reply(400, {"error": {"message": "max_tokens too large"}}))
    result = backend_for(server).generate([req("q")])[0]
    assert not result.ok and server.count == 1
    assert "HTTP 400" in result.error and "max_tokens too large" in result.error


def test_an_html_error_page_becomes_one_short_line(serve):
    page = (
        "<!DOCTYPE html>\n<html><head><title>404 Not Found</title><style>h1 {color: red}"
        "</style></head>\n<body>\n<h1>Not Found</h1>\n<p>The requested URL was not found on "
        "this server.</p>\n" + "<p>padding</p>\n" * 200 + "</body></html>\n"
    )
    server = serve(lambda _n, _b: Reply(404, page, {"Content-Type": "text/html"}))
    result = backend_for(server).generate([req("q")])[0]
    assert not result.ok and "\n" not in result.error and "<" not in result.error
    assert "404 Not Found Not Found The requested URL was not found" in result.error
    assert "color" not in result.error and len(result.error) < 500


@pytest.mark.parametrize(
    ("body", "expected"),
    [("this is not json", "not JSON"), ({"choices": []}, "no choices[0].message.content")],
)
def test_openai_malformed_answer_is_an_error_result(serve, body, expected):
    server = serve(lambda _n, _b: Reply(200, body))
    result = backend_for(server).generate([req("q")])[0]
    assert not result.ok and expected in result.error
    assert server.count == 1


def test_openai_read_timeout_is_retried_then_reported(serve):
    server = serve(lambda _n, _b: Reply(body=ok_body(), sleep=1.0))
    backend = backend_for(server, read_timeout_s=0.2, max_retries=1)
    started = time.perf_counter()
    result = backend.generate([req("q")])[0]
    assert time.perf_counter() - started < 0.9
    assert not result.ok and server.count == 2
    assert "failed after 2 attempts" in result.error and "timeout" in result.error.lower()


def test_openai_connection_refused_is_an_error_result():
    import socket

    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIBackend(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=0.001
    )
    result = backend.generate([req("q")])[0]
    assert not result.ok and "failed after 2 attempts" in result.error
    assert "connection error" in result.error


def test_openai_concurrency_is_bounded_and_order_kept(serve):
    server = serve(
        lambda _n, body: Reply(body=ok_body(body["messages"][-1]["content"]), sleep=0.15)
    )
    backend = backend_for(server, concurrency=3)
    requests = [req(f"q{i}") for i in range(7)]
    results = backend.generate(requests)
    assert [r.text for r in results] == [f"q{i}" for i in range(7)]
    assert 1 < server.max_in_flight <= 3


def test_openai_configuration_from_env(monkeypatch, serve):
    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    for name in ("FLOWGRPO_EXECUTOR_BASE_URL", "FLOWGRPO_EXECUTOR_MODEL",
                 "FLOWGRPO_EXECUTOR_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="FLOWGRPO_EXECUTOR_BASE_URL"):
        OpenAIBackend(model="m")
    with pytest.raises(ValueError, match="FLOWGRPO_EXECUTOR_MODEL"):
        OpenAIBackend(base_url="http://127.0.0.1:1/v1")
    server = serve(lambda _n, _b: Reply(body=ok_body("env")))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
    monkeypatch.setenv("FLOWGRPO_EXECUTOR_MODEL", "served-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    backend = make_backend("openai")
    assert backend.generate([req("q")])[0].text == "env"
    assert server.bodies[0]["model"] == "served-model"
    assert server.headers[0]["Authorization"] == "Bearer sk-env"
    assert (
        backend.settings_key == f"openai:{server.url}:served-model:max_new_tokens=256:temperature=0"
    )
    monkeypatch.setenv("FLOWGRPO_EXECUTOR_BASE_URL", "localhost:8000")
    with pytest.raises(ValueError, match="http://"):
        OpenAIBackend()


def test_openai_backend_imports_the_sdk_on_first_use_only():
    code = (
        "import sys\n"
        "from flowgrpo.operators.backends import make_backend\n"
        "backend = make_backend('openai', base_url='http://127.0.0.1:1/v1', model='m')\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_openai_retries_follow_the_configured_backoff_not_the_sdk_default(serve, monkeypatch):
    """Delay before retry i: min(max_backoff_s, backoff_s * 2**i), jittered to [1/2, 1] of it.
    The SDK's own schedule (0.5 s, then 1 s, 75-100 %) would make both gaps far longer."""
    for name in ("FLOWGRPO_EXECUTOR_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    seen: list[float] = []

    def script(n, _body):
        seen.append(time.monotonic())
        return Reply(500, {"error": {"message": "busy"}}) if n < 2 else Reply(body=ok_body("ok"))

    server = serve(script)
    backend = backend_for(server, backoff_s=0.1, max_backoff_s=10.0, max_retries=2)
    assert backend.generate([req("q")])[0].text == "ok"
    first, second = seen[1] - seen[0], seen[2] - seen[1]
    assert 0.05 <= first < 0.3 and 0.1 <= second < 0.35, (first, second)
    assert server.headers[0]["Authorization"] == "Bearer EMPTY"  # no key: the placeholder


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/html", "<html>a proxy's page</html>"),
        ("application/json", "[1, 2]"),
        ("application/json", '{"data": [{"name": "no id"}]}'),
        ("application/json", '{"data": 5}'),
    ],
)
def test_a_model_list_that_is_not_one_is_a_one_line_error(content_type, body):
    from http.server import ThreadingHTTPServer

    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    class Models(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:
            pass

        def do_GET(self) -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        with pytest.raises(ValueError, match="not with an OpenAI model list") as caught:
            OpenAIBackend(base_url=url, model="m").check_server()
        assert "\n" not in str(caught.value) and url in str(caught.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
