"""RewardSpec / RewardOptions validation and YAML round trips; the RecentWorkflows window."""

import math

import pytest

from flowgrpo.rewards import DEFAULT_WEIGHTS, RecentWorkflows, RewardOptions, RewardSpec


def test_default_spec():
    spec = RewardSpec()
    assert spec.names == ("validity", "accuracy", "diversity", "cost")
    assert spec.active_weights == (0.3, 1.0, 0.1, 0.05)
    assert dict(spec.weights) == dict(DEFAULT_WEIGHTS)


def test_zero_weight_components_are_not_columns_and_order_is_kept():
    spec = RewardSpec({"cost": 0.5, "validity": 0.0, "format": 0.2, "accuracy": 1.0})
    assert spec.names == ("cost", "format", "accuracy")
    assert spec.active_weights == (0.5, 0.2, 1.0)


def test_weights_cannot_be_changed_after_construction():
    weights = {"validity": 1.0}
    spec = RewardSpec(weights)
    weights["accuracy"] = 1.0  # the caller's dict is copied
    assert spec.names == ("validity",)
    with pytest.raises(TypeError):
        spec.weights["validity"] = 2.0


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (
            {"validity": 1.0, "speed": 1.0},
            r"unknown reward component 'speed'; choose one of: .*cost",
        ),
        ({"validity": -0.1}, r"'validity' must be finite and >= 0"),
        ({"validity": math.nan}, r"'validity' must be finite"),
        ({"validity": math.inf}, r"'validity' must be finite"),
        ({"validity": "high"}, r"must be a number"),
        ({"validity": 0.0, "accuracy": 0.0}, r"at least one component with a positive weight"),
        ({}, r"at least one component with a positive weight"),
        ([("validity", 1.0)], r"must be a mapping"),
    ],
)
def test_bad_weights_raise_with_a_reason(weights, message):
    with pytest.raises(ValueError, match=message):
        RewardSpec(weights).check_names()  # names are looked up when a run is built


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"validity_semantic_error": 0.05}, r"strictly increase.*validity_syntax_error=0.1"),
        ({"validity_warnings": 1.0}, r"validity_warnings=1.0 >= validity_valid=1.0"),
        ({"validity_valid": 1.5}, r"validity_valid must be in \[0, 1\]"),
        ({"validity_fallback": math.nan}, r"validity_fallback must be in \[0, 1\]"),
        ({"max_partial_credit": 1.0}, r"max_partial_credit must be below 1"),
        ({"cost_max_calls": 0}, r"cost_max_calls must be an int >= 1"),
        ({"cost_max_calls": 2.5}, r"cost_max_calls must be an int >= 1"),
        ({"cost_max_tokens": 0}, r"cost_max_tokens must be a positive int or None"),
        ({"diversity_metric": "edit"}, r"diversity_metric must be one of"),
        ({"diversity_history_weight": 1.5}, r"diversity_history_weight must be in \[0, 1\]"),
    ],
)
def test_bad_options_raise_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RewardOptions(**kwargs)


def test_options_must_be_reward_options():
    with pytest.raises(ValueError, match=r"RewardSpec\.from_dict"):
        RewardSpec({"validity": 1.0}, options={"graded_math": True})


def test_from_dict_forms():
    assert RewardSpec.from_dict(None) == RewardSpec()
    assert RewardSpec.from_dict({}).names == RewardSpec().names
    flat = RewardSpec.from_dict({"validity": 0.5, "accuracy": 1.0})
    assert flat.names == ("validity", "accuracy")
    nested = RewardSpec.from_dict(
        {"weights": {"accuracy": 1.0}, "options": {"graded_math": True, "cost_max_calls": 10}}
    )
    assert nested.names == ("accuracy",)
    assert nested.options.graded_math and nested.options.cost_max_calls == 10
    only_options = RewardSpec.from_dict({"options": {"graded_code": False}})
    assert only_options.names == RewardSpec().names and not only_options.options.graded_code


def test_from_dict_rejects_unknown_options_and_mixed_forms():
    with pytest.raises(ValueError, match=r"unknown key rewards.options.graded; did you mean"):
        RewardSpec.from_dict({"options": {"graded": True}})
    with pytest.raises(ValueError, match="mixes 'weights'/'options'"):
        RewardSpec.from_dict({"weights": {"accuracy": 1.0}, "validity": 0.3})


def test_to_dict_round_trips():
    options = RewardOptions(diversity_metric="structural")
    spec = RewardSpec({"validity": 0.2, "format": 0.1}, options)
    again = RewardSpec.from_dict(spec.to_dict())
    assert again == spec and again.names == spec.names


# --------------------------------------------------------------------------- history


def test_rarity_is_relative_to_the_most_common_workflow():
    history = RecentWorkflows(window_batches=3)
    assert history.rarity("Custom") == 1.0  # empty window
    assert history.rarity(None) == 0.0
    history.push(["Custom"] * 4 + ["Custom -> Format"] + [None, None])
    assert history.rarity("Custom") == 0.0
    assert history.rarity("Custom -> Format") == 0.75
    assert history.rarity("Programmer") == 1.0
    assert history.counts() == {"Custom": 4, "Custom -> Format": 1}


def test_window_forgets_the_oldest_batch():
    history = RecentWorkflows(window_batches=2)
    history.push(["A", "A"])
    history.push(["B"])
    history.push(["B", "C"])  # the batch with A leaves
    assert len(history) == 2
    assert history.counts() == {"B": 2, "C": 1}
    assert history.rarity("A") == 1.0 and history.rarity("C") == 0.5


def test_history_round_trips_through_a_dict():
    history = RecentWorkflows(window_batches=2)
    for batch in (["A"], ["A", "B"], ["C"]):
        history.push(batch)
    again = RecentWorkflows.from_dict(history.to_dict())
    assert again.to_dict() == history.to_dict()
    assert again.counts() == {"A": 1, "B": 1, "C": 1}


@pytest.mark.parametrize("window", [0, -1, 2.0, True])
def test_bad_window_raises(window):
    with pytest.raises(ValueError, match="window_batches"):
        RecentWorkflows(window)


def test_push_of_one_string_raises():
    with pytest.raises(TypeError, match="iterable of canonical forms"):
        RecentWorkflows().push("Custom -> Format")


@pytest.mark.parametrize(
    ("weights", "judged"),
    [
        (dict(DEFAULT_WEIGHTS), {"accuracy": 1.0, "cost": 0.05}),
        ({"validity": 1.0}, {"accuracy": 1.0, "cost": 0.0}),  # validity only: accuracy judges
        ({"validity": 0.3, "cost": 0.5}, {"accuracy": 0.0, "cost": 0.5}),
        ({"accuracy": 2.0, "diversity": 0.1}, {"accuracy": 2.0, "cost": 0.0}),
    ],
)
def test_one_workflow_is_judged_on_accuracy_and_cost_alone(weights, judged):
    options = RewardOptions(cost_max_calls=8)
    part = RewardSpec(weights, options).for_one_workflow()
    assert dict(part.weights) == judged and part.options is options
