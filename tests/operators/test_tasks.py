"""Task loaders: the arithmetic generator, GSM8K, MBPP, HumanEval, and the task registry."""

import ast
import gzip
import json
import os
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from flowgrpo.operators.tasks import TASKS, load_task, register_task, split_spec
from flowgrpo.operators.tasks.arithmetic import DIFFICULTIES, TEMPLATES, generate_arithmetic
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.operators.tasks.gsm8k import load_gsm8k
from flowgrpo.operators.tasks.humaneval import doctest_asserts, load_humaneval
from flowgrpo.operators.tasks.mbpp import load_mbpp

DATA = Path(
    os.environ.get("FLOWGRPO_DATA_DIR", Path(__file__).resolve().parents[2].parent / "shared/data")
)
GSM8K_TEST = DATA / "gsm8k" / "test.jsonl"
MBPP_TEST = DATA / "mbpp" / "mbpp_test.jsonl"
needs_gsm8k = pytest.mark.skipif(
    not GSM8K_TEST.is_file(), reason=f"GSM8K copy not found at {GSM8K_TEST} (FLOWGRPO_DATA_DIR)"
)
needs_mbpp = pytest.mark.skipif(
    not MBPP_TEST.is_file(), reason=f"MBPP copy not found at {MBPP_TEST} (FLOWGRPO_DATA_DIR)"
)


# --------------------------------------------------------------------------- arithmetic
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def safe_eval(expression: str) -> tuple[Fraction, int, bool]:
    """(value, operator count, every division exact) of an integer + - * / expression.

    Independent of the generator's own evaluator; anything but int literals and the four
    operators is refused.
    """
    exact = True

    def walk(node) -> Fraction:
        nonlocal exact
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            exact = exact and right != 0 and (left / right).denominator == 1
            return left / right
        raise ValueError(f"not allowed in an expression: {ast.dump(node)}")

    tree = ast.parse(expression, mode="eval")
    count = sum(isinstance(node, ast.BinOp) for node in ast.walk(tree))
    return walk(tree.body), count, exact


def test_safe_eval_refuses_code():
    with pytest.raises(ValueError):
        safe_eval("__import__('os')")
    assert safe_eval("(12 + 7) * 3") == (57, 2, True)
    assert safe_eval("7 / 2")[2] is False


def test_arithmetic_is_deterministic_and_prefix_stable():
    first = generate_arithmetic(50, seed=3)
    again = generate_arithmetic(50, seed=3)
    assert [(p.question, p.answer, p.meta) for p in first] == [
        (p.question, p.answer, p.meta) for p in again
    ]
    assert generate_arithmetic(20, seed=3) == first[:20]
    other = generate_arithmetic(50, seed=4)
    assert sum(a.question == b.question for a, b in zip(first, other, strict=True)) < 5


_NUMBER_WORDS = {"2": ["doubles", "half"], "3": ["triples"]}


def test_arithmetic_answers_match_expressions():
    problems = generate_arithmetic(600, seed=11)
    for problem in problems:
        value, count, exact = safe_eval(problem.meta["expression"])
        assert exact, problem.meta["expression"]
        assert value.denominator == 1 and value >= 0
        assert problem.answer == str(int(value)), problem
        assert count == problem.meta["n_ops"]
        low, high = DIFFICULTIES[problem.meta["difficulty"]]
        assert low <= count <= high, problem.meta
        # every literal of the expression is stated in the question, as digits or a word
        for literal in re.findall(r"\d+", problem.meta["expression"]):
            pattern = rf"(?<!\d){literal}(?!\d)|" + "|".join(_NUMBER_WORDS.get(literal, ["^$"]))
            assert re.search(pattern, problem.question), (literal, problem)
    assert set(Counter(p.meta["template"] for p in problems)) == set(TEMPLATES)
    assert {p.meta["difficulty"] for p in problems} == set(DIFFICULTIES)


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_arithmetic_difficulty_levels(difficulty):
    low, high = DIFFICULTIES[difficulty]
    problems = generate_arithmetic(200, seed=5, difficulty=difficulty)
    counts = Counter(p.meta["n_ops"] for p in problems)
    assert set(counts) == set(range(low, high + 1))
    assert all(p.meta["difficulty"] == difficulty for p in problems)


def test_arithmetic_ids_and_fields():
    problems = generate_arithmetic(5, split="test")
    assert [p.id for p in problems] == [f"arithmetic/test/{i}" for i in range(5)]
    assert all(p.domain == "math" and p.question.endswith("?") for p in problems)
    assert len({p.question for p in generate_arithmetic(500)}) == 500


