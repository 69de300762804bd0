"""The ``executor:`` section is honoured the same way by ``train``, ``run`` and ``eval``.

Each command runs one workflow call against the scripted faulty OpenAI-compatible server
(tests/trainer/fault_server.py) in ``hang`` mode: the server answers only after ``HANG_S``
seconds, long after the section's ``timeout_s``. A command that uses the section's timeout and
retries sends exactly ``max_retries + 1`` requests, ``timeout_s`` (plus the backoff) apart, and
gives up long before the server would have answered; one built without them (the drift this
section removed: eval's executor had neither) waits for the answer after one request.
"""

from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner
from fault_server import FaultServer
from trainer_fakes import FREE, VALID, mixed, text_rollout

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop import rollout as rollout_mod
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.policy import wrap_lora

pytestmark = pytest.mark.slow

TIMEOUT_S, RETRIES, BACKOFF_S, HANG_S = 0.4, 2, 0.05, 6.0


@pytest.fixture
def server():
    srv = FaultServer(hang_s=HANG_S, max_requests=50, lifetime_s=120)
    srv.set_mode("hang")
    yield srv
    srv.close()


def section(url: str, kind: str = "openai") -> tuple[str, ...]:
    return (
        f"executor.kind={kind}",
        f"executor.base_url={url}",
        "executor.model=scripted-executor",
        f"executor.timeout_s={TIMEOUT_S}",
        f"executor.max_retries={RETRIES}",
        f"executor.backoff_s={BACKOFF_S}",
    )


def run_dir_with_checkpoint(tmp_path, url, kind="openai"):
    """A run directory (config.yaml with the executor section) and a checkpoint of it."""
    run_dir = tmp_path / "run"
    cfg = load_config(
        "configs/tiny.yaml", (f"logging.output_dir={run_dir}", FREE, *section(url, kind))
    )
    checkpoint = run_dir / "checkpoint-1"
    peft = wrap_lora(build_tiny_model(seed=cfg.optim.seed)[0], cfg.lora)
    peft.save_pretrained(checkpoint / "adapter")
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    save_config(cfg, run_dir / "config.yaml")
    return run_dir, checkpoint


def assert_timeout_and_retries_honoured(server: FaultServer) -> None:
    """One call: max_retries + 1 attempts, each cut at timeout_s, then given up."""
    times = server.times("hang")
    assert len(times) == RETRIES + 1, times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    max_delay = BACKOFF_S * 2**RETRIES  # the longest (un-jittered) retry delay
    assert all(TIMEOUT_S * 0.9 <= gap <= TIMEOUT_S + max_delay + 0.5 for gap in gaps), gaps
    assert times[-1] - times[0] < HANG_S  # gave up long before the server would answer


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_train_honours_the_sections_timeout_and_retries(tmp_path, server, monkeypatch):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed(8, 1)))
    out = tmp_path / "train"
    result = invoke(
        "train", "--config", "configs/tiny.yaml", "--output-dir", out,
        *[x for s in section(server.url) for x in ("--set", s)],
        "--set", "optim.max_steps=1", "--set", "rollout.problems_per_step=1", "--set", FREE,
        "--set", "rollout.dynamic_sampling=false", "--set", "logging.save_every=0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_timeout_and_retries_honoured(server)
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["unscorable_rate"] == pytest.approx(1 / 8)  # the one workflow, not scored 0


def test_run_honours_the_runs_timeout_and_retries(tmp_path, server):
    run_dir, _ = run_dir_with_checkpoint(tmp_path, server.url)
    result = invoke(
        "run", VALID, "--task", "arithmetic", "--n", "1", "--checkpoint", run_dir, "--no-trace"
    )
    assert result.exit_code == 0, result.output
    assert_timeout_and_retries_honoured(server)
    assert "0/1 correct, 1 unscorable" in result.output


@pytest.mark.parametrize("run_kind", ["openai", "shared"])
def test_eval_honours_the_runs_timeout_and_retries(tmp_path, server, monkeypatch, run_kind):
    """The run's own openai executor, and ``--executor openai`` on a run that trained with the
    shared one: either way the section's timeout and retries (the option sets only the kind)."""
    monkeypatch.setattr(rollout_mod, "generate_rollout", text_rollout(lambda g: [VALID]))
    _, checkpoint = run_dir_with_checkpoint(tmp_path, server.url, run_kind)
    options = ("--executor", "openai", "--base-url", server.url) if run_kind == "shared" else ()
    out = tmp_path / "eval.json"
    result = invoke(
        "eval", "--adapter", checkpoint, "--task", "arithmetic", "--n", "1",
        "--max-new-tokens", "40", "--json", out, *options, "--executor-model", "m",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_timeout_and_retries_honoured(server)
    data = json.loads(out.read_text())
    assert data["unscorable"] == 1 and data["validity_rate"] == 1.0
