"""The public entry points: :func:`run_python` and :func:`run_python_batch`."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from flowgrpo.operators.sandbox._process import SANDBOX_MARKER_VAR, _Run
from flowgrpo.operators.sandbox._result import ExecResult

logger = logging.getLogger("flowgrpo.operators.sandbox")

_MIN_MEMORY_MB = 64  # the interpreter, the setup and Landlock need ~30 MB of address space


def run_python(
    code: str,
    stdin: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    env: dict[str, str] | None = None,
) -> ExecResult:
    """Run Python source ``code`` in the sandbox (see the package docstring) and report.

    Args:
        code: the program, as ``python file.py`` would run it (``__name__ == "__main__"``).
        stdin: text fed to the program's stdin (UTF-8); None gives it ``/dev/null``.
        timeout_s: wall-clock limit in seconds (> 0); CPU time is limited to about the same + 1 s.
        memory_mb: address-space limit in MiB (>= 64).
        max_output_bytes: bytes kept from each of stdout and stderr (>= 0).
        env: extra environment variables for the program (nothing else is inherited).

    Raises:
        TypeError/ValueError: only for bad arguments; never for what the program does.
    """
    _validate(code, stdin, timeout_s, memory_mb, max_output_bytes, env)
    start = time.monotonic()
    try:
        return _Run(code, stdin, timeout_s, memory_mb, max_output_bytes, env or {}).execute()
    except Exception as exc:  # the sandbox itself failed: report, never raise into the caller
        logger.warning("sandbox failure: %r", exc, exc_info=True)
        return ExecResult(
            ok=False,
            stdout="",
            stderr="",
            returncode=None,
            timed_out=False,
            reason=f"sandbox failure: {type(exc).__name__}: {exc}",
            seconds=time.monotonic() - start,
        )


def run_python_batch(
    codes: Sequence[str],
    stdins: Sequence[str | None] | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    env: dict[str, str] | None = None,
    max_workers: int = 2,
) -> list[ExecResult]:
    """Run each program of ``codes`` like :func:`run_python`, ``max_workers`` at a time.

    ``stdins``, when given, has one entry per program. Results are in the order of ``codes``.
    Arguments are validated before anything runs.
    """
    if isinstance(codes, str) or not isinstance(codes, Sequence):
        raise TypeError(f"codes must be a sequence of program strings, got {type(codes).__name__}")
    if stdins is None:
        stdins = [None] * len(codes)
    elif isinstance(stdins, str) or len(stdins) != len(codes):
        raise ValueError("stdins must be a sequence with one entry (str or None) per program")
    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
    for code, stdin in zip(codes, stdins):
        _validate(code, stdin, timeout_s, memory_mb, max_output_bytes, env)
    if not codes:
        return []

    def one(pair: tuple[str, str | None]) -> ExecResult:
        return run_python(pair[0], pair[1], timeout_s, memory_mb, max_output_bytes, env)

    with ThreadPoolExecutor(max_workers=min(max_workers, len(codes))) as pool:
        return list(pool.map(one, zip(codes, stdins)))


def _validate(
    code: object,
    stdin: object,
    timeout_s: object,
    memory_mb: object,
    max_output_bytes: object,
    env: object,
) -> None:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    if stdin is not None and not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str or None, got {type(stdin).__name__}")
    ok_timeout = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if not ok_timeout or not (0 < timeout_s < math.inf):
        raise ValueError(f"timeout_s must be a positive finite number (seconds), got {timeout_s!r}")
    if not isinstance(memory_mb, int) or memory_mb < _MIN_MEMORY_MB:
        raise ValueError(
            f"memory_mb must be an int >= {_MIN_MEMORY_MB} (the interpreter alone needs ~25 MB),"
            f" got {memory_mb!r}"
        )
    if not isinstance(max_output_bytes, int) or max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be an int >= 0, got {max_output_bytes!r}")
    if env is None:
        return
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a dict of str to str, got {type(env).__name__}")
    for key, value in env.items():
        bad_key = not isinstance(key, str) or not key or "=" in key or "\0" in key
        if bad_key or not isinstance(value, str) or "\0" in value:
            raise ValueError(f"env entry {key!r}: names and values must be str without NUL or '='")
        if key == SANDBOX_MARKER_VAR:
            raise ValueError(f"env may not set {SANDBOX_MARKER_VAR}; the sandbox owns it")
