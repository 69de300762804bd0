"""Sequential halving under a budget of executor calls (trainer/search/halving.py), against
hand-computed allocations and seeded Bernoulli arms."""

from __future__ import annotations

import math
import random

import pytest

from flowgrpo.trainer.search.halving import Arm, successive_halving


def constant_pull(values: dict[str, float], calls: dict[str, int] | None = None):
    """Each arm always returns its value, at its calls per pull; records every call made."""
    log = []

    def pull(workflows, pulls):
        log.append((tuple(workflows), pulls))
        return [[(values[w], (calls or {}).get(w, 1))] * pulls for w in workflows]

    return pull, log


def test_the_survivors_halve_each_round_and_the_best_wins():
    values = {f"W{i}": i / 10 for i in range(10)}
    pull, log = constant_pull(values)
    result = successive_halving(list(values), pull, budget=1000)
    # ceil(log2 10) = 4 rounds; the first pulls once, then tops up to its share (250 calls)
    assert [(len(w), n) for w, n in log][:2] == [(10, 1), (10, 24)]
    assert [len(w) for w, _ in log[2:]] == [5, 3, 2]
    assert result.best.workflow == "W9" and result.best.mean == pytest.approx(0.9)
    assert [a.workflow for a in result.arms[:3]] == ["W9", "W8", "W7"]
    assert result.calls == sum(len(w) * p for w, p in log)


def test_the_pulls_of_each_round_are_its_share_of_the_budget_left():
    """4 arms at 2 calls a pull, budget 40, ceil(log2 4) = 2 rounds of 20 calls: round 0 pulls
    each once (8 calls) and tops up by 12 // 8 = 1 pull each; round 1 may spend the 24 left:
    2 survivors x 4 calls per pull -> 6 pulls."""
    values = {"A": 0.1, "B": 0.4, "C": 0.3, "D": 0.2}
    pull, log = constant_pull(values, dict.fromkeys(values, 2))
    result = successive_halving(list(values), pull, budget=40)
    assert log == [(("A", "B", "C", "D"), 1), (("A", "B", "C", "D"), 1), (("B", "C"), 6)]
    assert result.calls == 40 and [r.calls for r in result.rounds] == [16, 24]
    assert result.best.workflow == "B" and result.best.n == 8


def test_a_budget_below_one_run_of_each_stops_after_the_first_round():
    values = {"A": 0.1, "B": 0.9, "C": 0.5}
    pull, log = constant_pull(values, dict.fromkeys(values, 5))
    result = successive_halving(list(values), pull, budget=4)
    assert len(log) == 1 and result.calls == 15 and result.best.workflow == "B"


def test_ties_are_broken_by_a_seeded_order_not_by_the_candidates_order():
    """Eight arms of equal value: who survives depends on the seed, never always the first."""
    values = {f"W{i}": 0.5 for i in range(8)}
    bests = set()
    for seed in range(12):
        pull, _ = constant_pull(values)
        bests.add(successive_halving(list(values), pull, budget=8, seed=seed).best.workflow)
    assert len(bests) >= 4


def test_unscorable_runs_count_their_calls_but_not_in_the_mean():
    def pull(workflows, pulls):
        return [
            [(None, 3), (1.0, 3)][:pulls] if w == "A" else [(0.5, 1)] * pulls for w in workflows
        ]

    result = successive_halving(["A", "B"], pull, budget=2)
    a = next(x for x in result.arms if x.workflow == "A")
    assert a.n == 0 and a.calls == 3 and a.pulls == 1 and a.mean == -math.inf
    assert result.best.workflow == "B"


def bernoulli_pull(p: dict[str, float], seed: int):
    rng = random.Random(seed)

    def pull(workflows, pulls):
        return [[(float(rng.random() < p[w]), 1) for _ in range(pulls)] for w in workflows]

    return pull


def test_bernoulli_arms_with_a_gap_are_told_apart():
    """16 arms, success 0.5 except one at 0.7 (independent draws): with 3,000 pulls' worth of
    budget the 0.7 arm wins in at least 19 of 20 seeds."""
    p = {f"W{i}": 0.7 if i == 11 else 0.5 for i in range(16)}
    wins = sum(
        successive_halving(list(p), bernoulli_pull(p, seed), 3000, seed).best.workflow == "W11"
        for seed in range(20)
    )
    assert wins >= 19, wins


def test_an_arms_interval_is_the_normal_one():
    arm = Arm("W", rewards=[1.0, 0.0, 1.0, 1.0])
    sd = math.sqrt(sum((r - 0.75) ** 2 for r in arm.rewards) / 3)
    assert arm.ci95 == pytest.approx(1.959964 * sd / 2)
    assert Arm("W", rewards=[1.0]).ci95 == math.inf


@pytest.mark.parametrize(
    ("workflows", "budget", "message"),
    [([], 10, "at least one candidate"), (["A", "A"], 10, "distinct"), (["A"], 0, "budget")],
)
def test_bad_searches_are_refused(workflows, budget, message):
    with pytest.raises(ValueError, match=message):
        successive_halving(workflows, lambda w, n: [], budget)


def test_a_pull_that_returns_the_wrong_shape_is_named():
    with pytest.raises(ValueError, match="pull returned 1 rows for 2 arms"):
        successive_halving(["A", "B"], lambda w, n: [[(1.0, 1)]], 10)
