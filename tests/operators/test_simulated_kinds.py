"""Operator skill by problem kind (issue 40): ``SimulationParams.templates``, problem kinds, the
exact analysis on kinds, and the oracle of the best workflow per kind."""

from __future__ import annotations

import dataclasses
import math

import pytest

from flowgrpo.dsl import count_calls, validate
from flowgrpo.operators.backends.simulated import SimulatedExecutor
from flowgrpo.operators.interpreter import Limits, run_workflows
from flowgrpo.operators.ops import OpSettings
from flowgrpo.operators.simulation import SimulationParams, Tradeoff, analyze
from flowgrpo.operators.simulation.exact import simulated_sandbox
from flowgrpo.operators.simulation.oracle import (
    arithmetic_mix,
    kind_mix,
    oracle,
    writable_space,
)
from flowgrpo.operators.simulation.space import expected_reward, workflow_space
from flowgrpo.operators.tasks import generate_arithmetic

RATES = {"programmer_correct": [0.45, 0.35, 0.25], "review_detect": 0.9, "custom_correct": 0.3}
PARAMS = SimulationParams.from_dict({"templates": {"rates": RATES}})
# the same probabilities made the whole world's: what a rates problem must see
GLOBAL = SimulationParams.from_dict(RATES)
WORKFLOWS = [
    "Custom -> Review ? Revise : done",
    "Programmer -> (Review ? Revise : done) * 2",
    "[Programmer, AnswerGenerate, Custom] -> ScEnsemble",
]


def test_a_kind_is_the_difficulty_with_the_template_only_where_the_world_overrides_it():
    assert PARAMS.kind("hard", "rates") == "hard/rates"
    assert PARAMS.kind("hard", "ages") == "hard"
    assert PARAMS.kind(None, "rates") == "medium/rates"  # the default difficulty
    assert SimulationParams().kind("easy", "rates") == "easy"
    assert PARAMS.kinds() == ("easy", "medium", "hard", "easy/rates", "medium/rates", "hard/rates")


@pytest.mark.parametrize("level", ["easy", "medium", "hard"])
@pytest.mark.parametrize("latent", [0, 1, 2])
def test_a_templates_problems_get_its_overrides_and_the_rest_of_the_world(level, latent):
    assert PARAMS.probs(f"{level}/rates", latent) == GLOBAL.probs(level, latent)
    assert PARAMS.probs(level, latent) == SimulationParams().probs(level, latent)


@pytest.mark.parametrize("workflow", WORKFLOWS)
@pytest.mark.parametrize("level", ["easy", "hard"])
def test_the_exact_analysis_of_a_kind_is_that_of_its_probabilities(workflow, level):
    own = analyze(workflow, PARAMS, f"{level}/rates")
    assert own == analyze(workflow, GLOBAL, level)
    mixed = analyze(workflow, PARAMS, {f"{level}/rates": 1, level: 3})
    plain = analyze(workflow, SimulationParams(), level).accuracy
    assert mixed.accuracy == pytest.approx(0.25 * own.accuracy + 0.75 * plain)


def test_templates_survive_plain_data_and_a_world_without_them_writes_none():
    assert SimulationParams.from_dict(PARAMS.to_dict()) == PARAMS
    assert "templates" not in SimulationParams().to_dict()  # old worlds keep their digest
    assert PARAMS.digest() != SimulationParams().digest()


@pytest.mark.parametrize(
    ("templates", "message"),
    [
        ({"rates": {"latent_spread": 1.0}}, "['latent_spread'] cannot differ by template"),
        ({"rates": {"programmer_correct": 2}}, "templates.rates.programmer_correct[easy]"),
        ({"rates": {"review_detect": {"easy": 0.5}}}, "templates.rates.review_detect: a mapping"),
        ({"a/b": {"custom_correct": 0.5}}, "a template is a name without '/'"),
        ({"rates": 0.5}, "templates.rates: expected {field: value}"),
        ([0.5], "expected {template: {field: value}}"),
    ],
)
def test_bad_overrides_name_the_template_and_the_field(templates, message):
    with pytest.raises(ValueError) as info:
        SimulationParams.from_dict({"templates": templates})
    assert message in str(info.value)


def test_a_kind_the_world_does_not_know_is_named():
    with pytest.raises(ValueError, match="unknown problem kind"):
        analyze("Custom", PARAMS, "hard/ages")
    with pytest.raises(ValueError, match="overrides no template 'ages'"):
        PARAMS.probs("hard/ages")


