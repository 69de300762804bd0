"""The code checker: the solution and its tests in separate sandbox processes; score = the
share of tests passed. Why two processes and how they talk: :mod:`.code_programs`."""

from __future__ import annotations

import ast
import builtins
import json
import re
import secrets
import sys
from collections.abc import Sequence

from flowgrpo.operators.checkers.code_programs import (
    CANDIDATE,
    TESTER,
    program,
    rewrite_asserts,
)
from flowgrpo.operators.checkers.result import CheckResult
from flowgrpo.operators.sandbox import run_python
from flowgrpo.operators.tasks.base import Problem

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_STARTUP_S = 2.0  # interpreter start-up allowance added to each process's time limit
#: Test runs at most per check (a test whose calls depend on earlier answers needs more).
MAX_ROUNDS = 4


def extract_code(text: str) -> str:
    """The code in a model answer: the first ```python fenced block, else the first fenced block
    of any language, else the whole text. An unclosed fence runs to the end of the text."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for tag, body in blocks:
        if tag in _PYTHON_TAGS:
            return body
    return blocks[0][1] if blocks else text


def _lines(stdout: str, nonce: str):
    """The JSON records a program wrote on its own (nonce-prefixed) lines."""
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                parts = json.loads(line[len(nonce) + 1 :])
            except json.JSONDecodeError:
                continue
            if isinstance(parts, list) and parts:
                yield parts


def free_names(tests: Sequence[str], setup: str | None) -> set[str]:
    """The names the tests use but neither they nor the question's code define or import."""
    used, bound = set(), set()
    for source in [*tests, setup or ""]:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
    return used - bound - set(dir(builtins))


def proxied_names(tests: Sequence[str], setup: str | None, entry_point: str | None) -> list[str]:
    """The free names (:func:`free_names`) that are the solution's functions, answered through
    proxies: ``candidate`` (HumanEval's argument name) and the entry point always; builtins and
    standard-library modules never (a solution cannot redefine ``abs`` or ``math`` for the
    tests; a test that uses ``sys`` without importing it gets the real one,
    :func:`_split_names`)."""
    return _split_names(tests, setup, entry_point)[0]


def _split_names(tests, setup, entry_point) -> tuple[list[str], list[str]]:
    """(names proxied to the solution, standard-library modules the tests use without
    importing them: imported for them, as the old one-process checker let the solution's
    imports leak into the tests)."""
    free = free_names(tests, setup)
    modules = free & set(sys.stdlib_module_names)
    proxied = (free - modules) | {"candidate"} | ({entry_point} if entry_point else set())
    return sorted(proxied), sorted(modules)


def question_code(problem: Problem) -> str | None:
    """A code problem's question when it is Python (a HumanEval prompt: imports, helpers such
    as ``poly``, the signature): run in the test program so the tests use the trusted helpers,
    never the solution's."""
    try:
        ast.parse(problem.question)
    except (SyntaxError, ValueError):
        return None
    return problem.question


def _run_tests(tests, setup, names, answers, timeout_s, memory_mb):
    """One run of the test program (``tests`` with their asserts rewritten, ``names`` =
    (proxied, modules)): ({test: (state, error)}, {key: (name, payload)}, the run)."""
    nonce = secrets.token_hex(8)
    code = program(TESTER, nonce=nonce, limit=float(timeout_s), setup=setup or "", tests=tests,
                   names=names[0], modules=names[1], answers=answers)  # fmt: skip
    result = run_python(code, timeout_s=timeout_s * (len(tests) + 1) + _STARTUP_S,
                        memory_mb=memory_mb)  # fmt: skip
    outcomes, requests = {}, {}
    for parts in _lines(result.stdout, nonce):
        if parts[0] == "test" and len(parts) == 4:
            outcomes[parts[1]] = (parts[2], parts[3])
        elif parts[0] == "request" and len(parts) == 4:
            requests[parts[1]] = (parts[2], parts[3])
    return outcomes, requests, result


def _ask_candidate(code, entry_point, requests, timeout_s, memory_mb):
    """One run of the candidate program on ``requests``: ({key: [status, value]}, notes)."""
    nonce = secrets.token_hex(8)
    listed = [[key, name, payload] for key, (name, payload) in requests.items()]
    source = program(CANDIDATE, nonce=nonce, limit=float(timeout_s), solution=code,
                     entry=entry_point, requests=listed)  # fmt: skip
    result = run_python(source, timeout_s=timeout_s * (len(listed) + 1) + _STARTUP_S,
                        memory_mb=memory_mb)  # fmt: skip
    answers, notes = {}, []
    for parts in _lines(result.stdout, nonce):
        if parts[0] == "solution" and len(parts) == 2 and parts[1] is not None:
            notes.append(f"the solution raised {parts[1]}")
        elif parts[0] == "answer" and len(parts) == 4 and parts[1] in requests:
            answers.setdefault(parts[1], [parts[2], parts[3]])  # the first answer counts
    for key in requests:
        answers.setdefault(key, ["err", f"no answer ({result.reason or 'the solution exited'})"])
    notes += sorted({str(v[1]) for v in answers.values() if "does not define" in str(v[1])})
    return answers, notes


