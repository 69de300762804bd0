"""Training through executor faults: a real OpenAI-compatible executor client against a local
server that fails in every scripted way (tests/trainer/fault_server.py), one fault per step.

The policy's completions are fixed texts (6 valid workflows, 2 prose per group), so every step
calls the executor; the tiny random model is trained on them. What must hold: the run goes on
to the last step, a failed execution is unscorable (accuracy and cost null, never 0), every
metrics line has ``unscorable_rate``, ``unscorable_high`` fires while the outage lasts, and no
step waits longer than the configured timeouts allow.
"""

from __future__ import annotations

import faulthandler
import json
import statistics

import pytest
import torch
from fault_server import FaultServer
from trainer_fakes import FREE, mixed, text_rollout

from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.trainer import Trainer

pytestmark = pytest.mark.slow

TIMEOUT_S, RETRIES, BACKOFF_S, RETRY_AFTER_S = 0.5, 1, 0.05, 0.1
#: the mode of each step (step i+1 runs under SCHEDULE[i]); "down" then "ok": the server
#: stops listening for a step and comes back on the same port.
SCHEDULE = ("ok", "500", "429", "bad_json", "no_choices", "hang", "drop", "down", "ok")
VALID_PER_GROUP = 6


@pytest.fixture
def deadline():
    """A hard bound on the test: dump the stacks and exit the worker if it runs past it. One
    torch thread meanwhile: on 2 cores shared with other work, two threads spin against each
    other and make a tiny step 10-30 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
    torch.set_num_threads(threads)


@pytest.fixture
def server():
    srv = FaultServer(hang_s=5.0, retry_after_s=RETRY_AFTER_S, max_requests=500, lifetime_s=240)
    yield srv
    srv.close()


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def openai_config(tmp_path, url, *extra):
    return load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={tmp_path}",
            "logging.save_every=0",
            FREE,
            "executor.kind=openai",
            f"executor.base_url={url}",
            "executor.model=scripted-executor",
            f"executor.timeout_s={TIMEOUT_S}",
            f"executor.max_retries={RETRIES}",
            f"executor.backoff_s={BACKOFF_S}",
            *extra,
        ),
    )


def executor_bound_s(cfg) -> float:
    """Longest the executor can take in one step: every call of a run (``executor.max_calls``
    rounds) failing every attempt at the timeout, with the longest retry delay between."""
    r = cfg.executor
    attempts = r.max_retries + 1
    delay = max(r.backoff_s * 2**r.max_retries, RETRY_AFTER_S)
    return r.max_calls * (attempts * r.timeout_s + r.max_retries * delay)


def test_training_goes_on_through_every_executor_fault(tmp_path, monkeypatch, server, deadline):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed(8, VALID_PER_GROUP)))
    cfg = openai_config(tmp_path, server.url, f"optim.max_steps={len(SCHEDULE)}")
    server.set_mode(SCHEDULE[0])

    def next_mode(metrics):
        if metrics["step"] < len(SCHEDULE):
            server.set_mode(SCHEDULE[metrics["step"]])

    result = Trainer(cfg, on_step=next_mode).train()

    assert result.steps == len(SCHEDULE) and result.exit_code == 0
    lines = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["step"] for m in lines] == list(range(1, len(SCHEDULE) + 1))
    assert all("unscorable_rate" in m for m in lines)
    failing = VALID_PER_GROUP / 8
    for mode, m in zip(SCHEDULE, lines):
        assert m["unscorable_rate"] == (0.0 if mode == "ok" else failing), (mode, m)
        assert m["validity_rate"] == failing and m["loss"] is not None
    _check_samples(tmp_path)
    _check_alerts(lines)
    _check_step_times(cfg, lines)
    _check_requests(server)


def _check_samples(run_dir):
    """Failed executions: accuracy and cost null (NaN), never 0; the others are numbers."""
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == len(SCHEDULE) * 2 * 8
    for row in samples:
        mode = SCHEDULE[row["step"] - 1]
        acc, cost = row["rewards"]["accuracy"], row["rewards"]["cost"]
        if not row["valid"]:
            assert acc == 0.0  # prose: not run, scored wrong
        elif mode == "ok":
            assert acc in (0.0, 1.0) and row["correct"] is not None
        else:
            assert acc is None and cost is None, row
            assert row["correct"] is None or row["correct"] is False
            assert row["reward"] is not None  # validity and diversity still score it


def _check_alerts(lines):
    """Faults on steps 2..8: above 0.5 for 3 steps from step 4 on; gone once it is back."""
    fired = [m["step"] for m in lines if any(a["name"] == "unscorable_high" for a in m["alerts"])]
    assert fired == [4, 5, 6, 7, 8]
    alert = next(a for a in lines[3]["alerts"] if a["name"] == "unscorable_high")
    assert alert["values"]["since_step"] == 2


def _check_step_times(cfg, lines):
    """No step waits past the timeouts: scoring stays within the executor bound, and the
    hanging step's scoring did wait for the client's timeout (the server never answered)."""
    bound = executor_bound_s(cfg)
    for mode, m in zip(SCHEDULE, lines):
        assert m["score_time"] <= bound + 2.0, (mode, m["score_time"], bound)
    hang = lines[SCHEDULE.index("hang")]
    attempts = cfg.executor.max_retries + 1
    assert hang["score_time"] >= attempts * cfg.executor.timeout_s * 0.9
    others = statistics.median(m["step_time"] for m in lines)
    assert hang["step_time"] <= others + bound + 10.0


def _check_requests(server):
    """Retries where they help (500, 429, timeouts, drops), none for unusable answers; the
    429 retry waited for Retry-After; nothing reached the server while it was down."""
    runs = 2  # two problems per step, one distinct (workflow, problem) pair each
    attempts = RETRIES + 1
    for mode in ("500", "429", "hang", "drop"):
        assert server.count(mode) == runs * attempts, mode
    for mode in ("bad_json", "no_choices"):
        assert server.count(mode) == runs, mode
    assert server.count("down") == 0 and server.over_budget == 0
    times = sorted(server.times("429"))
    assert times[-1] - times[0] >= RETRY_AFTER_S * 0.9


def test_a_lasting_outage_can_stop_the_run_with_the_alert_exit_code(
    tmp_path, monkeypatch, server, deadline
):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed(8, VALID_PER_GROUP)))
    cfg = openai_config(
        tmp_path,
        server.url,
        "optim.max_steps=6",
        "health.stop_on=[unscorable_high]",
        "health.unscorable_steps=2",
    )
    server.set_mode("down")
    result = Trainer(cfg).train()
    assert result.steps == 2 and result.exit_code == 3
    assert "unscorable_high" in result.stop_reason
    lines = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["unscorable_rate"] for m in lines] == [VALID_PER_GROUP / 8] * 2
    assert (tmp_path / "checkpoint-2").is_dir()  # the run stops with a checkpoint to resume
