"""A local OpenAI-compatible chat server whose failures are scripted, for executor-fault tests.

``FaultServer`` listens on 127.0.0.1 (a free port) and answers ``POST /v1/chat/completions``
according to its current ``mode`` (switch it at any time with :meth:`FaultServer.set_mode`),
and ``GET /v1/models`` with ``models`` whatever the mode (not counted as a request):

=============  ===============================================================================
``ok``         200 with one choice whose content is ``answer(body)``
``500``        HTTP 500 with an OpenAI-style error body
``429``        HTTP 429 with ``Retry-After: retry_after_s``
``bad_json``   200 whose body is not JSON
``no_choices`` 200 with ``{"choices": []}``
``hang``       no answer for ``hang_s`` seconds (past the client's timeout), then a good one
``drop``       200 headers promising a body, a few bytes of it, then the connection closes
``down``       not listening at all (connection refused); leaving ``down`` listens again on
               the SAME port, as a restarted server would
=============  ===============================================================================

Bounded: at most ``max_requests`` requests are served (later ones get HTTP 503 and count as
``over_budget``), a timer stops the server after ``lifetime_s`` seconds, and :meth:`close`
(called by the fixtures) releases hanging handlers and stops it. Every request is recorded as
``(mode, monotonic time)`` in :attr:`requests`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "500", "429", "bad_json", "no_choices", "hang", "drop", "down")


def ok_body(text: str) -> dict:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hanging handler must not delay going down
    allow_reuse_address = True


class FaultServer:
    """See the module docstring."""

    def __init__(
        self,
        answer: Callable[[dict], str] = lambda body: "5",
        hang_s: float = 5.0,
        retry_after_s: float = 0.1,
        max_requests: int = 2000,
        lifetime_s: float = 300.0,
        models: tuple[str, ...] = (),
    ) -> None:
        self.answer, self.hang_s, self.retry_after_s = answer, hang_s, retry_after_s
        self.models = models  # what GET /v1/models lists (empty: the check accepts any name)
        self.max_requests = max_requests
        self.mode = "ok"
        self.requests: list[tuple[str, float]] = []
        self.over_budget = 0
        self.lock = threading.Lock()
        self.release = threading.Event()  # set on close: hanging handlers return at once
        self.port = 0
        self.httpd: _Server | None = None
        self.thread: threading.Thread | None = None
        self._listen()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.timer = threading.Timer(lifetime_s, self.close)
        self.timer.daemon = True
        self.timer.start()

    # -- listening -------------------------------------------------------------------------

    def _listen(self) -> None:
        self.httpd = _Server(("127.0.0.1", self.port), self._handler())
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.02,), daemon=True, name="fault-server"
        )
        self.thread.start()

    def _stop_listening(self) -> None:
        httpd, self.httpd = self.httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def set_mode(self, mode: str) -> None:
        """Switch behaviour; ``down`` closes the listening socket, leaving it reopens it."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        with self.lock:
            previous, self.mode = self.mode, mode
        if mode == "down" and previous != "down":
            self._stop_listening()
        elif previous == "down" and mode != "down":
            self._listen()

    def close(self) -> None:
        self.release.set()
        self.timer.cancel()
        self._stop_listening()

    def count(self, mode: str) -> int:
        with self.lock:
            return sum(1 for m, _ in self.requests if m == mode)

    def times(self, mode: str) -> list[float]:
        with self.lock:
            return [t for m, t in self.requests if m == mode]

    # -- answering -------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_GET(self) -> None:  # GET /v1/models: the run's pre-flight check; not counted
                served = [{"id": name, "object": "model"} for name in server.models]
                data = json.dumps({"object": "list", "data": served}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    mode = server.mode
                    if len(server.requests) >= server.max_requests:
                        server.over_budget += 1
                        mode = "over_budget"
                    else:
                        server.requests.append((mode, time.monotonic()))
                try:
                    server._reply(self, mode, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (its read timeout)

        return Handler

    def _reply(self, handler: BaseHTTPRequestHandler, mode: str, body: dict) -> None:
        if mode == "hang":
            self.release.wait(self.hang_s)
            mode = "ok"
        if mode == "drop":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", "4096")
            handler.end_headers()
            handler.wfile.write(b'{"choices": [{"mess')
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_RDWR)
            handler.close_connection = True
            return
        status, headers, payload = 200, {}, None
        if mode == "ok":
            payload = json.dumps(ok_body(self.answer(body)))
        elif mode == "500":
            status, payload = 500, json.dumps({"error": {"message": "scripted internal error"}})
        elif mode == "429":
            status, headers = 429, {"Retry-After": f"{self.retry_after_s:g}"}
            payload = json.dumps({"error": {"message": "scripted rate limit"}})
        elif mode == "bad_json":
            payload = "<html>502 Bad Gateway</html>"
        elif mode == "no_choices":
            payload = json.dumps({"choices": [], "usage": {}})
        else:  # over_budget
            status, payload = 503, json.dumps({"error": {"message": "fault server budget spent"}})
        data = payload.encode()
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
