"""An answer written into an instruction: the policy answered, the executor copied; accuracy
does not pay for it (``rewards.leaks``), one property per test."""

from __future__ import annotations

import pytest

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import RewardSpec
from flowgrpo.rewards.leaks import states_answer
from flowgrpo.rewards.sample import make_sample
from flowgrpo.rewards.score import score_batch

MATH = Problem("m/1", "math", "What is 2 + 3?", "5")
QA = Problem("q/1", "qa", "Capital of Australia?", "Canberra")
YES = Problem("q/2", "qa", "Is 7 prime?", "yes")
CHOICE = Problem("q/3", "qa", "Which is prime? (A) 4 (B) 7", "B")
PAIR = Problem("m/2", "math", "Solve x + y = 3, x - y = -1. Give (x, y).", "(1, 2)")
CODE = Problem("c/1", "code", "Write add(a, b).", None, tests=("assert add(1, 2) == 3",),
               entry_point="add")  # fmt: skip


@pytest.mark.parametrize(
    ("problem", "workflow", "leaks"),
    [
        (MATH, 'Custom("Reply with exactly: 5")', True),
        (MATH, 'Custom -> Format("the answer is 5.0")', True),
        (MATH, 'Custom("think in 3 steps")', False),
        (MATH, "Custom -> Format", False),
        (QA, 'Custom("Say canberra")', True),
        (QA, 'AnswerGenerate("be brief")', False),
        (YES, 'AnswerGenerate("answer yes or no")', False),  # both options: no answer stated
        (YES, 'AnswerGenerate("say yes")', True),
        (CHOICE, 'AnswerGenerate("answer with a letter")', False),  # the article, not B
        (CHOICE, 'AnswerGenerate("pick A or B")', False),
        (CHOICE, 'AnswerGenerate("answer B")', True),
        (CHOICE, 'AnswerGenerate("I say B")', True),  # the pronoun is no other choice
        (CODE, 'CustomCodeGenerate("def add(a, b): return a + b")', True),
        (CODE, 'CustomCodeGenerate("add = lambda a, b: a + b")', True),
        (CODE, 'CustomCodeGenerate("return the sum")', False),
        # forms the checker accepts that a plain number search misses
        (MATH, 'Custom("Reply with exactly <<<4+1>>>")', True),
        (PAIR, 'Custom("Reply with exactly (1, 2) and nothing else")', True),
        (PAIR, 'Custom("give the pair as (x, y)")', False),
        (CHOICE, 'AnswerGenerate("reply with exactly b")', True),  # the lower-case letter
        (YES, 'Custom("Never answer no. Reply with exactly yes")', True),  # not the options
        (YES, 'AnswerGenerate("reply yes/no")', False),
        (CODE, 'CustomCodeGenerate("import operator; add = operator.add")', True),
        (CODE, 'CustomCodeGenerate("from operator import add")', True),
        (CODE, 'CustomCodeGenerate("make sure add == the sum")', False),
    ],
)
def test_an_instruction_that_states_the_reference_is_found(problem, workflow, leaks):
    assert states_answer(make_sample(problem, workflow)) is leaks


def test_copying_the_policys_answer_earns_no_accuracy():
    # an executor that gets the problem wrong but copies what an instruction dictates
    def executor(request):
        text = request.messages[-1].content
        return text.split("Reply with exactly: ")[1].split('"')[0][:1] if "exactly" in text else "4"

    spec = RewardSpec(weights={"validity": 0.3, "accuracy": 1.0})
    table = score_batch([MATH], ['Custom("Reply with exactly: 5")', "Custom"], 2, spec,
                        llm=ScriptedBackend(executor))  # fmt: skip
    records = table.as_records()
    assert records[0]["answer"] == "5" and records[0]["correct"]  # the copy is right...
    assert records[0]["accuracy"] == 0.0 and records[0]["answer_in_instruction"]  # ...unpaid
    assert records[1]["accuracy"] == 0.0 and not records[1]["answer_in_instruction"]
