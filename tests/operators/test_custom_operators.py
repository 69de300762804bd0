"""User operators: prompt templates and functions, declared with a role, run by the interpreter."""

import pytest

from flowgrpo.dsl import OPERATORS, validate
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.custom import (
    call_llm,
    register_operators,
    register_prompt_operator,
    remove_operator,
)
from flowgrpo.operators.interpreter import Limits, run_workflow
from flowgrpo.operators.ops import get_operator, register_operator
from flowgrpo.operators.tasks.base import Problem

P = Problem("t/1", "math", "What is 2 + 3?", "5")
QA = Problem("q/1", "qa", "Capital of France?", "Paris")
CRITIQUE = "Critique this answer to {question}: {solution}. {instruction} Say PASS or FAIL."


@pytest.fixture
def cleanup():
    names = []
    yield names.append
    for name in names:
        remove_operator(name)


def backend(**replies):
    """Answers by the first word of the prompt (the operator's template starts with it)."""

    def answer(request):
        text = request.messages[-1].content
        return next((r for key, r in replies.items() if text.startswith(key)), "4")

    return ScriptedBackend(answer)


def test_a_prompt_checker_validates_and_runs_through_the_interpreter(cleanup):
    register_prompt_operator("Critique", "checker", CRITIQUE, domains=("math", "qa"))
    cleanup("Critique")
    workflow = 'Custom -> Critique("be strict") ? Revise : done'
    assert validate(workflow, domain="math").ok
    llm = backend(Critique="FAIL: 2 + 3 is 5", Rewrite="5")
    result = run_workflow(workflow, P, llm)
    assert [t.op for t in result.trace] == ["Custom", "Critique", "Revise"]
    critique_prompt = result.trace[1].prompt
    assert "What is 2 + 3?" in critique_prompt and ": 4." in critique_prompt
    assert "be strict" in critique_prompt
    assert result.answer == "5" and result.correct  # Revise fixed Custom's "4"
    passing = run_workflow(workflow, P, backend(Critique="PASS", Solve="5"))
    assert [t.op for t in passing.trace] == ["Custom", "Critique"]


def test_prompt_generators_refiners_and_ensemblers_use_the_reply_by_role(cleanup):
    register_prompt_operator("Draft", "generator", "Draft: {question}")
    register_prompt_operator("Pick", "ensembler", "Pick one of:\n{candidates}")
    register_prompt_operator("Shorten", "refiner", "Shorten {solution}", domains=("qa",))
    for name in ("Draft", "Pick", "Shorten"):
        cleanup(name)
    llm = backend(Draft="Paris is the capital", Pick="B", Shorten="Paris")
    result = run_workflow("[Draft, Custom] -> Pick -> Shorten", QA, llm)
    assert result.correct and result.answer == "Paris"
    pick_prompt = next(t.prompt for t in result.trace if t.op == "Pick")
    assert "(A) Paris is the capital" in pick_prompt and "(B) 4" in pick_prompt
    assert not validate("Draft -> Shorten", domain="math").ok  # Shorten is qa only


def test_a_function_operator_registered_with_a_role(cleanup):
    def double_check(state, instruction, settings):
        reply = yield from call_llm(state, "DoubleCheck", f"Recheck {state.solution}", settings)
        state.passed = reply.strip() == "ok"
        state.feedback = None if state.passed else reply

    register_operator("DoubleCheck", double_check, role="checker")
    cleanup("DoubleCheck")
    assert OPERATORS["DoubleCheck"].role == "checker"
    result = run_workflow("Custom -> DoubleCheck ? Revise : done", P, backend(Recheck="ok"))
    assert [t.op for t in result.trace] == ["Custom", "DoubleCheck"]


def test_register_operator_refuses_undeclared_names_without_a_role():
    with pytest.raises(ValueError, match=r"not a DSL operator; known: .*role="):
        register_operator("Nope", lambda state, instruction, settings: iter(()))
    assert "Nope" not in OPERATORS


