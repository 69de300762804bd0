"""Answer checkers: number extraction, math with tolerance and tiers, QA EM/F1, code via sandbox."""

import math

import pytest

from flowgrpo.operators.checkers import (
    DOMAIN_CHECKERS,
    CheckResult,
    check_answer,
    check_code,
    check_math,
    check_math_answer,
    check_qa,
    extract_code,
    extract_number,
    graded_math,
    normalize_answer,
    token_f1,
)
from flowgrpo.operators.tasks.base import Problem

# (text, number extract_number must find)
NUMBER_CASES = [
    ("42", 42.0),
    ("The total is 1,234 apples.", 1234.0),
    ("She pays $12 for it.", 12.0),
    ("It costs $1,234.50 in total", 1234.5),
    ("12 dollars", 12.0),
    ("about 12%", 12.0),
    ("3/4", 0.75),
    ("He ate 3 / 4 of the pie", 0.75),
    ("-5", -5.0),
    ("The temperature fell to −7 degrees", -7.0),
    ("The change is -$5", -5.0),
    (r"So the result is \boxed{17}.", 17.0),
    (r"\boxed{\frac{3}{4}}", 0.75),
    (r"\boxed{1{,}234}", 1234.0),
    (r"The answer is $\boxed{\$12}$ and 99 is wrong", 12.0),
    (r"\boxed{x = 5}", 5.0),
    (r"\boxed{\text{12 apples}} not 9", 12.0),
    ("16 - 3 - 4 = 9 eggs\n9 * 2 = 18\n#### 18", 18.0),
    ("#### 1,000", 1000.0),
    ("#### -3", -3.0),
    ("The answer is 7. Check: 7 + 1 = 8", 7.0),
    ("Final Answer: 3.5 hours, done in 2 steps", 3.5),
    ("answer = 64, since 8 * 8", 64.0),
    ("First 3, then 5, finally 11", 11.0),
    ("16-3", 3.0),  # a hyphen glued to a digit is not a sign
    ("0.5", 0.5),
    (".5 liters", 0.5),
    ("1e3 grams", 1000.0),
    ("x2 and y", None),  # digits glued to a word are not a number
    ("no digits here", None),
    ("", None),
    ("3/0", None),
]


@pytest.mark.parametrize(("text", "expected"), NUMBER_CASES)
def test_extract_number(text, expected):
    got = extract_number(text)
    if expected is None:
        assert got is None
    else:
        assert got is not None and math.isclose(got, expected), (text, got)


def test_extract_number_none_input():
    assert extract_number(None) is None


# (prediction, reference, correct)
MATH_CASES = [
    ("The answer is 18", "18", True),
    ("#### 70,000", "70000", True),
    ("$70,000", "70000", True),
    (r"\boxed{18.0}", "18", True),
    ("18.0000001", "18", True),
    ("18.01", "18", False),
    ("17", "18", False),
    ("-4", "-4", True),
    ("4", "-4", False),
    ("3/4 of a cup", "0.75", True),
    ("I don't know", "18", False),
    ("", "18", False),
    ("It is 5. #### 7", "Janet sells 9 eggs... #### 7", True),
]


@pytest.mark.parametrize(("prediction", "reference", "correct"), MATH_CASES)
def test_check_math(prediction, reference, correct):
    result = check_math(prediction, reference)
    assert isinstance(result, CheckResult)
    assert result.correct is correct
    assert result.score == (1.0 if correct else 0.0)


def test_check_math_no_number_says_so():
    result = check_math("no idea", "18")
    assert not result.correct and "no number" in result.details


def test_check_math_tolerances():
    assert check_math("100.5", "100", rel_tol=0.01).correct
    assert not check_math("100.5", "100").correct
    assert check_math("0.001", "0", abs_tol=0.01).correct


def test_check_math_reference_without_number_raises():
    with pytest.raises(ValueError, match="reference"):
        check_math("5", "unknown")


@pytest.mark.parametrize(
    ("prediction", "reference", "tier"),
    [
        ("100", "100", 1.0),
        ("100.0000001", "100", 1.0),
        ("100.5", "100", 0.7),  # 0.5% error
        ("101", "100", 0.7),  # exactly 1%
        ("105", "100", 0.4),  # 5%
        ("90", "100", 0.4),  # 10%
        ("130", "100", 0.2),  # 30%
        ("50", "100", 0.2),  # 50%
        ("49", "100", 0.0),  # 51%
        ("-100", "100", 0.0),  # 200%
        ("nothing", "100", 0.0),
        ("0", "0", 1.0),
        ("0.5", "0", 0.0),  # relative error undefined for a zero reference: exact tier only
    ],
)
def test_graded_math_tiers(prediction, reference, tier):
    assert graded_math(prediction, reference) == tier


def test_normalize_answer():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("an Apple, a pear") == "apple pear"


@pytest.mark.parametrize(
    ("prediction", "reference", "exact", "f1"),
    [
        ("The Eiffel Tower", "eiffel tower.", True, 1.0),
        # pred {eiffel, tower, paris}, ref {eiffel, tower}: P 2/3, R 1, F1 0.8
        ("Eiffel Tower, Paris", "the Eiffel Tower", False, 0.8),
        # "in" is not an article: pred [eiffel, tower, in, paris]: P 2/4, R 1, F1 2/3
        ("Eiffel Tower in Paris", "the Eiffel Tower", False, 2 / 3),
        # pred {paris}, ref {paris, france}: P 1, R 1/2, F1 2/3
        ("Paris", "Paris, France", False, 2 / 3),
        ("London", "Paris", False, 0.0),
        ("", "Paris", False, 0.0),
        # a repeated token matches once: pred [blue, blue], ref [blue]: P 1/2, R 1, F1 2/3
        ("blue blue", "blue", False, 2 / 3),
        # a hedge between closed answers earns nothing (HotpotQA): once F1 2/3 against either
        ("yes no", "yes", False, 0.0),
        ("no, yes", "no", False, 0.0),
        # a reference that is all article keeps its articles: an empty answer once matched it
        ("", "A", False, 0.0),
        (".", "A", False, 0.0),
        ("the", "A", False, 0.0),
        ("(a)", "A", True, 1.0),
        ("B", "A", False, 0.0),
    ],
)
def test_check_qa(prediction, reference, exact, f1):
    result = check_qa(prediction, reference)
    assert result.correct is exact
    assert result.score == pytest.approx(f1)


