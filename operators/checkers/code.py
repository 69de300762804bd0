"""The code checker: a solution and its tests run in ONE sandbox process; score = share passed."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence

from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.sandbox import run_python
from flowgrpo.operators.tasks.base import Problem

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_TEST_STARTUP_S = 2.0  # interpreter start-up allowance added to the process time limit

# The harness runs in one sandbox process: the solution, then each test, each with its own
# SIGALRM time limit, in one shared namespace. Results are lines "<nonce> <json>" on stdout;
# whatever the solution or tests print goes to a discarded buffer.
_HARNESS = """\
import builtins as _fg_builtins, contextlib as _fg_ctx, io as _fg_io, json as _fg_json
import signal as _fg_signal, sys as _fg_sys

_FG_OUT = _fg_sys.stdout
_FG_NONCE = {nonce!r}
_FG_LIMIT = {limit!r}
_FG_ENTRY = {entry!r}
_FG_SOLUTION = {solution!r}
_FG_TESTS = {tests!r}


class _FgTimeout(BaseException):
    pass


def _fg_alarm(signum, frame):
    raise _FgTimeout()


def _fg_emit(*parts):
    _FG_OUT.write(_FG_NONCE + " " + _fg_json.dumps(parts) + "\\n")
    _FG_OUT.flush()


def _fg_run(source, name, namespace):
    try:
        _fg_signal.setitimer(_fg_signal.ITIMER_REAL, _FG_LIMIT)
        try:
            with _fg_ctx.redirect_stdout(_fg_io.StringIO()):
                exec(compile(source, name, "exec"), namespace)
        finally:
            _fg_signal.setitimer(_fg_signal.ITIMER_REAL, 0)
    except _FgTimeout:
        return "timeout after %g s" % _FG_LIMIT
    except BaseException as exc:
        return ("%s: %s" % (type(exc).__name__, exc))[:300]
    return None


_fg_signal.signal(_fg_signal.SIGALRM, _fg_alarm)
_fg_ns = {{"__name__": "solution", "__builtins__": _fg_builtins}}
_fg_emit("solution", _fg_run(_FG_SOLUTION, "<solution>", _fg_ns))
if _FG_ENTRY is not None:
    if _FG_ENTRY in _fg_ns:
        _fg_ns.setdefault("candidate", _fg_ns[_FG_ENTRY])
    else:
        _fg_emit("missing", _FG_ENTRY)
for _fg_i, _fg_test in enumerate(_FG_TESTS):
    _fg_emit("test", _fg_i, _fg_run(_fg_test, "<test %d>" % _fg_i, _fg_ns))
_fg_emit("done")
"""


def extract_code(text: str) -> str:
    """The code in a model answer: the first ```python fenced block, else the first fenced block
    of any language, else the whole text. An unclosed fence runs to the end of the text."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for tag, body in blocks:
        if tag in _PYTHON_TAGS:
            return body
    return blocks[0][1] if blocks else text


def _parse_harness(
    stdout: str, nonce: str, n_tests: int
) -> tuple[dict[int, str | None], list[str]]:
    """Per-test outcomes (None = passed, else the error) and notes about the solution."""
    outcomes: dict[int, str | None] = {}
    notes: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            parts = json.loads(line[len(nonce) + 1 :])
        except json.JSONDecodeError:
            continue
        if parts[0] == "test" and 0 <= parts[1] < n_tests:
            outcomes[parts[1]] = parts[2]
        elif parts[0] == "solution" and parts[1] is not None:
            notes.append(f"the solution raised {parts[1]}")
        elif parts[0] == "missing":
            notes.append(f"the solution does not define {parts[1]!r}")
    return outcomes, notes


def check_code(
    solution_code: str | None,
    tests: Sequence[str],
    entry_point: str | None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
) -> CheckResult:
    """Run ``tests`` against a solution in ONE sandbox process; score = fraction passed.

    The code is taken from the first ```python fence of ``solution_code`` when there is one
    (:func:`extract_code`). It is executed (``__name__ == "solution"``, so a ``__main__`` block
    does not run), then each test string (an assert, or any code such as HumanEval's ``check``
    function plus its call) runs in the same namespace, where ``candidate`` is bound to
    ``entry_point`` when the solution defines it. A test passes when it raises nothing.

    Limits: ``timeout_s`` seconds for the solution and for each test (SIGALRM inside the
    process); the process as a whole gets ``timeout_s * (len(tests) + 1) + 2`` seconds and
    ``memory_mb`` MiB; tests not reached before a hard kill count as failed.

    Not protected: the solution runs in the same interpreter as the harness, so deliberately
    hostile code can forge results (a per-run random nonce only stops accidental forgery); the
    sandbox's own limits are described in :mod:`flowgrpo.operators.sandbox`. A test that swallows
    ``BaseException`` can defeat the per-test time limit.

    Raises:
        ValueError: ``tests`` is empty (a problem without tests cannot be scored).
    """
    tests = [tests] if isinstance(tests, str) else list(tests)
    if not tests:
        raise ValueError("check_code needs at least one test; this problem has none")
    code = extract_code(solution_code or "")
    if not code.strip():
        return CheckResult(False, 0.0, f"0/{len(tests)} tests passed: no code in the solution")
    nonce = secrets.token_hex(8)
    program = _HARNESS.format(
        nonce=nonce, limit=float(timeout_s), entry=entry_point, solution=code, tests=tests
    )
    limit = timeout_s * (len(tests) + 1) + _TEST_STARTUP_S
    result = run_python(program, timeout_s=limit, memory_mb=memory_mb)
    outcomes, notes = _parse_harness(result.stdout, nonce, len(tests))
    passed = sum(1 for error in outcomes.values() if error is None)
    failures = [f"test {i}: {error}" for i, error in sorted(outcomes.items()) if error is not None]
    missing = len(tests) - len(outcomes)
    if missing:
        failures.append(f"{missing} test(s) not run ({result.reason or 'harness stopped'})")
    details = "; ".join([f"{passed}/{len(tests)} tests passed", *notes, *failures[:3]])
    return CheckResult(passed == len(tests), passed / len(tests), details)


def check_code_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    """The checker of the ``code`` domain (the share of tests passed is always the score)."""
    if not problem.tests:
        raise ValueError(f"code problem {problem.id} has no tests to run")
    return check_code(prediction, problem.tests, problem.entry_point)