@pytest.mark.parametrize(
    ("workflow", "sandbox"),
    [
        ("Custom -> Review ? Revise : done", None),
        ("Programmer -> Review ? Revise : done", "inline"),
    ],
)
def test_the_executor_runs_a_templates_problems_with_its_overrides(workflow, sandbox):
    """Empirical accuracy of the REAL interpreter on arithmetic problems (a fifth of them
    rates) within 4 standard errors of the exact mean over each problem's kind."""
    problems = generate_arithmetic(1500, seed=5, split="test")
    llm = SimulatedExecutor(seed=3, params=PARAMS)
    box = simulated_sandbox if sandbox else None
    results = run_workflows([(workflow, p) for p in problems], llm, Limits(), sandbox=box)
    expected = [analyze(workflow, PARAMS, PARAMS.kind_of(p)).accuracy for p in problems]
    p = sum(expected) / len(expected)
    rates = [r.correct for r, q in zip(results, problems) if q.meta["template"] == "rates"]
    n_rates = len(rates)
    rates_expected = sum(e for e, q in zip(expected, problems) if q.meta["template"] == "rates")
    empirical = sum(r.correct for r in results) / len(results)
    assert abs(empirical - p) <= 4 * math.sqrt(p * (1 - p) / len(results)), (empirical, p)
    q = rates_expected / n_rates  # the rates problems alone: their own (lower) rate
    assert abs(sum(rates) / n_rates - q) <= 4 * math.sqrt(q * (1 - q) / n_rates)
    assert q < p - 0.05  # the override is visible, not lost in the mix


def test_the_oracle_against_a_hand_computed_table():
    """Two workflows, two kinds: the single best, each kind's best and the gap by hand."""
    a, b = "Custom", "Programmer"
    mix = {"hard/rates": 1.0, "hard": 3.0}
    table = {
        (w, k): expected_reward(analyze(w, PARAMS, k), Tradeoff(1.0, 0.5, 12))
        for w in (a, b)
        for k in mix
    }
    single_reward = {w: (table[w, "hard/rates"] + 3 * table[w, "hard"]) / 4 for w in (a, b)}
    single = max(single_reward, key=single_reward.get)
    best_per_kind = {k: max(table[a, k], table[b, k]) for k in mix}
    oracle_reward = (best_per_kind["hard/rates"] + 3 * best_per_kind["hard"]) / 4
    got = oracle(PARAMS, mix, [a, b], Limits(), Tradeoff(1.0, 0.5, 12))
    assert got.single.workflow == single == b
    assert got.per_kind["hard/rates"].workflow == a and got.per_kind["hard"].workflow == b
    assert got.reward == pytest.approx(oracle_reward)
    assert got.gap == pytest.approx(oracle_reward - single_reward[b]) and got.gap > 0
    assert got.gap_closed(single_reward[b]) == pytest.approx(0.0)
    assert got.gap_closed(oracle_reward) == pytest.approx(1.0)
    assert got.single_by_kind["hard/rates"] == pytest.approx(table[b, "hard/rates"])


def test_a_world_without_templates_has_no_gap_between_identical_kinds():
    plain = oracle(SimulationParams(), {"hard": 1.0}, WORKFLOWS, Limits())
    assert plain.gap == 0.0 and math.isnan(plain.gap_closed(0.5))


def test_the_arithmetic_mix_is_the_generators_own():
    exact = arithmetic_mix(PARAMS)
    assert set(exact) == {"easy", "medium", "hard", "easy/rates", "medium/rates", "hard/rates"}
    assert sum(exact.values()) == pytest.approx(1.0)
    assert exact["hard/rates"] == pytest.approx(1 / 15) and exact["hard"] == pytest.approx(4 / 15)
    drawn = kind_mix(PARAMS, generate_arithmetic(6000, seed=2))
    assert all(abs(drawn[k] - exact[k]) < 0.02 for k in exact), drawn


def test_the_writable_space_is_the_space_within_the_call_budget():
    limits = Limits(max_llm_calls=12)
    writable = set(writable_space(limits))
    weigh = {"Programmer": 2, "MdEnsemble": 3}  # 1 + programmer_retries, md_votes
    for text in workflow_space():
        root = validate(text, domain="math").workflow.root
        assert (text in writable) == (count_calls(root, lambda op: weigh.get(op.name, 1)) <= 12)
    assert len(writable) == 1773 and len(workflow_space(max_calls=12)) == 2176  # one call each
    assert len(writable_space(dataclasses.replace(limits, max_llm_calls=40))) == len(
        workflow_space()
    )


@pytest.mark.parametrize(
    ("budget", "ops"),
    [(12, OpSettings()), (8, OpSettings(programmer_retries=2, md_votes=5)),
     (10, OpSettings(programmer_retries=0, md_votes=1))],
)  # fmt: skip
def test_no_workflow_a_run_can_write_is_stopped_by_its_budget(budget, ops):
    # every outcome has a positive probability here (crashes, failed reviews, unreadable
    # votes), so a budget stop on any path would show in budget_stop
    limits = Limits(max_llm_calls=budget, ops=ops)
    space = writable_space(limits)
    assert space
    for text in space:
        assert analyze(text, GLOBAL, "hard", limits).budget_stop == 0.0, text
    kept = set(space)
    over = [t for t in workflow_space() if t not in kept]
    assert any(analyze(t, GLOBAL, "hard", limits).budget_stop > 0 for t in over)