def test_arithmetic_splits_are_disjoint():
    train = {p.question for p in generate_arithmetic(2000, seed=0, split="train")}
    test = {p.question for p in generate_arithmetic(2000, seed=0, split="test")}
    other_seed_test = {p.question for p in generate_arithmetic(2000, seed=1, split="test")}
    validation = {p.question for p in generate_arithmetic(500, seed=0, split="validation")}
    assert len(train) == 2000 and len(test) == 2000
    assert not train & test
    assert not train & other_seed_test
    assert not validation & (train | test)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": -1}, "non-negative"),
        ({"n": 3, "difficulty": "extreme"}, "easy"),
        ({"n": 3, "split": "dev"}, "validation"),
    ],
)
def test_arithmetic_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_arithmetic(**kwargs)


# --------------------------------------------------------------------------- registry
def test_load_task_specs():
    assert len(load_task("arithmetic", n=7)) == 7
    easy = load_task("arithmetic:easy", n=20, seed=2, split="test")
    assert all(p.meta["difficulty"] == "easy" and "/test/" in p.id for p in easy)
    assert easy == generate_arithmetic(20, seed=2, difficulty="easy", split="test")
    assert len(load_task("humaneval", n=3)) == 3
    assert set(TASKS.names()) >= {"arithmetic", "gsm8k", "mbpp", "humaneval"}


def test_load_task_unknown_name_lists_choices():
    with pytest.raises(
        ValueError,
        match=r"unknown task 'gsm9k' \(did you mean 'gsm8k'\?\).*arithmetic.*humaneval.*"
        r"in task spec 'gsm9k:test.jsonl'",
    ):
        load_task("gsm9k:test.jsonl")


def test_load_task_file_task_needs_path():
    with pytest.raises(ValueError, match="gsm8k:PATH"):
        load_task("gsm8k")


def test_register_task_rejects_duplicates_and_reserved_characters():
    builtin = TASKS.get("arithmetic")
    with pytest.raises(ValueError, match="already registered"):
        register_task("arithmetic")(lambda arg, n, seed, split: [])
    assert TASKS.get("arithmetic") is builtin
    for bad in ("my.task", "my:task", "", "MyTask"):
        with pytest.raises(ValueError, match=r"lowercase and contain no ':' or '\.'"):
            register_task(bad)


def test_register_task_call_style_and_names_are_a_sorted_tuple():
    def loader(arg, n, seed, split):
        return [Problem(f"echo/{i}", "qa", arg or "", "x") for i in range(n or 1)]

    try:
        assert register_task("test_echo", loader) is loader
        assert [p.question for p in load_task("TEST_ECHO:hello", n=2)] == ["hello", "hello"]
        names = TASKS.names()
        assert isinstance(names, tuple) and list(names) == sorted(names)
    finally:
        TASKS.unregister("test_echo")
    assert "test_echo" not in TASKS


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("arithmetic", ("arithmetic", None)),
        (" GSM8K : test ", ("gsm8k", "test")),
        ("gsm8k:data/gsm8k.test.jsonl", ("gsm8k", "data/gsm8k.test.jsonl")),
        ("gsm8k:C:/data/test.jsonl", ("gsm8k", "C:/data/test.jsonl")),
        ("my_pkg.tasks:load_x", ("my_pkg.tasks:load_x", None)),
        ("my_pkg.tasks:load_x:a.jsonl", ("my_pkg.tasks:load_x", "a.jsonl")),
    ],
)
def test_split_spec_tells_names_from_dotted_paths(spec, expected):
    assert split_spec(spec) == expected


def test_load_task_by_dotted_path(tmp_path, monkeypatch):
    package = tmp_path / "ext_pkg_for_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        "from flowgrpo.operators.tasks import Problem\n"
        "def load_things(arg, n, seed, split):\n"
        "    return [Problem(f'ext/{split}/{i}', 'qa', arg or 'none', 'a') for i in range(n)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        got = load_task("ext_pkg_for_test.tasks:load_things:a.jsonl", n=2, split="test")
        assert [(p.id, p.question) for p in got] == [
            ("ext/test/0", "a.jsonl"),
            ("ext/test/1", "a.jsonl"),
        ]
        assert load_task("ext_pkg_for_test.tasks:load_things", n=1)[0].question == "none"
        with pytest.raises(ValueError, match=r"has no attribute 'nope'.*in task spec"):
            load_task("ext_pkg_for_test.tasks:nope")
        with pytest.raises(ValueError, match=r"unknown task 'ext_pkg_for_test'"):
            load_task("ext_pkg_for_test:load_things")  # no dot before the colon: a task name
    finally:
        TASKS.unregister("ext_pkg_for_test.tasks:load_things")


