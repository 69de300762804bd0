"""research/kind_trajectory.py: per block of steps and per kind, the training samples' exact
reward against the best single workflow, checked against a brute-force computation."""

from __future__ import annotations

import pytest
from study_loader import load_study

from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import SimulationParams, Tradeoff, analyze, expected_reward
from flowgrpo.operators.simulation.metrics import RegretSettings
from flowgrpo.operators.simulation.oracle import writable_space
from flowgrpo.operators.tasks.base import Problem

PARAMS = SimulationParams.from_dict(
    {"templates": {"rates": {"programmer_correct": [0.45, 0.35, 0.25]}}}
)
SIM = RegretSettings(PARAMS, Limits(max_llm_calls=12), Tradeoff(1.0, 0.0, 12))
PROBLEMS = {
    "p0": Problem("p0", "math", "q0", "1", meta={"difficulty": "hard", "template": "rates"}),
    "p1": Problem("p1", "math", "q1", "1", meta={"difficulty": "hard", "template": "shopping"}),
}
AG = "AnswerGenerate"
P = "Programmer"


def r(workflow, kind):
    return expected_reward(analyze(workflow, PARAMS, kind, SIM.limits), SIM.tradeoff)


def row(step, pid, workflow, valid=True):
    return {"step": step, "problem_id": pid, "canonical": workflow, "valid": valid,
            "fallback": False}  # fmt: skip


@pytest.fixture(scope="module")
def brute():
    space = writable_space(SIM.limits)
    single = max(space, key=lambda w: (r(w, "hard/rates") + r(w, "hard")) / 2)
    return single, {k: max(r(w, k) for w in space) for k in ("hard/rates", "hard")}


def test_blocks_kinds_and_margins_against_brute_force(brute):
    single, per_kind = brute
    rows = [row(1, "p0", AG), row(1, "p0", P), row(2, "p1", P), row(3, "p1", AG, valid=False)]
    out = load_study("kind_trajectory").kind_trajectory(SIM, PROBLEMS, rows, window=2)
    assert sorted(out) == [0, 1]  # steps 1-2, step 3
    first = out[0]["hard/rates"]
    assert first["n"] == 2 and first["first_ops"] == {AG: 1, P: 1}
    expected = (r(AG, "hard/rates") + r(P, "hard/rates")) / 2 - r(single, "hard/rates")
    assert first["vs_single"] == pytest.approx(expected)
    assert first["oracle_vs_single"] == pytest.approx(
        per_kind["hard/rates"] - r(single, "hard/rates")
    )
    assert out[0]["hard"]["vs_single"] == pytest.approx(r(P, "hard") - r(single, "hard"))
    # an invalid workflow scores 0, as the rewards give it
    assert out[1]["hard"]["vs_single"] == pytest.approx(-r(single, "hard"))
    assert out[1]["hard"]["first_ops"] == {"-": 1}
