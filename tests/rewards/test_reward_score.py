"""The reward table: identical failing groups, the four-case ordering, permutation and batch-size
independence, NaN handling, and prepare_samples / score_batch end to end (scripted executor)."""

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.interpreter import ExecutionResult
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import (
    REWARD_COMPONENTS,
    RecentWorkflows,
    RewardOptions,
    RewardSpec,
    RewardTable,
    check_group_size,
    fill_group_mean,
    make_sample,
    prepare_samples,
    register_component,
    score_batch,
    score_samples,
    weighted_sum,
)

P = Problem("m/1", "math", "What is 2 + 3?", "5")
Q = Problem("m/2", "math", "What is 10 - 4?", "6")
NAN = math.nan
ALL = RewardSpec({"validity": 0.3, "accuracy": 1.0, "diversity": 0.1, "cost": 0.05, "format": 0.1})


def run(calls=2, correct=False, unscorable=False):
    return ExecutionResult("5" if correct else "4", correct, float(correct), calls=calls,
                           unscorable=unscorable)  # fmt: skip


def same(actual, expected):
    np.testing.assert_allclose(actual, np.array(expected, dtype=float), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- the table


def test_k_identical_valid_workflows_that_all_fail():
    group = [make_sample(P, "Custom -> Format", run(calls=2)) for _ in range(8)]
    table = score_samples(group, 8, ALL)
    assert table.names == ("validity", "accuracy", "diversity", "cost", "format")
    #               validity accuracy diversity cost format
    same(table.scores, [[1.0, 0.0, 0.0, 10 / 12, 1.0]] * 8)  # 2 calls of a 12-call budget
    assert (table.scores.max(axis=0) == table.scores.min(axis=0)).all()  # zero variance
    same(table.total(), [0.3 * 1.0 + 0.05 * 10 / 12 + 0.1 * 1.0] * 8)


def test_k_identical_failing_workflows_with_history_still_have_zero_variance():
    history = RecentWorkflows()
    history.push(["Custom -> Format", "Custom"])
    spec = RewardSpec(options=RewardOptions(diversity_history_weight=0.5))
    group = [make_sample(P, "Custom -> Format", run()) for _ in range(8)]
    table = score_samples(group, 8, spec, history)
    same(table.component("diversity"), [0.0] * 8)  # group 0, rarity 0 (most common)
    assert (table.scores.max(axis=0) == table.scores.min(axis=0)).all()


def test_only_diversity_varies_when_identical_failures_get_a_distinct_sibling():
    group = [make_sample(P, "Custom -> Format", run()) for _ in range(7)]
    group.append(make_sample(P, "Custom -> Review ? Revise : done", run(calls=2)))
    table = score_samples(group, 8)
    spread = table.scores.max(axis=0) - table.scores.min(axis=0)
    varying = [n for n, s in zip(table.names, spread) if s > 0]
    assert varying == ["diversity"]
    same(table.component("diversity"), [1 / 7] * 7 + [1.0])


# (completion, execution): fallback, syntax error, semantic error, valid-but-wrong, correct
FOUR_CASES = [
    ("I would add the numbers.", None),
    ("Custom -> -> Format", None),
    ("Revise -> Custom", None),
    ("Custom -> Format", run(calls=2)),
    ("Custom -> Format", run(calls=2, correct=True)),
]


def test_default_reward_orders_fallback_invalid_wrong_correct_with_other_components_equal():
    spec = RewardSpec()
    w = np.array(spec.active_weights)
    o = spec.options
    levels = [o.validity_fallback, o.validity_syntax_error, o.validity_semantic_error]
    for valid_level in (o.validity_warnings, o.validity_valid):
        for diversity in (0.0, 0.5, 1.0):
            for cost in (0.0, 0.9, 1.0):
                rows = [[v, 0.0, diversity, cost] for v in levels]
                rows += [[valid_level, 0.0, diversity, cost], [valid_level, 1.0, diversity, cost]]
                totals = weighted_sum(np.array(rows), w)
                assert (np.diff(totals) > 0).all(), (valid_level, diversity, cost, totals)


def test_default_reward_orders_the_four_cases_end_to_end():
    group = [make_sample(P, c, e) for c, e in FOUR_CASES]
    table = score_samples(group, len(group))
    #          validity accuracy diversity cost
    expected = [
        [0.0, 0.0, 0.0, 0.0],  # fallback
        [0.1, 0.0, 0.0, 0.0],  # syntax error
        [0.4, 0.0, 0.0, 0.0],  # semantic error
        [1.0, 0.0, 0.75, 10 / 12],  # valid, wrong (the correct sibling has the same workflow)
        [1.0, 1.0, 0.75, 10 / 12],  # correct (2 calls of the default 12-call budget)
    ]
    same(table.scores, expected)
    cost = 0.05 * 10 / 12
    same(table.total(), [0.0, 0.03, 0.12, 0.375 + cost, 1.375 + cost])
    assert (np.diff(table.total()) > 0).all()


MIXED = [
    ("Custom -> Format", run(calls=2)),
    ("Custom -> Format", run(calls=2)),
    ("Custom", run(calls=1, correct=True)),
    ("Custom -> Review ? Revise : done", run(calls=3, unscorable=True)),
    ("Revise -> Custom", None),
    ("Custom -> -> Format", None),
    ("no workflow here", None),
    ("[Custom, Custom] -> ScEnsemble", run(calls=3, correct=True)),
]


def mixed_group(problem=P):
    return [make_sample(problem, c, e) for c, e in MIXED]


SPECS = [
    ALL,
    RewardSpec(options=RewardOptions(diversity_metric="structural")),
    RewardSpec(options=RewardOptions(diversity_history_weight=0.3)),
]


@settings(max_examples=40, deadline=None)
@given(order=st.permutations(range(len(MIXED))), spec_index=st.sampled_from(range(len(SPECS))))
def test_scores_do_not_depend_on_the_order_within_a_group(order, spec_index):
    spec, group = SPECS[spec_index], mixed_group()
    history = RecentWorkflows()
    history.push(["Custom", "Custom", "Custom -> Format"])
    base = score_samples(group, 8, spec, history, update_history=False)
    shuffled = score_samples([group[i] for i in order], 8, spec, history, update_history=False)
    same(shuffled.scores, base.scores[list(order)])


def test_scores_of_a_group_do_not_depend_on_other_groups():
    alone = score_samples(mixed_group(), 8, ALL).scores
    other = [make_sample(Q, "Custom", run(calls=1, correct=True)) for _ in range(8)]
    before = score_samples(other + mixed_group(), 8, ALL).scores
    after = score_samples(mixed_group() + other + other, 8, ALL).scores
    same(before[8:], alone)
    same(after[:8], alone)


def test_unscorable_sample_has_nan_accuracy_and_cost_only():
    table = score_samples(mixed_group(), 8, ALL)
    row = dict(zip(table.names, table.scores[3]))
    assert math.isnan(row["accuracy"]) and math.isnan(row["cost"])
    assert row["validity"] == 1.0 and row["diversity"] == 1.0 and row["format"] == 1.0
    assert table.details[3]["unscorable"] and table.scorable().all()
    same(table.total()[3], 0.3 + 0.1 + 0.1)  # NaN components left out, not renormalised


def test_table_details_and_records():
    table = score_samples(mixed_group(), 8, ALL)
    d = table.details
    assert d[2]["canonical"] == "Custom" and d[2]["correct"] and d[2]["calls"] == 1
    assert d[4]["errors"] == ("needs_solution",) and not d[4]["valid"] and d[4]["syntax_ok"]
    assert d[5]["errors"] == ("syntax_error",) and d[5]["canonical"] is None
    assert d[6]["fallback"] and d[6]["calls"] is None and not d[6]["executed"]
    assert d[7]["structure"] == "parallel"
    assert d[7]["operators"] == ("Custom", "Custom", "ScEnsemble")
    records = table.as_records()
    assert records[7]["group"] == 0 and records[7]["index"] == 7
    assert records[2]["accuracy"] == 1.0 and records[2]["reward"] == table.total()[2]
    summary = table.summary()
    assert summary["accuracy/nan_frac"] == 1 / 8
    same(summary["accuracy/mean"], 2 / 7)


def test_table_is_read_only_and_names_its_columns():
    table = score_samples(mixed_group(), 8, ALL)
    with pytest.raises(ValueError):
        table.scores[0, 0] = 5.0
    with pytest.raises(ValueError, match=r"no component 'speed'.*'validity'"):
        table.component("speed")
    with pytest.raises(ValueError, match="shapes disagree"):
        RewardTable(("validity",), np.zeros((2, 2)), np.ones(1), 2, ({}, {}))


def test_score_samples_pushes_eligible_workflows_into_the_history():
    history = RecentWorkflows()
    score_samples(mixed_group(), 8, history=history)
    assert history.counts() == {
        "Custom -> Format": 2,
        "Custom": 1,
        "Custom -> Review ? Revise : done": 1,
        "[Custom, Custom] -> ScEnsemble": 1,
    }  # invalid workflows and fallbacks are not recorded
    score_samples(mixed_group(), 8, history=history, update_history=False)
    assert len(history) == 1


def test_groups_must_hold_one_problem_and_split_evenly():
    with pytest.raises(ValueError, match="group 0 mixes problems"):
        score_samples(mixed_group()[:4] + mixed_group(Q)[:4], 8)
    with pytest.raises(
        ValueError, match=r"8 samples do not split into groups of group_size=3 \(8 % 3 = 2\)"
    ):
        score_samples(mixed_group(), 3)
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        score_samples(mixed_group(), 0)


def test_a_component_returning_the_wrong_shape_is_reported():

    try:
        register_component("test_bad_shape")(lambda group, options, history: np.zeros(1))
        with pytest.raises(ValueError, match="'test_bad_shape' returned shape"):
            score_samples(mixed_group(), 8, RewardSpec({"test_bad_shape": 1.0}))
    finally:
        REWARD_COMPONENTS.unregister("test_bad_shape")


@pytest.mark.parametrize(
    ("score", "message"),
    [
        (7.0, r"scores outside \[0, 1\]"),
        (-3.0, r"scores outside \[0, 1\]"),
        (np.inf, "an infinite score"),
    ],
)
def test_a_component_scoring_outside_zero_one_is_reported(score, message):
    """A plugin's 7.0 counted seven times its weight in the reward, without a word."""
    scores = np.full(8, 0.5)
    scores[3] = score
    try:
        register_component("test_out_of_range")(lambda group, options, history: scores)
        with pytest.raises(ValueError, match=f"'test_out_of_range' returned {message}"):
            score_samples(mixed_group(), 8, RewardSpec({"test_out_of_range": 1.0}))
    finally:
        REWARD_COMPONENTS.unregister("test_out_of_range")


def test_a_component_may_score_the_ends_and_leave_a_sample_unscored():
    scores = np.array([0.0, 1.0, np.nan, 0.5, 0.0, 1.0, 0.25, 0.75])
    try:
        register_component("test_in_range")(lambda group, options, history: scores)
        table = score_samples(mixed_group(), 8, RewardSpec({"test_in_range": 1.0}))
        assert np.array_equal(table.scores[:, 0], scores, equal_nan=True)
    finally:
        REWARD_COMPONENTS.unregister("test_in_range")


# --------------------------------------------------------------------------- combination


def test_weighted_sum_leaves_nan_components_out():
    scores = np.array(
        [
            [1.0, 1.0, 0.5, 0.9],
            [1.0, NAN, 0.5, NAN],
            [NAN, NAN, NAN, NAN],
            [0.0, 0.0, 0.0, 0.0],
            [NAN, 1.0, NAN, NAN],
        ]
    )
    weights = np.array([0.3, 1.0, 0.1, 0.05])
    same(weighted_sum(scores, weights), [1.395, 0.35, NAN, 0.0, 1.0])


def test_weighted_sum_does_not_renormalise():
    # a missing component adds nothing: the row is not rescaled to the weights present
    same(weighted_sum(np.array([[1.0, NAN], [1.0, 0.0]]), [1.0, 1.0]), [1.0, 1.0])


def test_weighted_sum_checks_shapes_and_weights():
    with pytest.raises(ValueError, match="weights has 3 entries but scores has 2 components"):
        weighted_sum(np.zeros((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match=r"scores \[N, C\] \(samples x components\) or \[N\]"):
        weighted_sum(np.zeros((3, 2, 1)), np.ones(2))
    with pytest.raises(ValueError, match="weights must be finite"):
        weighted_sum(np.zeros((3, 2)), [1.0, NAN])


def test_weighted_sum_defaults_and_dtypes():
    same(weighted_sum(np.array([1.0, NAN, 0.5])), [1.0, NAN, 0.5])  # [N] is one component
    same(weighted_sum(np.array([[1, 2], [3, 4]])), [3.0, 7.0])  # weights default to 1
    assert weighted_sum(np.array([[1, 2]])).dtype == np.float64
    assert weighted_sum(np.ones((2, 2), dtype=np.float32), [0.5, 0.5]).dtype == np.float32


ROWS = st.lists(
    st.lists(st.one_of(st.just(NAN), st.floats(0, 1)), min_size=3, max_size=3),
    min_size=1,
    max_size=6,
)


@given(rows=ROWS, weights=st.lists(st.floats(0, 2), min_size=3, max_size=3))
@settings(max_examples=50, deadline=None)
def test_weighted_sum_gives_numpy_and_torch_the_same_answer(rows, weights):
    scores = np.array(rows, dtype=np.float64)
    expected = np.array(
        [
            NAN if np.isnan(row).all() else sum(w * x for w, x in zip(weights, row) if x == x)
            for row in scores
        ]
    )
    from_numpy = weighted_sum(scores, np.array(weights))
    from_torch = weighted_sum(torch.tensor(scores), torch.tensor(weights, dtype=torch.float64))
    assert isinstance(from_numpy, np.ndarray) and isinstance(from_torch, torch.Tensor)
    np.testing.assert_allclose(from_numpy, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(from_torch.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_weighted_sum_on_tensors_keeps_dtype_and_device_and_checks_weights():
    scores = torch.tensor([[1.0, NAN], [NAN, NAN]], dtype=torch.float32)
    out = weighted_sum(scores, [2.0, 3.0])
    assert out.dtype == torch.float32 and out.device == scores.device
    assert out[0].item() == 2.0 and math.isnan(out[1].item())
    assert weighted_sum(torch.tensor([[1, 2]])).dtype == torch.float64
    with pytest.raises(ValueError, match="weights has 1 entries but scores has 2 components"):
        weighted_sum(scores, torch.ones(1))


@pytest.mark.parametrize(
    ("n", "k", "message"),
    [
        (5, 2, r"5 samples do not split into groups of group_size=2 \(5 % 2 = 1\)"),
        (4, 0, "group_size must be a positive int, got 0"),
        (4, 2.0, "group_size must be a positive int, got 2.0"),
        (4, True, "group_size must be a positive int, got True"),
    ],
)
def test_check_group_size_rejects(n, k, message):
    with pytest.raises(ValueError, match=message):
        check_group_size(n, k)


def test_check_group_size_returns_the_number_of_groups():
    assert check_group_size(12, 4) == 3 and check_group_size(0, 7) == 0


def test_fill_group_mean_makes_a_missing_component_neutral_within_its_group():
    scores = np.array([[1.0, 0.2], [0.0, NAN], [NAN, NAN], [NAN, 0.4]])
    same(fill_group_mean(scores, 2), [[1.0, 0.2], [0.0, 0.2], [NAN, 0.4], [NAN, 0.4]])
    assert np.isnan(scores[1, 1])  # the input is not modified


# --------------------------------------------------------------------------- end to end


@dataclass(frozen=True)
class Verdict:
    correct: bool
    score: float


def exact(problem, answer):
    ok = answer.strip() == problem.answer
    return Verdict(ok, float(ok))


GROUP = [
    "Custom",
    "```\nCustom\n```",  # the same workflow, fenced
    "Workflow: Custom",  # and after a prefix
    "Custom -> Format",
    "Revise -> ScEnsemble",  # invalid: not executed
    "Custom -> -> Format",  # syntax error: not executed
    "The answer is 5.",  # fallback: not executed
    "Custom -> Format",
]


def test_prepare_samples_executes_only_valid_workflows_and_identical_ones_once():
    llm = ScriptedBackend(lambda request: "5")
    samples = prepare_samples([P], GROUP, 8, llm, check=exact)
    # Custom (3 samples) runs once: 1 call; Custom -> Format (2 samples) once: 2 calls
    assert len(llm.calls) == 3
    assert [s.execution is not None for s in samples] == [True] * 4 + [False] * 3 + [True]
    assert samples[0].execution == samples[1].execution == samples[2].execution
    assert samples[3].execution == samples[7].execution and samples[3].execution.calls == 2
    assert all(s.execution.correct for s in samples if s.execution)
    table = score_samples(samples, 8)
    same(table.component("accuracy"), [1, 1, 1, 1, 0, 0, 0, 1])
    one, two = 11 / 12, 10 / 12  # 1 and 2 calls of the default 12-call budget
    same(table.component("cost"), [one, one, one, two, 0, 0, 0, two])


def test_prepare_samples_runs_the_whole_batch_in_one_interpreter_call():
    llm = ScriptedBackend(lambda request: "5")
    samples = prepare_samples([P, Q], GROUP + GROUP, 8, llm, check=exact)
    # two problems: each distinct (workflow, problem) runs once; first calls of all runs batched
    assert len(llm.calls) == 6
    assert llm.batches == 2  # round 1: every first call; round 2: the Format calls
    assert [s.execution.correct for s in samples[8:] if s.execution] == [False] * 5


def test_executions_run_each_valid_workflow_that_many_times_and_average():
    # The scripted executor answers right only on the repeat named in its table: the mean over
    # three runs is then 1/3 for every executed sample, whatever the workflow.
    llm = ScriptedBackend(lambda request: "5" if request.context.repeat == 1 else "4")
    samples = prepare_samples([P], GROUP, 8, llm, check=exact, executions=3)
    # Custom and Custom -> Format, three runs each: 3 * (1 + 2) calls
    assert len(llm.calls) == 9
    assert sorted({c.context.repeat for c in llm.calls}) == [0, 1, 2]
    executed = [s for s in samples if s.execution is not None]
    assert all(len(s.repeats) == 2 for s in executed)
    assert all(not s.repeats for s in samples if s.execution is None)
    assert [r.correct for r in executed[0].runs] == [False, True, False]
    table = score_samples(samples, 8)
    same(table.component("accuracy"), [1 / 3] * 4 + [0, 0, 0, 1 / 3])


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_executions_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="executions must be an integer >= 1"):
        prepare_samples([P], GROUP, 8, ScriptedBackend(lambda request: "5"), executions=bad)


def test_cached_results_are_reused_across_batches():
    llm, cache = ScriptedBackend(lambda request: "5"), ExecutionCache()
    prepare_samples([P], GROUP, 8, llm, cache=cache, check=exact)
    first = len(llm.calls)
    samples = prepare_samples([P], GROUP, 8, llm, cache=cache, check=exact)
    assert len(llm.calls) == first and samples[0].execution.correct


def test_executor_failure_is_unscorable_not_wrong():
    llm = ScriptedBackend(lambda request: "5", fail_on=lambda request: True)
    table = score_batch([P], GROUP, 8, llm=llm, check=exact)
    executed = [0, 1, 2, 3, 7]
    assert np.isnan(table.component("accuracy")[executed]).all()
    assert np.isnan(table.component("cost")[executed]).all()
    same(table.component("accuracy")[4:7], [0, 0, 0])  # never executed: 0, not NaN
    assert not np.isnan(table.component("validity")).any()
    assert all(table.details[i]["unscorable"] for i in executed)


def test_execute_false_scores_without_running():
    samples = prepare_samples([P], GROUP, 8, llm=None, execute=False)
    assert all(s.execution is None for s in samples)
    table = score_samples(samples, 8)
    assert np.isnan(table.component("accuracy")[[0, 3]]).all()
    same(table.component("validity"), [1, 1, 1, 1, 0.4, 0.1, 0, 1])


def test_score_batch_only_executes_when_a_component_needs_it():
    llm = ScriptedBackend(lambda request: "5")
    table = score_batch([P], GROUP, 8, RewardSpec({"validity": 1.0, "diversity": 0.1}), llm)
    assert table.names == ("validity", "diversity") and llm.calls == []
    table = score_batch([P], GROUP, 8, llm=llm, check=exact)
    assert table.names == ("validity", "accuracy", "diversity", "cost") and llm.calls


@pytest.mark.parametrize(
    ("problems", "completions", "k", "message"),
    [
        ([P], GROUP[:7], 8, "got 7 completions for 1 problems with group_size 8"),
        ([P], "Custom", 6, "must be sequences"),
        ([P], [*GROUP[:7], None], 8, "completion 7 must be a string"),
        ([P], GROUP, 0, "group_size must be a positive int"),
    ],
)
def test_prepare_samples_rejects_a_malformed_batch(problems, completions, k, message):
    with pytest.raises(ValueError, match=message):
        prepare_samples(problems, completions, k, execute=False)


def test_valid_workflows_without_an_executor_raise():
    with pytest.raises(ValueError, match="need an executor"):
        prepare_samples([P], GROUP, 8)


def test_samples_are_frozen_records():
    sample = make_sample(P, "Custom")
    with pytest.raises(AttributeError):
        sample.completion = "x"
    assert replace(sample, execution=run()).execution.calls == 2


def test_a_spec_is_taken_as_a_mapping_and_anything_else_is_named():
    as_mapping = score_samples(mixed_group(), 8, {"validity": 1.0})
    assert as_mapping.names == ("validity",)
    assert np.array_equal(
        as_mapping.scores, score_samples(mixed_group(), 8, RewardSpec({"validity": 1.0})).scores
    )
    with pytest.raises(TypeError, match="spec must be a RewardSpec, a mapping"):
        score_samples(mixed_group(), 8, ["validity"])
    with pytest.raises(ValueError, match="rewards must be a mapping"):
        RewardSpec.from_dict("validity")
