"""End to end over HTTP against a real OpenAI-compatible server that CI installs from wheels:
``transformers serve`` (FastAPI + uvicorn, the ``transformers[serving]`` extra in flowgrpo's
``dev`` extra) serving the embedded SmolLM2-135M, exported by ``flowgrpo export --base default``
(the server finds no architecture in the GGUF file's own config, so it serves the folder).

The executor path of production (``executor.kind: openai``) is exercised as a user would:
``flowgrpo train --dry-run``'s probe, two training steps of a tiny run, ``flowgrpo eval`` of
that run and ``flowgrpo run``. Not skipped: a missing server package is a failure (issue 43).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main

pytestmark = pytest.mark.slow

SERVER_MODULES = ("fastapi", "uvicorn", "openai", "rich")
START_TIMEOUT_S = 240


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"transformers serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    pytest.fail(f"transformers serve did not answer within {START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base_url, model name, log file) of ``transformers serve`` on the exported SmolLM2
    folder; the log has one access line per request."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    assert not missing, f"{missing} not installed: pip install -e '.[dev]' (transformers[serving])"
    root = tmp_path_factory.mktemp("serve")
    folder = root / "smollm2"
    result = invoke("export", "--base", "default", "--merge", folder)
    assert result.exit_code == 0, result.output
    port, log = _free_port(), root / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", "from transformers.cli.transformers import main; main()"]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu", "--log-level", "info"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_for(url, proc, log)
        yield url, str(folder), log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def executor_settings(server) -> list[str]:
    url, model, _ = server
    return ["executor.kind=openai", f"executor.base_url={url}", f"executor.model={model}"]


def chat_requests(server) -> int:
    """Chat requests the server has answered so far (its access log)."""
    return server[2].read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')


def sets(settings: list[str]) -> list[str]:
    return [x for s in settings for x in ("--set", s)]


def test_the_servers_model_list_has_the_exported_model(server):
    url, model, _ = server
    listed = [m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]]
    assert model in listed


def test_dry_run_probes_the_server(server, tmp_path):
    result = invoke(
        "train", "--config", "configs/tiny.yaml", "--dry-run", "--output-dir", tmp_path / "run",
        *sets(executor_settings(server)),
    )  # fmt: skip
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def trained_run(server, tmp_path_factory):
    """A two-step run of configs/tiny.yaml whose executor is the server: (run dir, result).
    Groups of 2 (of the config's 8): the path over HTTP is the same with a quarter of the
    server's calls (each a SmolLM2 generation on one CPU thread)."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    result = invoke(
        "train", "--config", "configs/tiny.yaml", "--max-steps", 2, "--output-dir", run_dir,
        *sets([*executor_settings(server), "rollout.problems_per_step=1",
               "rollout.num_generations=2", "rollout.allow_small_groups=true",
               "executor.max_new_tokens=16"]),
    )  # fmt: skip
    return run_dir, result


def test_two_training_steps_over_http(server, trained_run):
    run_dir, result = trained_run
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    # every valid workflow ran on the server: answers came back, none unscorable
    assert all(line["validity_rate"] > 0 and line["unscorable_rate"] == 0 for line in lines)
    assert sum(line["executor_calls"] for line in lines) > 0
    assert chat_requests(server) >= sum(line["executor_calls"] for line in lines)


def test_eval_of_the_run_asks_the_runs_server(server, trained_run, tmp_path):
    run_dir, _ = trained_run
    out, before = tmp_path / "eval.json", chat_requests(server)
    result = invoke("eval", "--adapter", run_dir / "checkpoint-2", "--n", 2, "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["problems"] == 2 and report["unscorable"] == 0
    # evaluated as trained: the run's executor, this server, answered the eval's calls
    assert report["executor_calls_per_problem"] > 0 and chat_requests(server) > before


def test_flowgrpo_run_over_http(server):
    before = chat_requests(server)
    result = invoke(
        "run", "Custom -> Format", "--task", "arithmetic:easy", "--n", 2, "--executor", "openai",
        "--base-url", server[0], "--model", server[1], "--executor-max-new-tokens", 16,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "[Custom/llm" in result.output and "0 unscorable" in result.output
    assert chat_requests(server) >= before + 2  # Custom and Format, per problem
