"""Interpreter semantics, batching, limits, unscorable runs and the cache (scripted backend)."""

from dataclasses import dataclass

import pytest

from flowgrpo.dsl import OPERATORS
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.interpreter import Limits, run_workflow, run_workflows
from flowgrpo.operators.ops import (
    OpSettings,
    get_operator,
    parse_verdict,
    register_operator,
    registered_operators,
)
from flowgrpo.operators.sandbox import ExecResult
from flowgrpo.operators.tasks.base import Problem

P = Problem("t/1", "math", "What is 2 + 3?", "5")
P2 = Problem("t/2", "math", "What is 10 - 4?", "6")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    score: float


def exact(problem, answer):
    ok = answer.strip() == problem.answer
    return Verdict(ok, float(ok))


def script(table):
    """A backend answering by operator: the op is recognisable from its prompt."""

    def answer(request):
        text = request.messages[-1].content
        for marker, reply in table.items():
            if marker in text:
                return reply(text) if callable(reply) else reply
        raise AssertionError(f"unexpected prompt: {text[:80]}")

    return ScriptedBackend(answer)


REVIEW = "Reply with PASS if it is correct"
REVISE = "fixing the problems in the feedback"
CUSTOM = "Solve the problem"
FORMAT = "Give only the final number"
CHOOSE = "Reply with the letter only"


def test_every_dsl_operator_has_an_implementation():
    assert registered_operators() == tuple(sorted(OPERATORS))


def test_operator_registry_rejects_unknown_and_duplicate_names():
    with pytest.raises(ValueError, match="'Solve' is not a DSL operator; known: Custom"):
        register_operator("Solve")
    with pytest.raises(ValueError, match="operator implementation 'Custom' is already registered"):
        register_operator("Custom", lambda state, instruction, settings: iter(()))
    with pytest.raises(ValueError, match=r"unknown operator implementation 'Costum'.*'Custom'"):
        get_operator("Costum")


def test_chain_passes_the_solution_along():
    llm = script({CUSTOM: "The answer is 5", FORMAT: "5"})
    result = run_workflow("Custom -> Format", P, llm, check=exact)
    assert result.answer == "5" and result.correct and result.score == 1.0
    assert [t.op for t in result.trace] == ["Custom", "Format"]
    assert result.calls == 2 and result.error is None


@pytest.mark.parametrize(
    ("verdict", "ops"),
    [("PASS", ["Custom", "Review"]), ("FAIL: wrong sum", ["Custom", "Review", "Revise"])],
)
def test_conditional_runs_the_failing_branch_only_when_the_checker_fails(verdict, ops):
    llm = script({CUSTOM: "4", REVIEW: verdict, REVISE: "5"})
    result = run_workflow("Custom -> Review ? Revise : done", P, llm, check=exact)
    assert [t.op for t in result.trace] == ops


def test_revise_sees_the_review_feedback():
    seen = []
    llm = script(
        {CUSTOM: "4", REVIEW: "FAIL: 2 + 3 is not 4", REVISE: lambda text: seen.append(text) or "5"}
    )
    assert run_workflow("Custom -> Review ? Revise : done", P, llm, check=exact).correct
    assert "2 + 3 is not 4" in seen[0]


def test_loop_stops_early_once_a_checker_passes():
    verdicts = iter(["FAIL: no", "PASS"])
    llm = script({CUSTOM: "4", REVIEW: lambda _: next(verdicts), REVISE: "5"})
    result = run_workflow("Custom -> (Review -> Revise) * 5", P, llm, check=exact)
    assert [t.op for t in result.trace] == ["Custom", "Review", "Revise", "Review"]


def test_loop_runs_count_times_without_a_passing_checker():
    llm = script({CUSTOM: "4", REVISE: "5"})
    result = run_workflow("Custom -> Revise * 3", P, llm, check=exact)
    assert [t.op for t in result.trace] == ["Custom", "Revise", "Revise", "Revise"]


