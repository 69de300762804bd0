"""SIGTERM / SIGINT sent to a real ``flowgrpo train`` process while a step runs.

The first signal: the step under way is finished, a checkpoint of it is saved, the command
prints how to resume and exits 143 (SIGTERM) or 130 (SIGINT). A second signal: the step is
abandoned and nothing more is saved. Either way ``--resume`` (the printed command) ends at
the same final step with every step's metrics line exactly once.

Steps are slowed by ``slow_train.py`` (a sleep before each sampling call, announced in a marker
file), so the signal provably lands inside a step. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
HELPER = Path(__file__).with_name("slow_train.py")
STEPS, SLEEP_S = 3, 2.0
START_TIMEOUT_S, STOP_TIMEOUT_S, RESUME_TIMEOUT_S = 240, 120, 300
#: one torch thread: on 2 busy cores two threads spin against each other (10-30x slower steps)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def steps_of(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in lines_of(path)]


class SlowRun:
    """``flowgrpo train`` on configs/tiny.yaml, slowed, with its output in a file."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.run_dir, self.marker = tmp_path / "run", tmp_path / "sampling.txt"
        self.output = tmp_path / "output.txt"
        cmd = [
            sys.executable, str(HELPER), str(SLEEP_S), str(self.marker),
            "train", "--config", "configs/tiny.yaml", "--max-steps", str(STEPS),
            "--output-dir", str(self.run_dir),
            # one sampling call per step, so a new marker line means a new step
            "--set", "rollout.dynamic_sampling=false", *extra,
        ]  # fmt: skip
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_inside_a_step(self) -> int:
        """Wait until a step's line is written and the next step has started sampling (a new
        marker line); return how many metrics lines there are then."""
        metrics, deadline = self.run_dir / "metrics.jsonl", time.monotonic() + START_TIMEOUT_S
        while not lines_of(metrics):
            self._tick(deadline)
        done = len(lines_of(metrics))
        # one sampling call per step: step done + 1 samples once the marker has more lines
        while len(lines_of(self.marker)) <= done:
            self._tick(deadline)
        assert len(lines_of(metrics)) == done, "a step ended while waiting: sleep too short"
        return done

    def _tick(self, deadline: float) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"training exited early ({self.proc.returncode}):\n{self.text()}")
        if time.monotonic() > deadline:
            self.kill()
            pytest.fail(f"no step within {START_TIMEOUT_S} s:\n{self.text()}")
        time.sleep(0.05)

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"did not stop within {STOP_TIMEOUT_S} s of the signal:\n{self.text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def text(self) -> str:
        return self.output.read_text()


@pytest.fixture
def slow_run(tmp_path):
    runs: list[SlowRun] = []

    def start(*extra: str) -> SlowRun:
        runs.append(SlowRun(tmp_path, *extra))
        return runs[-1]

    yield start
    for run in runs:
        run.kill()


def resume(output: str, run_dir: Path) -> None:
    """Run the printed resume command (unslowed) and check it ends at STEPS, each step once."""
    line = next(x for x in output.splitlines() if x.startswith("resume with: flowgrpo train "))
    args = shlex.split(line.removeprefix("resume with: "))
    assert args[-1] == "--resume" and str(run_dir) in args
    done = subprocess.run(
        [sys.executable, "-m", "flowgrpo.trainer.cli", *args[1:]],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=RESUME_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert steps_of(run_dir / "metrics.jsonl") == list(range(1, STEPS + 1))
    samples = steps_of(run_dir / "samples.jsonl")
    assert sorted(set(samples)) == list(range(1, STEPS + 1))
    assert all(samples.count(s) == samples.count(1) for s in range(1, STEPS + 1))


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_finishes_the_step_saves_it_and_resume_completes_the_run(slow_run, signum, code):
    run = slow_run("--set", "logging.save_every=0")  # the only checkpoint: the one at the stop
    done = run.wait_inside_a_step()
    sent = time.monotonic()
    run.proc.send_signal(signum)
    assert run.wait() == code, run.text()
    waited = time.monotonic() - sent
    output, name = run.text(), signal.Signals(signum).name
    assert f"interrupted by {name} after step {done + 1} of {STEPS}" in output
    assert "resume with: flowgrpo train --config configs/tiny.yaml" in output
    assert "--set logging.save_every=0" in output
    # the step under way was finished, its line written, and it alone was saved
    metrics = steps_of(run.run_dir / "metrics.jsonl")
    assert metrics == list(range(1, done + 2))
    assert sorted(p.name for p in run.run_dir.glob("checkpoint-*")) == [f"checkpoint-{done + 1}"]
    assert not list(run.run_dir.glob(".checkpoint-*"))
    # bounded: at most the rest of one step (two slowed samplings) and the save
    step_times = [json.loads(x)["step_time"] for x in lines_of(run.run_dir / "metrics.jsonl")]
    assert waited < max(step_times) + 2 * SLEEP_S + 30
    resume(output, run.run_dir)


def test_a_second_signal_abandons_the_step_and_keeps_the_last_checkpoint(slow_run):
    run = slow_run("--set", "logging.save_every=1")
    done = run.wait_inside_a_step()
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.text()
    output = run.text()
    assert f"SIGTERM received twice during step {done + 1}" in output
    assert "nothing saved" in output
    # the abandoned step left no line and no checkpoint; the last saved one is intact
    assert steps_of(run.run_dir / "metrics.jsonl") == list(range(1, done + 1))
    assert f"checkpoint-{done}" in [p.name for p in run.run_dir.glob("checkpoint-*")]
    assert not (run.run_dir / f"checkpoint-{done + 1}").exists()
    resume(output, run.run_dir)


SLOW_LOAD = """
import sys, time
from flowgrpo.operators import models
from flowgrpo.trainer.cli.app import main

load = models.load_model
def slow_load(*args, **kwargs):
    open(sys.argv[1], "a").write("loading\\n")
    time.sleep(60)
    return load(*args, **kwargs)

models.load_model = slow_load
main(sys.argv[2:], prog_name="flowgrpo")
"""


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGTERM, 143, "SIGTERM"),
                                                      (signal.SIGINT, 130, "SIGINT")])  # fmt: skip
def test_a_signal_while_the_model_loads_is_a_message_and_its_exit_code(tmp_path, signum, code,
                                                                         name):  # fmt: skip
    marker, run_dir = tmp_path / "loading.txt", tmp_path / "run"
    cmd = [sys.executable, "-c", SLOW_LOAD, str(marker), "train", "--config", "configs/tiny.yaml",
           "--output-dir", str(run_dir)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while not lines_of(marker) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert lines_of(marker), "the model never started loading"
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=STOP_TIMEOUT_S)
    assert proc.returncode == code, output
    assert f"stopped by {name}" in output and "while setting up" in output
    assert "Traceback" not in output
    assert not list(run_dir.glob("checkpoint-*"))
