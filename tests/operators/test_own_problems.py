"""Your own problems: the JSONL schema (jsonl:PATH), hf:PATH, and answers that are not numbers."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowgrpo.operators.checkers import check_answer, check_math_answer
from flowgrpo.operators.tasks import load_task
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.operators.tasks.files import DATASETS_MISSING

ROWS = [
    {"question": "What is the capital of France?", "answer": "Paris", "domain": "qa"},
    {"question": "What is half of 3?", "answer": "3/2", "id": "half", "meta": {"level": 1}},
    {
        "question": "Write add(a, b).",
        "domain": "code",
        "tests": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
        "entry_point": "add",
        "source": "handwritten",
    },
]


def write(tmp_path, rows, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_a_jsonl_problem_set_loads_every_domain(tmp_path):
    path = write(tmp_path, ROWS)
    qa, half, code = load_task(f"jsonl:{path}")
    assert (qa.domain, qa.answer, qa.id) == ("qa", "Paris", "mine/0")
    assert (half.domain, half.answer, half.id, half.meta["level"]) == (
        "math",
        "3/2",
        "mine/half",
        1,
    )
    assert code.tests == tuple(ROWS[2]["tests"]) and code.entry_point == "add"
    assert code.meta["source"] == "handwritten"  # unknown keys are kept in meta
    assert [p.id for p in load_task(f"jsonl:{path}", n=1)] == ["mine/0"]


def test_the_domain_option_is_the_default_for_rows_without_one(tmp_path):
    path = write(tmp_path, [{"question": "Who wrote Hamlet?", "answer": "Shakespeare"}])
    assert load_task(f"jsonl:{path}")[0].domain == "math"
    assert load_task(f"jsonl:{path}?domain=qa")[0].domain == "qa"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([ROWS[0], {"answer": "4"}], r"line 2: missing 'question'$"),
        ([{"qestion": "2+2?", "answer": "4"}], r"line 1: missing 'question' \(found 'qestion'"),
        ([{"question": "2+2?"}], r"line 1: missing 'answer' \(a math problem needs"),
        ([{"question": "f?", "domain": "code"}], r"line 1: missing 'tests'"),
        ([{"question": "f?", "domain": "code", "tests": []}], r"line 1: 'tests' is empty"),
        ([{"question": "2+2?", "answer": "4", "domain": "bio"}], r"line 1: 'domain' is 'bio'"),
        ([ROWS[0], "", "[1, 2]"], r"line 3 is a JSON list"),
        (["{not json"], r"line 1 is not valid JSON"),
        ([ROWS[1], ROWS[1]], r"line 2: id 'mine/half' is already used at .*line 1"),
    ],
)
def test_bad_rows_are_named_by_line(tmp_path, rows, message):
    path = write(tmp_path, rows)
    with pytest.raises(ValueError, match=message):
        load_task(f"jsonl:{path}")


def test_bad_specs_say_what_to_write(tmp_path):
    with pytest.raises(ValueError, match="needs a path"):
        load_task("jsonl")
    with pytest.raises(FileNotFoundError, match="problem file not found"):
        load_task(f"jsonl:{tmp_path}/none.jsonl")
    path = write(tmp_path, ROWS)
    with pytest.raises(ValueError, match="unknown option 'dommain'; options: domain"):
        load_task(f"jsonl:{path}?dommain=qa")
    with pytest.raises(ValueError, match="domain=bio; use one of math, code, qa"):
        load_task(f"jsonl:{path}?domain=bio")


def test_hf_without_datasets_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # import fails
    path = write(tmp_path, ROWS)
    with pytest.raises(ValueError) as info:
        load_task(f"hf:{path}")
    assert str(info.value) == DATASETS_MISSING and "flowgrpo[datasets]" in DATASETS_MISSING


def test_hf_with_a_broken_or_old_datasets_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import types

    path = write(tmp_path, ROWS)
    monkeypatch.setitem(__import__("sys").modules, "datasets", types.ModuleType("datasets"))
    __import__("sys").modules["datasets"].__version__ = "2.3.0"
    with pytest.raises(
        ValueError, match=r"version 2\.3\.0 is older than 2\.14.*flowgrpo\[datasets\]"
    ):
        load_task(f"hf:{path}")


def test_hf_reads_a_saved_dataset_and_a_local_file_with_column_mapping(tmp_path):
    import datasets  # a dev dependency: missing is a failure, not a skip

    rows = {"problem": ["2+2?", "Capital of Peru?"], "solution": ["4", "Lima"]}
    rows["kind"] = ["math", "qa"]
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "ds")
    spec = f"hf:{tmp_path / 'ds'}?question=problem&answer=solution&domain=qa"
    problems = load_task(spec, split="test")
    assert [(p.question, p.answer, p.domain) for p in problems] == [
        ("2+2?", "4", "qa"),
        ("Capital of Peru?", "Lima", "qa"),
    ]
    path = write(tmp_path, [{"problem": "2+2?", "solution": 4, "domain": "math"}], "f.jsonl")
    (problem,) = load_task(f"hf:{path}?question=problem&answer=solution")
    assert (problem.answer, problem.domain) == ("4", "math")
    with pytest.raises(ValueError, match=r"no column\(s\) \['prompt'\]"):
        load_task(f"hf:{path}?question=prompt")


# (prediction, reference, correct)
MATH = [
    ("3/4", "0.75", True),
    ("0.75", "3/4", True),
    (r"so \boxed{\frac{3}{4}}", "0.75", True),
    (r"\dfrac{3}{4}", "3/4", True),
    ("1000", "1,000", True),
    ("The answer is $5.", "5", True),
    ("It costs -$5", "-5", True),
    ("50%", "0.5", True),
    ("0.5", "50%", True),
    ("50", "50%", True),
    ("0.4", "50%", False),
    ("2^10", "1024", True),
    ("1024", "2^{10}", True),
    ("x = 5", "5", True),
    ("5 apples", "5", True),
    (r"3 \times 4", "12", True),
    ("It is 5. #### 7", "Janet sells 9 eggs... #### 7", True),
    (r"\boxed{\sqrt{2}}", r"\sqrt{2}", True),
    ("2", r"\sqrt{2}", False),
    ("The answer is (1, 2).", "(1, 2)", True),
    ("(2, 1)", "(1, 2)", False),
    ("B", "(B)", True),
]


@pytest.mark.parametrize(("prediction", "reference", "correct"), MATH)
def test_math_answers_that_are_not_plain_numbers(prediction, reference, correct):
    assert check_math_answer(prediction, reference).correct is correct
    problem = Problem("m/1", "math", "q", reference)
    assert check_answer(problem, prediction).correct is correct  # the domain's checker


# (prediction, reference): wrong numbers a tolerance or a fallback once passed as right
WRONG_BUT_CLOSE = [
    ("192000150", "192000000"),  # a relative 1e-6 is 192 on a GSM8K-sized reference
    ("1450001", "1450000"),
    ("0.0000001", "0.0000005"),  # an absolute 1e-6 passes any tiny number
    (r"5\pi", "5"),  # not a number the checker reads: no falling back to its leading 5
    ("5 pi", "5"),
    (r"\boxed{3\sqrt{2}}", "3"),
]


@pytest.mark.parametrize(("prediction", "reference"), WRONG_BUT_CLOSE)
def test_a_wrong_number_close_to_the_reference_is_wrong(prediction, reference):
    result = check_math_answer(prediction, reference)
    assert (result.correct, result.score) == (False, 0.0)
    graded = check_math_answer(prediction, reference, graded=True)
    assert not graded.correct and graded.score < 1.0


@pytest.mark.parametrize(
    ("prediction", "reference"),
    [("0.1 * 30", "3"), ("1/3", "0.333333333"), ("192000000.0", "192000000"), ("2.50", "2.5")],
)
def test_float_rounding_of_the_right_number_is_still_right(prediction, reference):
    assert check_math_answer(prediction, reference).correct


def test_an_answer_that_is_not_a_real_number_is_wrong_not_an_error():
    # (-8)^(1/3) is complex in Python: it once raised TypeError and took the batch with it
    for prediction in (r"\boxed{(-8)^{1/3}}", "(-1)^0.5", "(-2)^{2.5}"):
        assert check_math_answer(prediction, "-2").correct is False


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.-+*/^()eE %$,{}\\fracsqrtpi ", max_size=40))
def test_the_math_checker_never_raises_on_what_an_executor_writes(prediction):
    for graded in (False, True):
        result = check_math_answer(prediction, "-2", graded)
        assert 0.0 <= result.score <= 1.0


def test_math_graded_credit_and_qa_normalisation():
    problem = Problem("m/1", "math", "q", "100")
    assert check_answer(problem, "105", graded=True).score == 0.4
    qa = Problem("q/1", "qa", "q", "The Eiffel Tower")
    assert check_answer(qa, "eiffel tower.").correct
    assert not check_answer(qa, "the tower").correct and check_answer(qa, "the tower").score > 0
