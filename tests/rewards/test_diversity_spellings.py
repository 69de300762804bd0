"""Spellings of one workflow are not diversity: a policy that writes ``Review ? X : X`` beside
``Review -> X``, ``(B * 2) * 2`` beside ``B * 4`` or ``[Custom, X] -> Format`` beside ``Custom ->
Format`` makes the executor do the same work, and the diversity reward must not pay for it
(``dsl.canonical.skeleton``). One property per test; the runs are the real interpreter's, over
a scripted executor whose every reply says which call it was (so a trace shows what ran)."""

from __future__ import annotations

import pytest

from flowgrpo.dsl import parse
from flowgrpo.dsl.canonical import canonical, skeleton
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.interpreter import run_workflow
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import RewardOptions
from flowgrpo.rewards.components import diversity
from flowgrpo.rewards.sample import make_sample

PROBLEM = Problem("m/1", "math", "What is 17 + 25?", "42")


def executor(pass_at: int) -> ScriptedBackend:
    """Reviews fail until call ``pass_at``; every other reply names its call."""

    def reply(request):
        if "Reply with PASS" in request.messages[-1].content:
            return "PASS" if request.context.call >= pass_at else "FAIL: check the sum"
        return f"Answer: {100 + request.context.call}"

    return ScriptedBackend(reply)


def run(workflow: str, pass_at: int):
    result = run_workflow(workflow, PROBLEM, executor(pass_at))
    assert result.error is None, result.error
    return result


def trace(workflow: str, pass_at: int) -> list[tuple]:
    return [(t.op, t.prompt, t.output) for t in run(workflow, pass_at).trace]


def diversity_of(*workflows: str) -> list[float]:
    group = [make_sample(PROBLEM, w) for w in workflows]
    assert all(s.valid for s in group), [s.report.errors for s in group]
    return list(diversity(group, RewardOptions()))


PASS_AT = range(1, 10)  # the review passes at its first, second, ... call, or never

SAME_RUN = [  # (one spelling, another): every call, prompt and reply the same
    ("Custom -> Review -> Revise", "Custom -> Review ? Revise : Revise"),
    ("Custom -> Review", "Custom -> Review ? done : done"),
    ("(Custom -> Review ? Revise : done) * 4", "((Custom -> Review ? Revise : done) * 2) * 2"),
    ("(Custom -> Review ? Revise : done) * 3", "(((Custom -> Review ? Revise : done)) * 3) * 1"),
    ("Custom -> (Review -> Revise) * 4", "Custom -> ((Review -> Revise) * 2) * 2"),
]


@pytest.mark.parametrize("pair", SAME_RUN, ids=[b for _, b in SAME_RUN])
@pytest.mark.parametrize("pass_at", PASS_AT)
def test_spellings_that_run_alike_are_one_workflow_for_diversity(pair, pass_at):
    assert trace(pair[0], pass_at) == trace(pair[1], pass_at)  # the interpreter: alike
    assert skeleton(parse(pair[0])) == skeleton(parse(pair[1]))


@pytest.mark.parametrize("pair", SAME_RUN, ids=[b for _, b in SAME_RUN])
def test_a_group_of_spellings_of_one_workflow_gets_no_diversity(pair):
    assert diversity_of(*pair) == [0.0, 0.0]


DEAD_BRANCHES = [  # nothing reads the block's candidates: the answer is the first branch's
    ("Custom -> Format", "[Custom, AnswerGenerate] -> Format"),
    ("Custom -> Format", "[Custom, Custom, AnswerGenerate] -> Format"),
    ("Custom -> Review ? Revise : done", "[Custom, AnswerGenerate] -> Review ? Revise : done"),
    ("(Custom -> Format) * 2", "([Custom, AnswerGenerate] -> Format) * 2"),
]


def by_operator(right: str) -> ScriptedBackend:
    """Replies by operator, not by call: ``right`` answers 42, the other generator 41; Review
    passes a 42; Revise answers 42; Format repeats the solution's number."""

    def reply(request):
        text, op = request.messages[-1].content, request.context.op
        if op == "Review":
            return "PASS" if "Answer: 42" in text else "FAIL: check the sum"
        if op == "Format":
            return "42" if "Answer: 42" in text else "41"
        return "Answer: 42" if op in (right, "Revise") else "Answer: 41"

    return ScriptedBackend(reply)


@pytest.mark.parametrize("pair", DEAD_BRANCHES, ids=[b for _, b in DEAD_BRANCHES])
@pytest.mark.parametrize("right", ["Custom", "AnswerGenerate"])
def test_branches_whose_candidates_nothing_reads_do_not_change_the_answer(pair, right):
    plain, padded = (run_workflow(w, PROBLEM, by_operator(right)) for w in pair)
    assert padded.calls > plain.calls  # the padding costs calls, and changes nothing else
    assert (padded.answer, padded.correct) == (plain.answer, plain.correct)


@pytest.mark.parametrize("pair", DEAD_BRANCHES, ids=[b for _, b in DEAD_BRANCHES])
def test_padding_a_workflow_with_unread_branches_gets_no_diversity(pair):
    assert skeleton(parse(pair[0])) == skeleton(parse(pair[1]))
    assert diversity_of(*pair) == [0.0, 0.0]


def test_a_loops_sequence_and_its_branch_spelling_run_differently_and_stay_apart():
    # in a loop a passing review skips the rest of a sequence, but not a branch
    seq, cond = "(Custom -> Review -> Revise) * 2", "(Custom -> Review ? Revise : Revise) * 2"
    assert any(trace(seq, p) != trace(cond, p) for p in PASS_AT)
    assert skeleton(parse(seq)) != skeleton(parse(cond))
    assert diversity_of(seq, cond) == [1.0, 1.0]


@pytest.mark.parametrize(
    "workflow",
    [
        "[Custom, AnswerGenerate] -> ScEnsemble",
        "[Custom, AnswerGenerate] -> Review ? Revise : done -> MdEnsemble",  # read later
        "([Custom, AnswerGenerate] -> Format -> ScEnsemble) * 2",
        # the body's next run reads what its last one left
        "[Custom, Custom] -> (ScEnsemble -> Review -> [Custom, AnswerGenerate]) * 2",
    ],
)
def test_a_parallel_block_an_ensembler_reads_is_kept(workflow):
    assert skeleton(parse(workflow)) == canonical(parse(workflow), instructions=False)


def test_an_operator_outside_the_aflow_set_may_read_the_candidates_so_the_block_is_kept():
    # a declared prompt operator may fill {candidates}: the block is not dropped for it
    workflow = parse("[Custom, AnswerGenerate] -> Pick")
    assert skeleton(workflow) == "[Custom, AnswerGenerate] -> Pick"
