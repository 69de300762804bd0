"""The policy prompt: examples valid for their domain, operators in sync with the DSL."""

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import operators_for_domain, validate
from flowgrpo.dsl.fewshot import PromptSpec
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.models import build_tiny_tokenizer
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.loop.prompt import EXAMPLES, build_messages, render_prompt, system_prompt


@pytest.mark.parametrize("domain", sorted(EXAMPLES))
def test_every_example_is_a_valid_workflow_of_its_domain(domain):
    for _, workflow in EXAMPLES[domain]:
        assert validate(workflow, domain=domain).ok, workflow


@pytest.mark.parametrize("domain", sorted(EXAMPLES))
def test_every_example_is_one_a_default_runs_reward_accepts(domain):
    limits = executor_limits(ExecutorConfig()).static_limits()  # votes and retries counted
    for _, workflow in EXAMPLES[domain]:
        assert validate(workflow, domain=domain, limits=limits).ok, workflow


@pytest.mark.parametrize("domain", sorted(EXAMPLES))
def test_system_prompt_lists_exactly_the_domain_operators(domain):
    listed = system_prompt(domain).split("Operators: ")[1].rstrip(".").split(", ")
    assert set(listed) == operators_for_domain(domain)


def test_messages_end_with_the_problem_and_render_with_the_chat_template():
    problem = Problem("p/1", "math", "What is 2 + 2?", "4")
    messages = build_messages(problem)
    assert messages[-1] == {"role": "user", "content": "Problem: What is 2 + 2?"}
    assert [m["role"] for m in messages[1:-1]] == ["user", "assistant"] * 3
    text = render_prompt(problem, build_tiny_tokenizer())
    assert text.endswith("<|assistant|>") and "What is 2 + 2?" in text


def test_meta_keys_show_the_problem_labels_under_the_question_in_their_order():
    meta = {"difficulty": "easy", "template": "shopping", "expression": "3"}
    problem = Problem("p/2", "math", "Tom has 3 apples.", "3", meta=meta)
    spec = PromptSpec(meta_keys=["template", "difficulty"])
    content = build_messages(problem, spec)[-1]["content"]
    assert content == "Problem: Tom has 3 apples.\ntemplate: shopping\ndifficulty: easy"
    assert "expression" not in content  # only the keys listed
    assert build_messages(problem)[-1]["content"] == "Problem: Tom has 3 apples."


def test_a_problem_without_a_listed_meta_key_is_an_error_naming_it():
    problem = Problem("p/3", "math", "2 + 2?", "4", meta={"template": "combo"})
    message = (
        r"prompt.meta_keys: problem p/3 has no meta key\(s\) \['level'\] \(it has \['template'\]\)"
    )
    with pytest.raises(ConfigError, match=message):
        build_messages(problem, PromptSpec(meta_keys=["template", "level"]))


@pytest.mark.parametrize(
    ("raw", "message"),
    [("difficulty", "must be a list"), (["a", "a"], "repeats a key"), (["", "b"], "not a key")],
)
def test_bad_meta_keys_name_the_field(raw, message):
    with pytest.raises(ConfigError, match=f"prompt.meta_keys: .*{message}"):
        PromptSpec(meta_keys=raw)


def test_meta_keys_survive_the_saved_config():
    spec = PromptSpec(meta_keys=("template",))
    assert PromptSpec(**spec.to_dict()) == spec
