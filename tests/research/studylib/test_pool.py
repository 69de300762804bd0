"""Study tasks in worker processes: results, threads, errors and stop signals (real processes)."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from studylib.pool import run_pool, threads_per_job


@pytest.mark.parametrize(
    ("jobs", "cpus", "threads"), [(1, 2, 2), (2, 2, 1), (3, 2, 1), (4, 16, 4), (3, 16, 5)]
)
def test_threads_per_job_shares_the_cores_and_keeps_one(jobs, cpus, threads):
    assert threads_per_job(jobs, cpus) == threads


@pytest.mark.parametrize("jobs", [0, -1, 1.5])
def test_threads_per_job_refuses_a_bad_job_count(jobs):
    with pytest.raises(ValueError, match="jobs must be an integer >= 1"):
        threads_per_job(jobs, 2)


# task functions live at module level: the spawned workers import them by name
def square_in_worker(x):
    import torch

    return x * x, os.getpid(), torch.get_num_threads()


def fail_on_two(x):
    if x == 2:
        raise ValueError("task 2 failed")
    return x


def exit_on_one(x):
    if x == 1:
        raise SystemExit("seed 1 interrupted")
    return x


def wait_for_sigterm(folder):
    """Write FOLDER/ready-PID, then wait (20 s at most) for SIGTERM; say whether it came."""
    got = []
    signal.signal(signal.SIGTERM, lambda *_: got.append(True))
    Path(folder, f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    return "stopped" if got else "timed out"


@pytest.mark.slow
def test_every_task_runs_once_in_at_most_jobs_other_processes_with_the_threads_given():
    out = dict(run_pool(square_in_worker, [1, 2, 3, 4, 5], jobs=2, threads=1))
    assert sorted(out) == [1, 2, 3, 4, 5]
    assert [out[x][0] for x in sorted(out)] == [1, 4, 9, 16, 25]
    pids = {pid for _, pid, _ in out.values()}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {threads for *_, threads in out.values()} == {1}


@pytest.mark.slow
def test_a_task_error_is_raised_in_the_parent():
    with pytest.raises(ValueError, match="task 2 failed"):
        list(run_pool(fail_on_two, [1, 2, 3], jobs=2, threads=1))


@pytest.mark.slow
def test_a_task_system_exit_reaches_the_parent_with_its_message():
    with pytest.raises(SystemExit, match="seed 1 interrupted"):
        list(run_pool(exit_on_one, [0, 1], jobs=1, threads=1))


@pytest.mark.slow
def test_sigterm_to_the_parent_reaches_the_running_workers_and_starts_no_more(tmp_path):
    def signal_when_both_ready():
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=signal_when_both_ready, daemon=True).start()
    results = [r for _, r in run_pool(wait_for_sigterm, [str(tmp_path)] * 3, jobs=2, threads=1)]
    assert results == ["stopped", "stopped"]  # the third task never began
    assert len(list(tmp_path.glob("ready-*"))) == 2
    assert signal.getsignal(signal.SIGTERM) is previous  # the parent's handler is back
