"""Stopping a run cleanly on SIGINT (Ctrl-C) or SIGTERM (``kill``, a scheduler's preemption).

While ``Trainer.train`` (:mod:`.trainer`) runs, :class:`StopOnSignal` replaces the handlers of
both signals:

* the **first** signal only records itself: the step under way is **finished** (its metrics
  line written), the loop stops before the next one, saves a checkpoint of that completed step,
  and ``train`` returns with exit code 128 + the signal number (:data:`EXIT_CODES`: 130 for
  SIGINT, 143 for SIGTERM). Finishing rather than abandoning the step keeps everything the
  checkpoint holds (adapter, optimizer, sampler, RNG, history) from one and the same step. The
  wait is one step at most, which the configuration bounds: generation is capped by
  ``rollout.max_new_tokens``, each executor call by ``executor.timeout_s`` x
  (``executor.max_retries`` + 1) plus backoff, each workflow by ``executor.max_calls``.
* a **second** signal abandons the step at once (:class:`RunAbandoned` is raised wherever the
  main thread is): nothing more is saved, since a half-done step cannot be saved consistently;
  the last checkpoint on disk stays as it was (an interrupted save leaves only a temporary
  folder, removed at the next save). ``--resume`` continues from that checkpoint and drops the
  metrics and samples lines written after it, so every step appears exactly once.

The previous handlers come back when the run ends. Handlers can only be set from the main
thread; elsewhere (a trainer run in a worker thread) signals keep their old behaviour.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

logger = logging.getLogger(__name__)

#: Exit status of ``flowgrpo train`` stopped by a signal: 128 + the signal number, as shells
#: report a process killed by it.
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class RunAbandoned(BaseException):
    """A second stop signal: leave the current step now (BaseException, like KeyboardInterrupt,
    so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} received twice")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 128 + self.signum)


class SignalHandlers:
    """Context manager: ``self._handle`` answers ``signals`` while inside; the previous handlers
    come back on exit. Main thread only (elsewhere signals keep their old behaviour)."""

    def __init__(self, signals: tuple[int, ...] = tuple(EXIT_CODES)) -> None:
        self.signals = signals
        self._previous: dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        raise NotImplementedError


class StopOnSignal(SignalHandlers):
    """Context manager: SIGINT/SIGTERM ask the loop to stop after the current step (see the
    module docstring). ``received`` is the first signal's number, or None."""

    def __init__(self, signals: tuple[int, ...] = tuple(EXIT_CODES)) -> None:
        super().__init__(signals)
        self.received: int | None = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            logger.warning("%s received again: abandoning the current step, saving nothing", name)
            raise RunAbandoned(signum)
        self.received = signum
        logger.warning(
            "%s received: finishing the current step, then saving a checkpoint and stopping "
            "(send it again to stop at once without saving)",
            name,
        )

    def stop(self, step: int, max_steps: int) -> tuple[str, int]:
        """(stop reason, exit code) once the loop stops for a signal: 128 + its number; when
        only another process received one (multi-process runs), SIGTERM's 143."""
        if self.received is None:
            reason = f"another process received a stop signal after step {step}"
            return reason, EXIT_CODES[signal.SIGTERM]
        name = signal.Signals(self.received).name
        code = EXIT_CODES.get(self.received, 128 + self.received)
        return f"interrupted by {name} after step {step} of {max_steps}", code


class AbortOnSignal(SignalHandlers):
    """Context manager for setup (loading the model, building the run): SIGINT/SIGTERM raise
    :class:`RunAbandoned` at once, since there is no step to finish and nothing to save yet
    (without it SIGTERM would end the process silently)."""

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        raise RunAbandoned(signum)
