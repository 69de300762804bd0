"""What one run produced: :class:`ExecResult` and the rules that turn an exit into a reason."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

SYNTAX_EXIT = 113  # the child's exit code when the program does not compile
MEMORY_EXIT = 114  # the child's exit code when the program raised MemoryError
SETUP_EXIT = 115  # the child's exit code when a protection layer could not be set up
SETUP_PREFIX = "sandbox setup failed: "
_MEMORY_RE = re.compile(r"MemoryError\b|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")
_SYNTAX_RE = re.compile(r"\b(?:Syntax|Indentation|Tab)Error\b")


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one sandboxed run.

    Attributes:
        ok: exit code 0, no timeout, no limit hit (memory, CPU, output).
        stdout / stderr: decoded as UTF-8 (invalid bytes replaced), cut to ``max_output_bytes``
            bytes each, followed by a ``[sandbox: ... truncated ...]`` line when cut.
        returncode: the exit status (negative: killed by that signal); None if it never ran.
        timed_out: the wall-clock timeout or the CPU-time limit was hit.
        reason: "" when ok; otherwise e.g. "timeout after 5.0 s", "memory limit",
            "exit code 1", "syntax error", "killed by signal 9 (SIGKILL)",
            "output limit: ...", "sandbox failure: ...".
        seconds: wall time from start to exit (or kill), in seconds.
    """

    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    reason: str
    seconds: float


def reason(
    returncode: int,
    timed_out: bool,
    stderr: str,
    truncated: bool,
    timeout_s: float,
    memory_mb: int,
    max_output: int,
) -> str:
    """The ``reason`` of a finished run ("" when it is ok)."""
    if timed_out:
        if returncode == -signal.SIGXCPU:
            return f"timeout: cpu time limit after {_seconds(timeout_s)} s"
        return f"timeout after {_seconds(timeout_s)} s"
    if returncode == SYNTAX_EXIT and _SYNTAX_RE.search(stderr):
        return "syntax error"
    if returncode == SETUP_EXIT and stderr.startswith(SETUP_PREFIX):
        return "sandbox failure: setup: " + stderr[len(SETUP_PREFIX) :].splitlines()[0]
    if returncode != 0 and (returncode == MEMORY_EXIT or _MEMORY_RE.search(stderr[-2000:])):
        return f"memory limit ({memory_mb} MB)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-returncode} ({name})"
    if returncode != 0:
        return f"exit code {returncode}"
    if truncated:
        return f"output limit: more than {max_output} bytes on stdout or stderr"
    return ""


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"
