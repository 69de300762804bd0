"""Reward components, one table test each, with hand-computed scores; the component registry."""

import dataclasses
import math

import numpy as np
import pytest

from flowgrpo.operators.interpreter import ExecutionResult
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import (
    REWARD_COMPONENTS,
    RecentWorkflows,
    RewardOptions,
    RewardSpec,
    available_components,
    get_component,
    make_sample,
    register_component,
)

MATH = Problem("m/1", "math", "What is 2 + 3?", "5")
BIG = Problem("m/2", "math", "How many?", "192000000")
CODE = Problem("c/1", "code", "def add(a, b):", None, tests=("assert add(1, 2) == 3",) * 4)
QA = Problem("q/1", "qa", "Capital of France?", "Paris")
OPTS = RewardOptions()
NAN = math.nan


def run(calls=1, correct=False, score=None, answer="4", tokens=0, unscorable=False):
    score = float(correct) if score is None else score
    return ExecutionResult(
        answer, correct, score, calls=calls, tokens=tokens, unscorable=unscorable
    )


def score(name, samples, options=OPTS, history=None):
    out = get_component(name)(samples, options, history)
    assert out.dtype == np.float64 and out.shape == (len(samples),)
    return out


def same(actual, expected):
    np.testing.assert_allclose(actual, np.array(expected, dtype=float), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- validity

VALIDITY_CASES = [
    ("### Step 1: Analyze the problem", 0.0),  # fallback
    ("Custom -> -> Format", 0.1),  # syntax error
    ("Revise -> Custom", 0.4),  # needs_solution
    ("CustomCodeGenerate", 0.4),  # operator not allowed for math
    ("Custom -> Revise", 0.9),  # revise_without_feedback warning
    ("Custom -> Review ? Revise : done", 1.0),
    ("```\nCustom -> Format\n```", 1.0),  # fenced: validity ignores formatting
]


@pytest.mark.parametrize(("completion", "expected"), VALIDITY_CASES)
def test_validity_levels(completion, expected):
    same(score("validity", [make_sample(MATH, completion)]), [expected])


def test_validity_levels_are_configurable():
    options = RewardOptions(
        validity_fallback=0.05,
        validity_syntax_error=0.2,
        validity_semantic_error=0.3,
        validity_warnings=0.6,
        validity_valid=0.7,
    )
    group = [make_sample(MATH, c) for c, _ in VALIDITY_CASES]
    same(score("validity", group, options), [0.05, 0.2, 0.3, 0.3, 0.6, 0.7, 0.7])


def test_validity_ignores_the_execution_even_when_unscorable():
    sample = make_sample(MATH, "Custom", run(unscorable=True))
    same(score("validity", [sample]), [1.0])


# --------------------------------------------------------------------------- accuracy

# (problem, completion, execution, options, expected)
ACCURACY_CASES = [
    (MATH, "prose only", None, OPTS, 0.0),
    (MATH, "Revise -> Custom", None, OPTS, 0.0),
    (MATH, "Custom", None, OPTS, NAN),  # valid, not executed
    (MATH, "Custom", run(unscorable=True), OPTS, NAN),
    (MATH, "Custom", run(correct=True, answer="5"), OPTS, 1.0),
    (MATH, "Custom", run(answer="5.2"), OPTS, 0.0),  # graded_math off by default
    (MATH, "Custom", run(answer="5.2"), RewardOptions(graded_math=True), 0.4),  # 4% off
    (MATH, "Custom", run(answer="5.01"), RewardOptions(graded_math=True), 0.7),  # 0.2% off
    (MATH, "Custom", run(answer="50"), RewardOptions(graded_math=True), 0.0),
    (MATH, "Custom", run(answer=None), RewardOptions(graded_math=True), 0.0),
    # a near miss of a large integer is a tier, not "exact within 1e-6" (capped at 0.9)
    (BIG, "Custom", run(answer="192000150"), RewardOptions(graded_math=True), 0.7),
    (CODE, "CustomCodeGenerate", run(score=0.5), OPTS, 0.5),  # graded_code on by default
    (CODE, "CustomCodeGenerate", run(score=0.5), RewardOptions(graded_code=False), 0.0),
    (CODE, "CustomCodeGenerate", run(score=0.95), OPTS, 0.9),  # capped at max_partial_credit
    (CODE, "CustomCodeGenerate", run(correct=True), OPTS, 1.0),
    (QA, "Custom", run(score=0.5, answer="Paris France"), OPTS, 0.0),
    (QA, "Custom", run(score=0.5, answer="Paris France"), RewardOptions(graded_qa=True), 0.5),
]


@pytest.mark.parametrize(
    ("problem", "completion", "execution", "options", "expected"), ACCURACY_CASES
)
def test_accuracy(problem, completion, execution, options, expected):
    same(score("accuracy", [make_sample(problem, completion, execution)], options), [expected])


def test_accuracy_of_a_custom_check_that_disagrees_stays_below_correct():
    # the check said wrong, yet the graded tiers would say exact: capped, never 1.0
    sample = make_sample(MATH, "Custom", run(answer="5"))
    same(score("accuracy", [sample], RewardOptions(graded_math=True)), [0.9])


# --------------------------------------------------------------------------- cost

COST_CASES = [
    ("prose only", None, OPTS, 0.0),
    ("Revise -> Custom", None, OPTS, 0.0),
    ("Custom", None, OPTS, NAN),
    ("Custom", run(calls=3, unscorable=True), OPTS, NAN),
    # the default normaliser is the default call budget, 12 calls
    ("Custom", run(calls=1), OPTS, 11 / 12),
    ("Custom -> Format", run(calls=2, correct=True), OPTS, 10 / 12),
    ("Custom", run(calls=12), OPTS, 0.0),
    ("Custom", run(calls=35), OPTS, 0.0),  # clamped
    ("Custom", run(calls=1), RewardOptions(cost_max_calls=4), 0.75),
    ("Custom", run(calls=1), RewardOptions(cost_max_calls=20), 0.95),  # another scale
    (
        "Custom",
        run(calls=2, tokens=250),
        RewardOptions(cost_max_tokens=1000),
        0.5 * (10 / 12 + 0.75),
    ),
    ("Custom", run(calls=2, tokens=5000), RewardOptions(cost_max_tokens=1000), 0.5 * 10 / 12),
]


@pytest.mark.parametrize(("completion", "execution", "options", "expected"), COST_CASES)
def test_cost(completion, execution, options, expected):
    same(score("cost", [make_sample(MATH, completion, execution)], options), [expected])


# --------------------------------------------------------------------------- repeated runs


def repeated(first, *rest, completion="Custom"):
    """A sample whose workflow ran more than once (rollout.executions)."""
    sample = make_sample(MATH, completion, first)
    return dataclasses.replace(sample, repeats=tuple(rest))


def test_accuracy_and_cost_average_over_the_repeats():
    wrong, right = run(calls=1, answer="4"), run(calls=3, correct=True, answer="5")
    sample = repeated(right, wrong, wrong, right)
    same(score("accuracy", [sample]), [(1 + 0 + 0 + 1) / 4])
    same(score("cost", [sample]), [(9 / 12 + 11 / 12 + 11 / 12 + 9 / 12) / 4])  # 12-call scale


def test_repeats_average_partial_credit_too():
    sample = repeated(run(answer="5.2"), run(correct=True, answer="5"))
    same(score("accuracy", [sample], RewardOptions(graded_math=True)), [(0.4 + 1.0) / 2])


def test_unscorable_repeats_are_left_out_of_the_mean():
    sample = repeated(run(unscorable=True), run(correct=True, answer="5"), run(answer="4"))
    assert not sample.unscorable
    same(score("accuracy", [sample]), [0.5])


def test_a_sample_is_unscorable_only_when_every_run_is():
    sample = repeated(run(unscorable=True), run(unscorable=True))
    assert sample.unscorable
    same(score("accuracy", [sample]), [NAN])
    same(score("cost", [sample]), [NAN])


def test_an_invalid_workflow_scores_zero_whatever_its_repeats():
    sample = repeated(run(correct=True, answer="5"), completion="Revise -> Custom")
    same(score("accuracy", [sample]), [0.0])


# --------------------------------------------------------------------------- diversity

A, B, C = "Custom -> Format", "Custom", "Custom -> Review ? Revise : done"


def group_of(*completions):
    return [make_sample(MATH, c) for c in completions]


DIVERSITY_CASES = [
    # canonical: share of the K - 1 siblings with a different canonical form
    ((A, A, A, A), OPTS, [0, 0, 0, 0]),
    ((A, B, C), OPTS, [1, 1, 1]),
    ((A, A, B, "prose only"), OPTS, [2 / 3, 2 / 3, 1, 0]),
    (("```\nCustom ->  Format\n```", A, B), OPTS, [0.5, 0.5, 1]),  # same canonical form
    ((A, "Revise -> Custom"), OPTS, [1, 0]),  # invalid: 0 while diversity_requires_valid
    ((A, "Revise -> Custom"), RewardOptions(diversity_requires_valid=False), [1, 1]),
    ((A, "Custom -> -> Format"), RewardOptions(diversity_requires_valid=False), [1, 0]),
    ((A,), OPTS, [0]),  # no siblings
    # structural: bags A={Custom, Format, <chain>}, B={Custom}: Jaccard distance 1 - 1/3
    ((A, B), RewardOptions(diversity_metric="structural"), [2 / 3, 2 / 3]),
    ((A, A, B), RewardOptions(diversity_metric="structural"), [1 / 3, 1 / 3, 2 / 3]),
    ((A, B, "prose only"), RewardOptions(diversity_metric="structural"), [5 / 6, 5 / 6, 0]),
    ((A, A), RewardOptions(diversity_metric="structural"), [0, 0]),
    # wording is not diversity: the same workflow with an empty, a re-cased or a made-up
    # instruction sends the executor the same work (an empty one, the same prompt)
    (
        (A, 'Custom("") -> Format', 'Custom -> Format("FORMAT")', 'Custom("x") -> Format("y")'),
        OPTS,
        [0, 0, 0, 0],
    ),
    ((A, 'Custom("") -> Format'), RewardOptions(diversity_metric="structural"), [0, 0]),
    ((A, 'Custom("be brief")'), OPTS, [1, 1]),  # a different workflow still counts
    # a loop of one runs its body once, as the body alone does: the same workflow
    (
        (A, "(Custom -> Format) * 1", "Custom * 1 -> Format", "Custom -> Format * 1"),
        OPTS,
        [0, 0, 0, 0],
    ),
    ((A, "(Custom -> Format) * 2"), OPTS, [1, 1]),
]


@pytest.mark.parametrize(("completions", "options", "expected"), DIVERSITY_CASES)
def test_diversity(completions, options, expected):
    same(score("diversity", group_of(*completions), options), expected)


def test_diversity_blends_rarity_against_history():
    history = RecentWorkflows(window_batches=4)
    history.push([A, A, B])  # rarity: A 0, B 0.5, C 1
    options = RewardOptions(diversity_history_weight=0.5)
    group = group_of(A, B, C, C)
    # group part: A 1, B 1, C 2/3
    same(score("diversity", group, options, history), [0.5, 0.75, 0.5 * 2 / 3 + 0.5, 5 / 6])
    # without a history, or with weight 0, only the group counts
    same(score("diversity", group, options), [1, 1, 2 / 3, 2 / 3])
    same(score("diversity", group, OPTS, history), [1, 1, 2 / 3, 2 / 3])


def test_history_rarity_is_not_bought_with_a_new_instruction():
    history = RecentWorkflows(window_batches=4)
    history.push([A, A, B])
    options = RewardOptions(diversity_history_weight=1.0)
    same(score("diversity", group_of('Custom("seen before?") -> Format', B), options, history),
         [0.0, 0.5])  # fmt: skip


def test_diversity_never_reads_the_execution():
    group = [make_sample(MATH, A, run(unscorable=True)), make_sample(MATH, B)]
    same(score("diversity", group), [1, 1])


# --------------------------------------------------------------------------- format

FORMAT_CASES = [
    ("Custom -> Format", 1.0),
    ("  Custom -> Format\n", 1.0),
    ("Custom -> -> Format", 1.0),  # formatting only: validity scores the syntax
    ("```\nCustom -> Format\n```", 0.0),
    ("<workflow>Custom</workflow>", 0.0),
    ("Sure! Workflow: Custom -> Format", 0.0),
    ("I would just think hard.", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), FORMAT_CASES)
def test_format(completion, expected):
    same(score("format", [make_sample(MATH, completion)]), [expected])


# --------------------------------------------------------------------------- registry


def test_builtin_components_are_registered():
    names = available_components()
    assert set(names) >= {"validity", "accuracy", "diversity", "cost", "format"}
    assert isinstance(names, tuple) and list(names) == sorted(names)


def test_unknown_component_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown reward component 'speed'.*validity"):
        get_component("speed")
    with pytest.raises(ValueError, match=r"'validty' \(did you mean 'validity'\?\)"):
        get_component("validty")


def test_duplicate_registration_raises():
    with pytest.raises(ValueError, match="already registered"):
        register_component("validity")(lambda group, options, history: np.zeros(len(group)))


def test_a_registered_component_can_be_used_in_a_spec():
    try:
        register_component("test_length")(
            lambda group, options, history: np.array([len(s.completion) / 100 for s in group])
        )
        spec = RewardSpec({"test_length": 1.0})
        assert spec.names == ("test_length",)
        same(get_component("test_length")(group_of("Custom"), OPTS, None), [0.06])
    finally:
        REWARD_COMPONENTS.unregister("test_length")
    with pytest.raises(ValueError, match="unknown reward component"):
        RewardSpec({"test_length": 1.0}).check_names()


def test_a_spec_can_name_a_component_by_dotted_path():
    path = "flowgrpo.rewards.components:validity"
    try:
        spec = RewardSpec({path: 1.0})
        spec.check_names()
        assert spec.names == (path,)
        assert get_component(path) is get_component("validity")
    finally:
        REWARD_COMPONENTS.unregister(path)
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        RewardSpec({"flowgrpo.rewards.components:nope": 1.0}).check_names()