def test_parallel_branches_become_candidates_and_run_in_one_batch():
    answers = iter(["5", "7", "5"])
    llm = script({CUSTOM: lambda _: next(answers), CHOOSE: "(C)"})
    result = run_workflow("[Custom, Custom, Custom] -> ScEnsemble", P, llm, check=exact)
    assert result.answer == "5"
    assert llm.batches == 2, "three branch calls in one batch, then the ensemble"


def test_ensemble_falls_back_to_majority_when_the_choice_is_unreadable():
    answers = iter(["7", "5", "5"])
    llm = script({CUSTOM: lambda _: next(answers), CHOOSE: "hmm, hard to say"})
    assert run_workflow("[Custom, Custom, Custom] -> ScEnsemble", P, llm, check=exact).answer == "5"


def test_many_workflows_share_batches_per_stage():
    llm = script({CUSTOM: "5", REVIEW: "PASS", FORMAT: "5"})
    pairs = [
        ("Custom -> Format", P),
        ("Custom -> Review ? Revise : done", P2),
        ("Custom -> Format", P2),
        ("Custom", P),
    ]
    results = run_workflows(pairs, llm, check=exact)
    assert len(results) == 4
    assert llm.batches == 2, "stage 1: four Custom calls; stage 2: Format, Review, Format"
    assert len(llm.calls) == 7


def test_identical_pairs_run_once():
    llm = script({CUSTOM: "5"})
    results = run_workflows([("Custom", P), ("(Custom)", P)], llm, check=exact)
    assert len(llm.calls) == 1 and results[0] is results[1]


def test_invalid_workflows_are_not_run():
    llm = script({})
    result = run_workflow("Revise -> ScEnsemble", P, llm, check=exact)
    assert not result.correct and result.calls == 0
    assert result.error.startswith("invalid workflow: needs_solution")


def test_call_budget_ends_the_run_with_a_reason():
    llm = script({CUSTOM: "4", REVISE: "4"})
    result = run_workflow(
        "Custom -> Revise * 5", P, llm, limits=Limits(max_llm_calls=3), check=exact
    )
    assert result.calls == 3
    assert "call budget" in result.error and not result.unscorable


def test_executor_failure_is_unscorable_not_wrong():
    llm = ScriptedBackend(lambda r: "5", fail_on=lambda r: True)
    result = run_workflow("Custom -> Format", P, llm, check=exact)
    assert result.unscorable and "executor failed" in result.error


def test_programmer_runs_code_and_retries_with_the_error():
    attempts = iter(
        [
            "```python\ndef solve():\n    return 1/0\n```",
            "```python\ndef solve():\n    return 2 + 3\n```",
        ]
    )
    prompts = []
    llm = script({"Define a function solve()": lambda t: prompts.append(t) or next(attempts)})
    result = run_workflow("Programmer", P, llm, check=exact)
    assert result.answer == "5" and result.correct
    assert result.code_runs == 2 and "ZeroDivisionError" in prompts[1]


def test_test_operator_runs_public_tests_and_asks_for_a_fix():
    problem = Problem(
        "c/1",
        "code",
        "Write add(a, b).",
        None,
        tests=("assert add(1, 2) == 3",),
        public_tests=("assert add(1, 2) == 3",),
        entry_point="add",
    )
    llm = script(
        {
            "Write the Python function": "```python\ndef add(a, b):\n    return a - b\n```",
            "fails its tests": "```python\ndef add(a, b):\n    return a + b\n```",
        }
    )
    result = run_workflow(
        "CustomCodeGenerate -> Test ? Revise : done",
        problem,
        llm,
        check=lambda p, a: Verdict("a + b" in a, 1.0),
    )
    assert "return a + b" in result.answer
    assert [t.op for t in result.trace] == ["CustomCodeGenerate", "Test", "Test", "Test"]


def test_an_operator_bug_becomes_an_error_not_a_crash():
    def broken_sandbox(codes, timeouts):
        raise RuntimeError("boom")

    llm = script({"Define a function solve()": "```python\ndef solve(): return 5\n```"})
    result = run_workflow("Programmer", P, llm, check=exact, sandbox=broken_sandbox)
    assert "code batch failed: RuntimeError: boom" in result.error and result.unscorable