BAD_LOADS = {  # what a plugin's loader returns -> what the error says
    "surrogate": (lambda: [Problem("x/0", "qa", "a\ud800b", "1")], r"'x/0'\) holds a lone surr"),
    "too long": (lambda: [Problem("x/0", "qa", "x" * 1_000_001, "1")], r"1,000,001-byte question"),
    "not a list": (lambda: (Problem("x/0", "qa", "q", "1"),), r"returned tuple, not a list"),
    "not a Problem": (lambda: [{"question": "q"}], r"problem 0 is a dict, not a Problem"),
    "not text": (lambda: [Problem("x/0", "qa", None, "1")], r"question that is not text"),
}


@pytest.mark.parametrize("case", list(BAD_LOADS))
def test_a_loader_that_builds_bad_problems_is_refused_by_name(case):
    """Problems built in memory (a plugin's loader) get the checks a problems file gets."""
    build, message = BAD_LOADS[case]
    TASKS.register("bad_loader_for_test", lambda arg, n, seed, split: build())
    try:
        with pytest.raises(ValueError, match=r"task 'bad_loader_for_test': .*" + message):
            load_task("bad_loader_for_test")
    finally:
        TASKS.unregister("bad_loader_for_test")


# --------------------------------------------------------------------------- GSM8K
@needs_gsm8k
def test_gsm8k_loads_shared_file():
    problems = load_gsm8k(GSM8K_TEST)
    assert len(problems) == 1319
    first = problems[0]
    assert first.id == "gsm8k/test/0" and first.domain == "math"
    assert first.question.startswith("Janet") and first.answer == "18"
    assert problems[2].answer == "70000"  # "#### 70000"
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", p.answer) for p in problems)
    assert len(load_gsm8k(GSM8K_TEST, limit=5)) == 5
    assert load_task("gsm8k:test", n=3) == problems[:3]  # bare split name, shared folder


def test_gsm8k_commas_removed_and_line_index(tmp_path):
    file = tmp_path / "mini.jsonl"
    lines = [
        {"question": "q1", "answer": "work\n#### 1,234"},
        {"question": "q2", "answer": "#### -5"},
    ]
    file.write_text(json.dumps(lines[0]) + "\n\n" + json.dumps(lines[1]) + "\n")
    problems = load_gsm8k(file)
    assert [p.answer for p in problems] == ["1234", "-5"]
    assert [p.id for p in problems] == ["gsm8k/mini/0", "gsm8k/mini/2"]


def test_gsm8k_missing_file_message(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        load_gsm8k(missing)
    assert str(missing) in str(info.value) and "../shared/data/gsm8k" in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q", "answer": "#### 1"}\n{not json}\n', "line 2 is not valid JSON"),
        ('{"question": "q"}\n', r"line 1 lacks the key\(s\) \['answer'\]"),
        ('{"question": "q", "answer": "no final"}\n', "line 1: the answer does not end"),
        ("[1, 2]\n", "line 1 is a JSON list"),
    ],
)
def test_gsm8k_bad_lines(tmp_path, content, message):
    file = tmp_path / "bad.jsonl"
    file.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_gsm8k(file)


# --------------------------------------------------------------------------- MBPP
@needs_mbpp
def test_mbpp_loads_shared_file():
    problems = load_mbpp(MBPP_TEST)
    assert len(problems) == 341
    rows = [json.loads(line) for line in MBPP_TEST.read_text().splitlines()]
    for problem, row in zip(problems, rows, strict=True):
        assert problem.domain == "code" and problem.entry_point == row["entry_point"]
        assert f"def {row['entry_point']}" in problem.question
        assert problem.answer == row["code"]
        assert len(problem.tests) == len(row["test_list"])
        assert problem.public_tests[0] in problem.tests
    first = problems[0]
    assert first.id == "mbpp/mbpp_test/0"
    assert first.public_tests == ("assert tuple_to_int((1,2,3))==123",)
    with_import = next(p for p in problems if p.meta["test_imports"])
    assert with_import.tests[0].startswith("import math; assert ")
    assert len(load_mbpp(MBPP_TEST, limit=4)) == 4


@needs_mbpp
def test_mbpp_reference_solutions_pass(sandbox_available):
    from flowgrpo.operators.checkers import check_answer, check_code

    for problem in load_mbpp(MBPP_TEST, limit=2):
        assert check_answer(problem, problem.answer).correct
        assert check_code(problem.answer, problem.public_tests, problem.entry_point).correct


