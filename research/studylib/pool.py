"""Independent study tasks (the seeds of a multi-seed study) in several processes at once.

For machines with more cores than one training run of a small policy uses well: each seed in
its own process, the cores shared out as torch threads. Whether that is faster is a matter of
measurement, not assumption: on the 2-core CPU of docs/BENCHMARKS.md ("Seeds in parallel") two
processes with one thread each finished two seeds no faster than one process with two threads
(token-by-token generation and the backward pass of SmolLM2-135M did scale to the second core).

:func:`run_pool` runs ``fn(task)`` for every task in ``jobs`` worker processes (``spawn``, so no
parent state is inherited; ``fn`` must be a picklable top-level function) with
``torch.set_num_threads(threads)`` in each, and yields ``(task, result)`` as tasks finish.

Stopping: SIGINT or SIGTERM to the parent is passed on to every worker (a training run there
stops after its current step, as ``flowgrpo train`` does) and no task that has not started is
begun. A task that raises (``SystemExit`` included) stops the others the same way, then the
exception is raised in the parent, so a study never records half of a failed batch as done.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from flowgrpo.trainer.loop.interrupt import SignalHandlers

__all__ = ["run_pool", "threads_per_job"]

logger = logging.getLogger(__name__)


def threads_per_job(jobs: int, cpus: int | None = None) -> int:
    """torch threads for each of ``jobs`` processes sharing ``cpus`` cores (at least 1)."""
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, cpus // jobs)


def _call(fn: Callable[[Any], Any], threads: int, task: Any) -> Any:
    """In a worker: set the thread count, then run the task (imports torch only here)."""
    import torch

    torch.set_num_threads(threads)
    return fn(task)


def _stop_workers(signum: int) -> None:
    for child in multiprocessing.active_children():
        try:
            os.kill(child.pid, signum)
        except (ProcessLookupError, TypeError):  # already gone / never started
            pass


class _Forward(SignalHandlers):
    """While inside (main thread only): SIGINT/SIGTERM are passed on to the workers and
    remembered (``received``) instead of ending the parent at once."""

    def __init__(self) -> None:
        super().__init__()
        self.received: int | None = None

    def _handle(self, signum: int, _frame) -> None:
        logger.warning("%s: stopping the workers after their current step",
                       signal.Signals(signum).name)  # fmt: skip
        self.received = signum
        _stop_workers(signum)


def run_pool(
    fn: Callable[[Any], Any], tasks: Iterable[Any], jobs: int, threads: int | None = None
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(task, fn(task))`` as each finishes, ``jobs`` at a time (module docstring).

    ``threads``: torch threads per worker (default :func:`threads_per_job`). The first task
    that raises stops the workers and re-raises its exception here.
    """
    threads = threads if threads is not None else threads_per_job(jobs)
    context = multiprocessing.get_context("spawn")
    with _Forward() as forward, ProcessPoolExecutor(jobs, mp_context=context) as pool:
        running: dict[Future, Any] = {}
        queue = iter(tasks)
        try:
            while True:
                while len(running) < jobs and forward.received is None:
                    task = next(queue, _DONE)
                    if task is _DONE:
                        break
                    running[pool.submit(_call, fn, threads, task)] = task
                if not running:
                    return
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = running.pop(future)
                    yield task, future.result()  # a task's exception is raised here
        except BaseException:
            _stop_workers(signal.SIGTERM)
            raise


_DONE = object()