def check_code(
    solution_code: str | None,
    tests: Sequence[str],
    entry_point: str | None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    setup: str | None = None,
    credit_from: Sequence[int] | None = None,
) -> CheckResult:
    """Run ``tests`` against a solution; score = fraction passed (of the tests whose indices
    ``credit_from`` lists, when given: the ones the executor could not see), 1.0 when all pass.
    The solution and the tests run in separate sandbox processes (:mod:`.code_programs`), so the
    solution cannot reach the tests, the expected values or the verdict.

    The code is taken from the first ```python fence of ``solution_code`` when there is one
    (:func:`extract_code`). The test program runs ``setup`` (the question's code, trusted) and
    then each test (an assert, or code such as HumanEval's ``check`` function plus its call) in
    one namespace where every name the tests use but do not define (:func:`proxied_names`;
    ``candidate`` is the entry point) calls the solution's function of that name in the
    candidate program, plain data in and out. Rounds alternate until every test ran on real
    answers (at most :data:`MAX_ROUNDS`; a test still waiting then fails). A test passes when
    it raises nothing. A solution that returns anything but plain data (an object of its own
    class, a generator) fails the tests that use it; so does a test that passes a function
    or relies on the solution changing its argument in place.

    Limits: ``timeout_s`` seconds for the solution and for each call or test (SIGALRM inside
    the process); each process gets ``timeout_s`` times its calls or tests plus 2 s, and
    ``memory_mb`` MiB.

    Raises:
        ValueError: ``tests`` is empty (a problem without tests cannot be scored).
    """
    tests = [tests] if isinstance(tests, str) else list(tests)
    if not tests:
        raise ValueError("check_code needs at least one test; this problem has none")
    code = extract_code(solution_code or "")
    if not code.strip():
        return CheckResult(False, 0.0, f"0/{len(tests)} tests passed: no code in the solution")
    names = _split_names(tests, setup, entry_point)
    rewritten = [rewrite_asserts(t) for t in tests]  # once, not once per round
    answers: dict[str, list] = {}
    notes: list[str] = []
    for _ in range(MAX_ROUNDS):
        outcomes, requests, result = _run_tests(rewritten, setup, names, answers, timeout_s,
                                                memory_mb)  # fmt: skip
        new = {k: v for k, v in requests.items() if k not in answers}
        if not new or all(state == "done" for state, _ in outcomes.values()):
            break
        got, notes = _ask_candidate(code, entry_point, new, timeout_s, memory_mb)
        answers.update(got)
    return _verdict(tests, outcomes, notes, result, credit_from)


def _verdict(tests, outcomes: dict, notes: list[str], result, credit_from=None) -> CheckResult:
    ok = {i for i, (state, error) in outcomes.items() if state == "done" and error is None}
    passed = len(ok)
    failures = []
    for i, (state, error) in sorted(outcomes.items()):
        if state != "done":
            failures.append(f"test {i}: still waiting for answers after {MAX_ROUNDS} rounds")
        elif error is not None:
            failures.append(f"test {i}: {error}")
    missing = len(tests) - len(outcomes)
    if missing:
        failures.append(f"{missing} test(s) not run ({result.reason or 'tests stopped'})")
    details = "; ".join([f"{passed}/{len(tests)} tests passed", *notes, *failures[:3]])
    if passed == len(tests):
        return CheckResult(True, 1.0, details)
    counted = list(credit_from) if credit_from else range(len(tests))
    return CheckResult(False, sum(i in ok for i in counted) / len(counted), details)


def check_code_problem(problem: Problem, prediction: str | None, graded: bool) -> CheckResult:
    """The checker of the ``code`` domain: correct when every test passes; the score is the
    share passed of the tests that are not public (all of them when every test is public), so
    hard-coding the test the Test operator showed earns no partial credit."""
    if not problem.tests:
        raise ValueError(f"code problem {problem.id} has no tests to run")
    hidden = [i for i, test in enumerate(problem.tests) if test not in problem.public_tests]
    setup = question_code(problem)
    return check_code(prediction, problem.tests, problem.entry_point, setup=setup,
                      credit_from=hidden)  # fmt: skip
