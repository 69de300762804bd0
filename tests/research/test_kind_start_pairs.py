"""research/kind_start_pairs.py: each kind's ranked workflows, checked against the oracle (an
independent computation of each kind's best) and against exact rewards."""

from __future__ import annotations

from study_loader import REPO, load_study

from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import SimulationParams, Tradeoff, analyze, expected_reward
from flowgrpo.operators.simulation.metrics import RegretSettings
from flowgrpo.operators.simulation.oracle import oracle

PARAMS = SimulationParams.from_dict(
    {"templates": {"rates": {"programmer_correct": [0.45, 0.35, 0.25]}}}
)
SIM = RegretSettings(PARAMS, Limits(max_llm_calls=12), Tradeoff(1.0, 0.0, 12))


def test_each_kind_ranks_its_own_best_first_and_in_order(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "research"))  # it imports learn_known_optimum
    pairs = load_study("kind_start_pairs")
    kinds = ["easy", "hard", "hard/rates"]
    ranked = pairs.ranked_by_kind(SIM, [*kinds, "easy"], top=3)
    best = oracle(PARAMS, {k: 1.0 for k in kinds}, None, SIM.limits, SIM.tradeoff).per_kind
    assert sorted(ranked) == sorted(kinds)
    for kind, rows in ranked.items():
        assert len(rows) == 3
        assert abs(rows[0][1] - best[kind].reward) < 1e-12
        rewards = [r for _, r in rows]
        assert rewards == sorted(rewards, reverse=True)
        for workflow, reward in rows:
            exact = expected_reward(analyze(workflow, PARAMS, kind, SIM.limits), SIM.tradeoff)
            assert abs(exact - reward) < 1e-12
    # the template changes what is best on hard problems: the split the start is made of
    assert ranked["hard"][0][0] != ranked["hard/rates"][0][0]