def test_token_f1_both_empty():
    assert token_f1("the", "a") == 1.0  # both normalise to nothing


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("def f(): pass", "def f(): pass"),
        ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
        ("```\nx = 1\n```\n```python\ny = 2\n```", "y = 2\n"),
        ("```py\nz = 3\n```", "z = 3\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```python\nunclosed = True\n", "unclosed = True\n"),
    ],
)
def test_extract_code(text, code):
    assert extract_code(text) == code


ADD_TESTS = [
    "assert add(1, 2) == 3",
    "assert add(-1, 1) == 0",
    "assert add(10, 5) == 15",
    "assert candidate(2, 2) == 4",
]


@pytest.fixture(scope="module")
def sandbox():
    return pytest.importorskip(
        "flowgrpo.operators.sandbox", reason="operators/sandbox.py not present"
    )


def test_check_code_correct_solution(sandbox):
    solution = "Sure:\n```python\ndef add(a, b):\n    print('noise')\n    return a + b\n```"
    result = check_code(solution, ADD_TESTS, "add")
    assert result.correct and result.score == 1.0, result.details
    assert result.details.startswith("4/4")


def test_check_code_partially_wrong_solution(sandbox):
    # wrong whenever a == b: fails only "add(2, 2) == 4" -> 3 of 4 pass
    solution = "def add(a, b):\n    return a + b if a != b else 0\n"
    result = check_code(solution, ADD_TESTS, "add")
    assert not result.correct
    assert result.score == pytest.approx(3 / 4)
    assert "test 3" in result.details


def test_check_code_missing_function_and_syntax_error(sandbox):
    missing = check_code("def plus(a, b):\n    return a + b\n", ADD_TESTS, "add")
    assert missing.score == 0.0 and "does not define 'add'" in missing.details
    broken = check_code("def add(a, b) return a + b", ADD_TESTS, "add")
    assert broken.score == 0.0 and "SyntaxError" in broken.details


def test_check_code_error_after_definition_still_runs_tests(sandbox):
    solution = "def add(a, b):\n    return a + b\n\nprint(add(x, 1))\n"
    result = check_code(solution, ADD_TESTS, "add")
    assert result.correct and "NameError" in result.details


def test_check_code_per_test_timeout(sandbox):
    solution = "def add(a, b):\n    while a == 10:\n        pass\n    return a + b\n"
    result = check_code(solution, ADD_TESTS, "add", timeout_s=0.5)
    assert result.score == pytest.approx(3 / 4)
    assert "timeout" in result.details


def test_check_code_forged_markers_do_not_count(sandbox):
    solution = "for i in range(4):\n    print('0000 [\"test\", %d, null]' % i)\n"
    result = check_code(solution, ADD_TESTS, "add")
    assert result.score == 0.0


def test_check_code_empty_solution_and_no_tests():
    assert check_code("", ADD_TESTS, "add").score == 0.0
    with pytest.raises(ValueError, match="at least one test"):
        check_code("def add(a, b): return a + b", [], "add")


def test_check_answer_dispatches_by_domain(sandbox):
    math_problem = Problem(id="m/0", domain="math", question="1+1?", answer="2")
    assert check_answer(math_problem, "It is 2").correct
    assert check_answer(math_problem, "2.01", graded=True).score == 0.7
    qa_problem = Problem(id="q/0", domain="qa", question="Capital?", answer="Paris")
    assert check_answer(qa_problem, "paris.").correct
    code_problem = Problem(
        id="c/0", domain="code", question="add", tests=tuple(ADD_TESTS), entry_point="add"
    )
    assert check_answer(code_problem, "def add(a, b):\n    return a + b").correct
    assert set(DOMAIN_CHECKERS) >= {"math", "code", "qa"}


def test_a_remembered_verdict_is_that_of_its_own_arguments():
    # the math verdict is remembered for short answers (a pure function of prediction,
    # reference and graded): asking again, in any order, gives each call its own verdict
    calls = [("2.01", "2", True), ("2.01", "2", False), ("2.01", "2.01", False), ("2", "2", True)]
    first = [check_math_answer(*call) for call in calls]
    again = [check_math_answer(*call) for call in reversed(calls)][::-1]
    assert [r.score for r in first] == [r.score for r in again] == [0.7, 0.0, 1.0, 1.0]
    long_answer = "x " * 600 + "so the answer is 2"  # past the remembered length: checked anew
    assert check_math_answer(long_answer, "2").correct
    assert not check_math_answer(long_answer, "3").correct


def test_check_answer_errors():
    with pytest.raises(ValueError, match="known domains"):
        check_answer(Problem(id="x/0", domain="poetry", question="?", answer="x"), "x")
    with pytest.raises(ValueError, match="no reference"):
        check_answer(Problem(id="m/1", domain="math", question="?"), "1")
    with pytest.raises(ValueError, match="no tests"):
        check_answer(Problem(id="c/1", domain="code", question="?"), "def f(): pass")
