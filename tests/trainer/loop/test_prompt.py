"""The policy prompt: examples valid for their domain, operators in sync with the DSL."""

import pytest

from flowgrpo.dsl import operators_for_domain, validate
from flowgrpo.operators.models import build_tiny_tokenizer
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.loop.prompt import EXAMPLES, build_messages, render_prompt, system_prompt


@pytest.mark.parametrize("domain", sorted(EXAMPLES))
def test_every_example_is_a_valid_workflow_of_its_domain(domain):
    for _, workflow in EXAMPLES[domain]:
        assert validate(workflow, domain=domain).ok, workflow


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