def test_mbpp_signature_hint_test_block_and_public_file(tmp_path):
    code = "def add_one(x: int,\n            y: int = 1) -> int:\n    return x + y\n"
    record = {
        "prompt": "Write a function that adds one.",
        "code": code,
        "entry_point": "add_one",
        "test": "def check():\n    assert add_one(1) == 2\n    assert add_one(5) == 6\n",
    }
    (tmp_path / "tiny.jsonl").write_text(json.dumps(record) + "\n")
    public = {"entry_point": "add_one", "test": ["assert candidate(5) == 6"]}
    (tmp_path / "mbpp_public_test.jsonl").write_text(json.dumps(public) + "\n")
    (problem,) = load_mbpp(tmp_path / "tiny.jsonl")
    assert problem.question.endswith("def add_one(x: int,\n            y: int = 1) -> int:")
    assert problem.tests == ("assert add_one(1) == 2", "assert add_one(5) == 6")
    assert problem.public_tests == ("assert add_one(5) == 6",)
    assert problem.id == "mbpp/tiny/0"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "p", "code": "def f(): pass"}, "lacks the key"),
        ({"prompt": "p", "code": "def g(): pass", "entry_point": "f", "test_list": ["x"]}, "def f"),
        ({"prompt": "p", "code": "def f(): pass", "entry_point": "f"}, "has no tests"),
    ],
)
def test_mbpp_bad_records(tmp_path, record, message):
    file = tmp_path / "bad.jsonl"
    file.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=message):
        load_mbpp(file)


def test_mbpp_missing_file_and_bad_json(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape("../shared/data/mbpp")):
        load_mbpp(tmp_path / "missing.jsonl")
    file = tmp_path / "broken.jsonl"
    file.write_text("\n\n{oops\n")
    with pytest.raises(ValueError, match="line 3 is not valid JSON"):
        load_mbpp(file)


# --------------------------------------------------------------------------- HumanEval
@pytest.fixture(scope="module")
def sandbox_available():
    pytest.importorskip("flowgrpo.operators.sandbox", reason="operators/sandbox.py not present")


def test_humaneval_loads_164_problems():
    problems = load_humaneval()
    assert len(problems) == 164
    assert [p.id for p in problems[:2]] == ["humaneval/0", "humaneval/1"]
    first = problems[0]
    assert first.domain == "code" and first.entry_point == "has_close_elements"
    assert first.question.startswith("from typing import List")
    assert len(first.tests) == 1 and first.tests[0].rstrip().endswith("check(has_close_elements)")
    assert first.public_tests == (
        "assert has_close_elements([1.0, 2.0, 3.0], 0.5) == False",
        "assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) == True",
    )
    assert sum(bool(p.public_tests) for p in problems) > 100
    assert len(load_humaneval(limit=10)) == 10


def test_humaneval_canonical_solutions_pass(sandbox_available):
    from flowgrpo.operators.checkers import check_answer, check_code

    for problem in load_humaneval(limit=2):
        assert check_answer(problem, problem.answer).correct
        wrong = problem.question + "    return None\n"
        assert not check_answer(problem, wrong).correct
        assert check_code(problem.answer, problem.public_tests, problem.entry_point).correct


def test_humaneval_public_tests_agree_with_canonical_solutions():
    # Trusted dataset code, run in-process for speed: every extracted docstring example must
    # hold for the canonical solution, otherwise the Test operator would be misled.
    for problem in load_humaneval():
        for test in problem.public_tests:
            namespace: dict = {}
            exec(problem.answer, namespace)
            exec(test, namespace)


def test_doctest_asserts_formats():
    prompt = '''def f(x):
    """Examples:
    >>> f(1)
    2
    f(3) ➞ 4
    * f([1, 2]) => [2, 3]
    f(5) should return 6.
    f(a) => 7
    f(2) returns two
    """
'''
    assert doctest_asserts(prompt, "f") == [
        "assert f(1) == 2",
        "assert f(3) == 4",
        "assert f([1, 2]) == [2, 3]",
        "assert f(5) == 6",
    ]


def test_humaneval_reads_bundled_gzip():
    from flowgrpo.operators.tasks.humaneval import humaneval_data_file

    with gzip.open(humaneval_data_file(), "rt") as handle:
        assert sum(1 for line in handle if line.strip()) == 164


def test_asking_for_more_problems_than_a_split_holds_says_how_many_it_holds():
    # the easy test split runs out of distinct stories a little past 6,000 (measured)
    with pytest.raises(ValueError, match=r"ran out of distinct test problems after (\d+) of 10000"):
        generate_arithmetic(10000, split="test", difficulty="easy")