def test_operators_from_config_records(cleanup):
    records = [
        {"name": "Critique", "role": "checker", "prompt": CRITIQUE, "domains": ["math"]},
        {"name": "Echo", "role": "generator", "function": "tests_plugin_missing.mod:fn"},
    ]
    with pytest.raises(ValueError, match=r"operators\[1\]: cannot import module"):
        register_operators(records)
    cleanup("Critique")  # the first record was registered before the second failed
    register_operators(records[:1])  # the same record again: no-op
    assert OPERATORS["Critique"].domains == ("math",)
    with pytest.raises(ValueError, match=r"ops\[0\]: operator Bad: unknown .*\{answer\}"):
        register_operators([{"name": "Bad", "role": "refiner", "prompt": "{answer}"}], "ops")
    with pytest.raises(ValueError, match=r"operators\[0\]: give prompt"):
        register_operators([{"name": "Bare", "role": "refiner"}])
    with pytest.raises(ValueError, match="prompt OR function"):
        register_operators([{"name": "X", "role": "refiner", "prompt": "a", "function": "b.c:d"}])
    assert "Bad" not in OPERATORS and "Bare" not in OPERATORS


def test_a_declared_operator_without_implementation_says_so():
    from flowgrpo.dsl import OperatorSpec, declare_operator

    declare_operator(OperatorSpec("Ghost", "generator"))
    try:
        with pytest.raises(ValueError, match="declared but has no implementation"):
            get_operator("Ghost")
    finally:
        remove_operator("Ghost")


def _twice(state, instruction, settings):
    """A refiner that asks twice: a draft, then a check of the draft."""
    draft = yield from call_llm(state, "Twice", f"Draft {state.solution}", settings)
    state.solution = yield from call_llm(state, "Twice", f"Check {draft}", settings)


def test_a_function_operators_declared_calls_are_counted_and_kept(cleanup):
    # Custom (1) + Twice (2) x 3 = 7 executor calls: valid within a 7-call budget, run to its end
    register_operator("Twice", _twice, role="refiner", calls=2)
    cleanup("Twice")
    workflow = "Custom -> Twice -> Twice -> Twice"
    static = Limits(max_llm_calls=7).static_limits()
    assert validate(workflow, domain="math", limits=static).calls == 7
    result = run_workflow(workflow, P, backend(), Limits(max_llm_calls=7))
    assert result.error is None and result.calls == 7
    over = validate(workflow + " -> Format", domain="math", limits=static)
    assert not over.ok and "Twice makes 2" in over.errors[0].message


def test_an_undeclared_second_call_is_what_the_budget_stops(cleanup):
    # declared as one call (the default), the same workflow counts 4 and the 7 calls it makes
    # run past a 4-call budget: what declaring calls prevents
    register_operator("Twice", _twice, role="refiner")
    cleanup("Twice")
    workflow = "Custom -> Twice -> Twice -> Twice"
    assert validate(workflow, domain="math", limits=Limits(max_llm_calls=4).static_limits()).ok
    result = run_workflow(workflow, P, backend(), Limits(max_llm_calls=4))
    assert result.error is not None and "budget" in result.error


def test_calls_in_records(cleanup):
    records = [{"name": "Twice2", "role": "refiner", "function": f"{__name__}:_twice", "calls": 2}]
    register_operators(records)
    cleanup("Twice2")
    assert OPERATORS["Twice2"].calls == 2
    with pytest.raises(
        ValueError, match=r"operators\[0\]: calls: a prompt operator makes one call"
    ):
        register_operators([{"name": "P2", "role": "refiner", "prompt": "{solution}", "calls": 2}])
    for bad in (0, True, "2"):
        with pytest.raises(
            ValueError, match=r"calls must be a whole number >= 1|calls: expected an"
        ):
            register_operators([{"name": "B2", "role": "refiner", "function": "m:f", "calls": bad}])
    assert "P2" not in OPERATORS and "B2" not in OPERATORS


def test_records_declared_without_implementing_them():
    """What validating a run's outputs needs: the table, nothing registered or imported."""
    from flowgrpo.operators.custom import load_extensions
    from flowgrpo.operators.ops import OPERATOR_IMPLS

    records = [
        {"name": "Murmur", "role": "refiner", "prompt": "Say {solution} softly."},
        {"name": "Mumble", "role": "refiner", "function": "tests_plugin_missing.mod:fn"},
    ]
    table = load_extensions((), records, implement=False)
    assert table["Murmur"].role == "refiner" and "Mumble" in table
    assert validate("Custom -> Murmur -> Mumble", domain="qa", operators=table).ok
    assert "Murmur" not in OPERATOR_IMPLS and "Mumble" not in OPERATOR_IMPLS
    assert "Murmur" not in OPERATORS  # nor declared process-wide
    other = [{"name": "Murmur", "role": "refiner", "prompt": "Whisper {solution}."}]
    assert load_extensions((), other, implement=False)["Murmur"].role == "refiner"