def test_cache_counts_hits_and_survives_a_restart(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = ExecutionCache(path)
    llm = script({CUSTOM: "5"})
    first = run_workflow("Custom", P, llm, check=exact, cache=cache)
    again = run_workflow("Custom", P, llm, check=exact, cache=cache)
    assert again == first and len(llm.calls) == 1
    assert (cache.hits, cache.misses) == (1, 1)
    reloaded = ExecutionCache(path)
    assert run_workflow("Custom", P, llm, check=exact, cache=reloaded) == first
    assert len(llm.calls) == 1 and reloaded.hits == 1


def test_cache_key_of_limits_is_canonical_json_of_every_setting():
    key = Limits().cache_key()
    assert key == Limits().cache_key()
    assert '"max_llm_calls":12' in key and '"programmer_retries":1' in key
    assert Limits(ops=OpSettings(md_votes=5)).cache_key() != key
    assert Limits(max_seconds=60).cache_key() != key


def test_cache_rejects_keys_that_are_not_strings():
    with pytest.raises(TypeError, match="cache key parts must be strings"):
        ExecutionCache().get(("Custom", "t/1", "scripted", Limits()))


def test_other_limits_miss_the_cache():
    cache, llm = ExecutionCache(), script({CUSTOM: "5"})
    run_workflow("Custom", P, llm, check=exact, cache=cache)
    run_workflow("Custom", P, llm, Limits(max_llm_calls=3), check=exact, cache=cache)
    assert len(llm.calls) == 2 and len(cache) == 2


def test_unscorable_results_are_not_cached():
    cache = ExecutionCache()
    failing = ScriptedBackend(lambda r: "5", fail_on=lambda r: True)
    run_workflow("Custom", P, failing, check=exact, cache=cache)
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("text", "passed"),
    [
        ("PASS", True),
        ("The solution is correct.", True),
        ("FAIL: the sum is wrong", False),
        ("Incorrect. 2+3 is 5", False),
        ("", False),
        ("I am not sure", False),
        ("Looks good to me", True),
        ("The answer is not correct", False),
        # a negated pass word is a fail (each once read as PASS)
        ("The answer 4 is not right; it should be 5", False),
        ("This does not pass", False),
        ("It isn't correct", False),
        ("NOT PASS", False),
        ("Not bad: correct", True),
    ],
)
def test_review_verdicts_are_parsed_from_free_text(text, passed):
    assert parse_verdict(text) is passed


@pytest.mark.parametrize(
    ("reply", "chosen"),
    [
        ("C", 2),
        ("(b)", 1),
        ("B. It agrees with the others", 1),
        ("The answer is B", 1),
        ("I pick C", 2),  # once None (the "I"): the majority instead
        ("A careful check shows C", 2),  # once A
        ("C) because A is wrong", 2),
        ("none of them", None),
    ],
)
def test_an_ensemble_reply_is_read_as_the_letter_it_chooses(reply, chosen):
    from flowgrpo.operators.ops import _letter

    assert _letter(reply, 3) == chosen


def test_exec_result_type_is_what_the_interpreter_expects():
    assert {"ok", "stdout", "stderr", "reason", "seconds"} <= set(ExecResult.__dataclass_fields__)


def test_test_operator_handles_multi_line_tests_like_humaneval():
    check_fn = "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)"
    problem = Problem("c/2", "code", "Write add(a, b).", None, tests=(check_fn,), entry_point="add")
    llm = script({"Write the Python function": "```python\ndef add(a, b):\n    return a + b\n```"})
    result = run_workflow(
        "CustomCodeGenerate -> Test ? Revise : done",
        problem,
        llm,
        check=lambda p, a: Verdict(True, 1.0),
    )
    assert [t.op for t in result.trace] == ["CustomCodeGenerate", "Test"], "tests passed first time"
