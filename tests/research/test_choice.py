"""studylib/choice.py: a policy's held-out workflows against the best single workflow and the
oracle, checked against a brute-force computation over the same candidates."""

from __future__ import annotations

import pytest
from studylib.choice import choice_report, choice_table, table_reward

from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import SimulationParams, Tradeoff, analyze, expected_reward
from flowgrpo.operators.simulation.metrics import RegretSettings
from flowgrpo.operators.simulation.oracle import writable_space
from flowgrpo.operators.tasks.base import Problem

PARAMS = SimulationParams.from_dict(
    {"templates": {"rates": {"programmer_correct": [0.45, 0.35, 0.25]}}}
)
SIM = RegretSettings(PARAMS, Limits(max_llm_calls=12), Tradeoff(1.0, 0.0, 12))
PROBLEMS = [
    Problem("p0", "math", "q0", "1", meta={"difficulty": "hard", "template": "rates"}),
    Problem("p1", "math", "q1", "1", meta={"difficulty": "hard", "template": "shopping"}),
]
AG3 = "[AnswerGenerate, AnswerGenerate, AnswerGenerate] -> ScEnsemble"
P3 = "[Programmer, Programmer, Programmer] -> ScEnsemble"


def r(workflow, kind):
    return expected_reward(analyze(workflow, PARAMS, kind, SIM.limits), SIM.tradeoff)


@pytest.fixture(scope="module")
def brute():
    """Best single workflow and each kind's best, by brute force over the writable space."""
    space = writable_space(SIM.limits)
    single = max(space, key=lambda w: (r(w, "hard/rates") + r(w, "hard")) / 2)
    per_kind = {k: max(r(w, k) for w in space) for k in ("hard/rates", "hard")}
    return single, per_kind


def test_the_report_against_brute_force(brute):
    single, per_kind = brute
    workflows = [AG3, None, P3, P3]  # problem 0 (rates): AG3 and a fallback; problem 1: P3 x 2
    got = choice_report(SIM, PROBLEMS, workflows, k=2)
    own = [r(AG3, "hard/rates"), 0.0, r(P3, "hard"), r(P3, "hard")]
    singles = [r(single, "hard/rates")] * 2 + [r(single, "hard")] * 2
    assert got["single"] == single
    assert got["policy_reward"] == pytest.approx(sum(own) / 4)
    assert got["single_reward"] == pytest.approx(sum(singles) / 4)
    assert got["oracle_reward"] == pytest.approx((per_kind["hard/rates"] + per_kind["hard"]) / 2)
    diffs = [(own[0] + own[1]) / 2 - singles[0], (own[2] + own[3]) / 2 - singles[2]]
    assert got["vs_single"] == pytest.approx(sum(diffs) / 2)
    gap = got["oracle_reward"] - got["single_reward"]
    assert got["gap_closed"] == pytest.approx((got["policy_reward"] - got["single_reward"]) / gap)
    rates, plain = got["by_kind"]["hard/rates"], got["by_kind"]["hard"]
    assert rates["mode"] == AG3 and rates["share"] == 0.5
    assert rates["near_best"] == (per_kind["hard/rates"] - r(AG3, "hard/rates") <= 0.02)
    assert plain["mode"] == P3 and plain["share"] == 1.0


def test_the_table_counts_the_seeds_above_the_single_workflow():
    report = choice_report(SIM, PROBLEMS, [AG3, AG3, P3, P3], k=2)
    runs = [{"seed": 0, "eval": {"choice": report}}]
    text = choice_table(None, runs)
    above = int(report["vs_single"] - report["vs_single_ci95"] > 0)
    assert f"above the best single workflow: {above} of 1" in text
    assert text.splitlines()[2].startswith("| 0 | ")


def test_a_sample_count_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="3 workflows for 2 problems x 2"):
        choice_report(SIM, PROBLEMS, [P3, P3, P3], k=2)


def test_a_label_table_scores_each_problem_with_its_labels_workflow():
    table = {"rates/hard": AG3, "shopping/hard": P3}
    got = table_reward(SIM, PROBLEMS, table, ["template", "difficulty"])
    assert got == {"reward": pytest.approx((r(AG3, "hard/rates") + r(P3, "hard")) / 2),
                   "missing": 0}  # fmt: skip


def test_a_label_the_table_lacks_scores_zero_and_is_counted():
    got = table_reward(SIM, PROBLEMS, {"rates/hard": AG3}, ["template", "difficulty"])
    assert got == {"reward": pytest.approx(r(AG3, "hard/rates") / 2), "missing": 1}


def test_the_start_row_shows_the_label_table_beside_the_policy():
    report = choice_report(SIM, PROBLEMS, [AG3, AG3, P3, P3], k=2)
    start = {"choice": {**report, "table": {"reward": 0.5, "missing": 0, "calls": 1234}}}
    row = next(line for line in choice_table(start, []).splitlines() if "table by label" in line)
    assert "| 0.500 |" in row and "1,234 calls" in row
    assert f"| {0.5 - report['single_reward']:.3f} |" in row
