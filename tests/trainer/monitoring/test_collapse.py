"""The update -> collapse rule: a one-sided two-proportion z-test with a minimum effect and a
minimum rollout size; events, counts, the K=2 pattern, rollback baselines, noise vs real jumps."""

import json
import math
import random

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.monitoring.collapse import (
    CollapseDetector,
    CollapseEvent,
    CollapseRule,
    Rollout,
    collapse_at,
    collapse_decisions,
    completions_of,
    decide,
    decision_at,
    one_sided_z_test,
    replay,
)
from flowgrpo.trainer.monitoring.health import HealthConfig, run_checks
from flowgrpo.trainer.reports.diagnose import read_jsonl

N = 16  # completions per rollout of the CPU default (2 problems x K=8)
GOOD = {"fallback_rate": 0.0625, "validity_rate": 0.875, "num_completions": N}
PROSE = {"fallback_rate": 1.0, "validity_rate": 0.0, "num_completions": N}


def k2_run(skip_after_rollback: bool) -> list[dict]:
    """Metrics lines of a run with the rollback guard in which 37 of 38 updates collapse.

    Each collapsed rollout (all prose) is rolled back. With ``skip_after_rollback`` the
    rolled-back step trains on nothing (``skipped_update``, as flowgrpo's loop does) and the
    next rollout, from the restored weights, is no update's result; without it the step goes on
    training from the restored weights.
    """
    lines = [{"step": 0, **GOOD, "rollback": False, "skipped_update": False}]
    for update in range(38):
        collapsed = update != 19
        lines.append(
            {
                "step": len(lines),
                **(PROSE if collapsed else GOOD),
                "rollback": collapsed,
                "skipped_update": collapsed and skip_after_rollback,
            }
        )
        if collapsed and skip_after_rollback:
            lines.append({"step": len(lines), **GOOD, "rollback": False, "skipped_update": False})
    return lines


def collapse_steps(lines) -> list[int]:
    return [line["step"] for line in lines if line["fallback_rate"] == 1.0]


def rollout(fallback, validity=None, n=N, step=0) -> Rollout:
    return Rollout(step, fallback, 1 - fallback if validity is None else validity, n)


# --------------------------------------------------------------------------- the z-test


def test_the_z_test_matches_the_formula_by_hand():
    # 0.25 -> 0.4375 over 16 each: pooled 11/32, se = sqrt(11/32 * 21/32 * 2/16)
    z, p = one_sided_z_test(0.25, 16, 0.4375, 16)
    se = math.sqrt(11 / 32 * 21 / 32 * (2 / 16))
    assert z == pytest.approx(0.1875 / se) and z == pytest.approx(1.1166, abs=1e-4)
    assert p == pytest.approx(0.5 * math.erfc(z / math.sqrt(2))) and 0.13 < p < 0.134
    assert one_sided_z_test(0.4375, 16, 0.25, 16)[0] == pytest.approx(-z)  # a fall: z < 0
    assert one_sided_z_test(0.0, 16, 0.0, 16) == (0.0, 0.5)  # nothing varies: nothing to test
    assert one_sided_z_test(1.0, 16, 1.0, 32) == (0.0, 0.5)


def test_noise_alone_is_no_collapse():
    # the example: fallback 0.25 -> 0.44 with 16 completions each, z ~ 1.1, p ~ 0.13
    decision = decide(rollout(0.25), rollout(0.4375, step=1))
    assert decision.decided and not decision.collapse
    assert decision.fallback_z == pytest.approx(1.12, abs=0.01) and decision.fallback_p > 0.01
    assert "no significant change" in decision.reason
    # the old fixed +0.3 rule fired on 0.25 -> 0.5625 (9/16); the test does not (p ~ 0.04)
    assert not decide(rollout(0.25), rollout(0.5625)).collapse


def test_a_real_jump_is_a_collapse_with_its_z_and_p():
    decision = decide(rollout(0.1, 0.9, step=4), rollout(0.8, 0.2, step=5))
    assert decision.collapse and decision.decided
    assert decision.fallback_z == pytest.approx(3.98, abs=0.01) and decision.fallback_p < 1e-4
    assert decision.p == min(decision.fallback_p, decision.validity_p)
    assert "fallback rate 0.100 -> 0.800" in decision.reason and "validity rate" in decision.reason
    assert (decision.step, decision.before_step) == (5, 4)


def test_either_rate_alone_can_fire():
    only_validity = decide(rollout(0.0, 0.9), rollout(0.0, 0.2))  # errors, not prose
    assert only_validity.collapse and "validity rate 0.900 -> 0.200" in only_validity.reason
    assert "fallback" not in only_validity.reason
    only_fallback = decide(rollout(0.1, 0.2), rollout(0.8, 0.2))
    assert only_fallback.collapse and "validity" not in only_fallback.reason


def test_min_completions_blocks_a_decision_on_tiny_rollouts():
    jump = rollout(0.0, n=8), rollout(1.0, n=8, step=1)
    blocked = decide(*jump)
    assert not blocked.decided and not blocked.collapse and blocked.fallback_p is None
    assert "8 completions < min_completions 16" in blocked.reason
    assert decide(*jump, CollapseRule(min_completions=8)).collapse  # z = 4.0 over 8 each
    uneven = decide(rollout(0.1, n=64), rollout(0.9, n=15))
    assert not uneven.decided  # both rollouts need the minimum


def test_a_significant_but_small_change_is_no_collapse():
    # 4096 completions each: +0.05 is far beyond noise (z ~ 6.9) but below the minimum effect
    decision = decide(rollout(0.10, n=4096), rollout(0.15, n=4096))
    assert decision.fallback_p < 1e-6 and not decision.collapse
    assert decide(rollout(0.10, n=4096), rollout(0.15, n=4096), CollapseRule(0.05)).collapse


def test_the_completion_count_comes_from_num_completions_or_group_size_times_problems():
    assert completions_of({"num_completions": 24, "group_size": 8, "problems": 2}) == 24
    assert completions_of({"group_size": 8, "problems": 2}) == 16
    assert completions_of({"num_completions": 16.0}) == 16
    assert completions_of({"num_completions": 16.5}) == 16  # a mean over processes: round down
    for bad in (
        {},
        {"group_size": 8},
        {"num_completions": None},
        {"num_completions": math.nan},
        {"num_completions": 0},
        {"num_completions": True},
        {"num_completions": 0.5},
        {"num_completions": "16"},
    ):
        assert completions_of(bad) is None, bad
    lines = [{"step": 1, "fallback_rate": 0.1, "validity_rate": 0.9}, {"step": 2, **PROSE}]
    decision = decision_at(lines, 1)
    assert not decision.decided and "not logged (num_completions)" in decision.reason
    assert collapse_at(lines, 1) is None
    assert run_checks(lines, HealthConfig(), names=["update_collapse"]) == []


# --------------------------------------------------------------------------- simulation


def binomial_rate(rng: random.Random, p: float, n: int = N) -> float:
    return sum(rng.random() < p for _ in range(n)) / n


PAIRS = 2000
TOLERANCE = 0.007
"""Three standard errors of a rate of 0.01 measured over 2000 pairs (sqrt(0.01 * 0.99 / 2000))."""


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_simulated_noise_fires_at_most_alpha_plus_tolerance(p):
    """Both rollouts from the SAME policy: every event is a false positive."""
    rng, rule = random.Random(int(p * 100)), CollapseRule()
    fired = old_rule = 0
    for _ in range(PAIRS):
        before, after = binomial_rate(rng, p), binomial_rate(rng, p)
        fired += decide(rollout(before), rollout(after), rule).collapse
        old_rule += after - before >= 0.3 - 1e-9  # the former fixed-jump rule (fallback only)
    assert fired / PAIRS <= rule.alpha + TOLERANCE
    if p >= 0.3:  # the former rule's false positives, for comparison: 4-6 % here
        assert old_rule / PAIRS > 0.03


def test_simulated_noise_with_both_rates_fires_at_most_twice_alpha():
    """Fallback, other invalid and valid outputs drawn together (fallback is never valid)."""
    rng, rule, fired = random.Random(7), CollapseRule(), 0
    for _ in range(PAIRS):
        pair = []
        for _ in range(2):
            draws = [rng.random() for _ in range(N)]
            fallback = sum(u < 0.3 for u in draws) / N
            invalid = sum(u < 0.4 for u in draws) / N  # 0.3 prose + 0.1 invalid DSL
            pair.append(rollout(fallback, 1 - invalid))
        fired += decide(*pair, rule).collapse
    assert fired / PAIRS <= 2 * rule.alpha + TOLERANCE


def exact_detection(p1: float, p2: float, n: int, alpha: float, jump: float = 0.2) -> float:
    """P(the fallback test fires) for rates p1 -> p2 over n completions each, by enumerating
    every pair of binomial outcomes, the rule written out from its formula."""
    pmf1, pmf2 = (
        [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)] for p in (p1, p2)
    )
    total = 0.0
    for x1 in range(n + 1):
        for x2 in range(n + 1):
            pooled = (x1 + x2) / (2 * n)
            var = pooled * (1 - pooled) * 2 / n
            rise = (x2 - x1) / n
            if var > 1e-12 and rise >= jump - 1e-9:
                total += pmf1[x1] * pmf2[x2] * (0.5 * math.erfc(rise / math.sqrt(2 * var)) <= alpha)
    return total


@pytest.mark.parametrize("p1, p2", [(0.1, 0.7), (0.2, 1.0)])
def test_simulated_real_jumps_are_detected_at_the_exact_rate(p1, p2):
    rng, rule = random.Random(1), CollapseRule()
    detected = sum(
        decide(rollout(binomial_rate(rng, p1)), rollout(binomial_rate(rng, p2)), rule).collapse
        for _ in range(PAIRS)
    )
    exact = exact_detection(p1, p2, N, rule.alpha)
    assert abs(detected / PAIRS - exact) <= 4 * math.sqrt(exact * (1 - exact) / PAIRS) + 1e-3


def test_a_jump_to_all_prose_is_detected_and_a_partial_one_mostly():
    # the default's power at 16 completions: what the module docstring states
    assert exact_detection(0.2, 1.0, N, CollapseRule().alpha) > 0.998
    assert 0.70 < exact_detection(0.1, 0.7, N, CollapseRule().alpha) < 0.72
    assert exact_detection(0.1, 0.7, 2 * N, CollapseRule().alpha) > 0.98


def test_noise_over_a_30_update_run_fires_in_few_runs():
    # one rate's exact false-alarm rate at n = 16, the worst rate in 0.1-0.5, twice for both
    # rates, over 29 updates: the chance a good run is rolled back at least once
    worst = max(exact_detection(p, p, N, CollapseRule().alpha) for p in (0.1, 0.2, 0.3, 0.4, 0.5))
    assert 1 - (1 - 2 * worst) ** 29 < 0.07


# --------------------------------------------------------------------------- over a history


@pytest.mark.parametrize("skip", [False, True])
def test_the_k2_pattern_gives_a_collapse_rate_of_37_of_38(skip):
    lines = k2_run(skip)
    detector = CollapseDetector()
    for index, line in enumerate(lines):
        after_update = index == 0 or not lines[index - 1]["skipped_update"]
        rates = line["fallback_rate"], line["validity_rate"]
        detector.observe(line["step"], *rates, completions=N, after_update=after_update)
        if line["rollback"]:
            detector.restore_baseline()
    assert (detector.updates, detector.decided, detector.collapses) == (38, 38, 37)
    assert round(detector.collapse_rate, 3) == 0.974
    assert [e.step for e in detector.events] == collapse_steps(lines)


@pytest.mark.parametrize("skip", [False, True])
def test_replay_collapse_at_and_the_health_check_agree_with_the_detector(skip):
    lines = k2_run(skip)
    replayed = replay(lines)
    assert (replayed.updates, replayed.collapses) == (38, 37)
    assert [e.step for e in replayed.events] == collapse_steps(lines)
    events = [collapse_at(lines, i) for i in range(len(lines))]
    assert [e for e in events if e is not None] == replayed.events
    steps = [
        lines[end - 1]["step"]
        for end in range(1, len(lines) + 1)
        if any(a.name == "update_collapse" for a in run_checks(lines[:end], HealthConfig()))
    ]
    assert steps == collapse_steps(lines)


def test_collapse_decisions_replays_a_metrics_file_with_z_and_p(tmp_path):
    rates = [(0.1, 0.9), (0.25, 0.75), (0.8, 0.2), (0.8, 0.2), (0.5, 0.5)]
    lines = [
        {"step": s, "fallback_rate": f, "validity_rate": v, "num_completions": 32}
        for s, (f, v) in enumerate(rates, 1)
    ]
    lines[2]["num_completions"] = None  # step 3: count missing, its two pairs not decided
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    decisions = collapse_decisions(read_jsonl(path))
    assert [(d.before_step, d.step) for d in decisions] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    assert [d.decided for d in decisions] == [True, False, False, True]
    assert [d.collapse for d in decisions] == [False, False, False, False]
    assert decisions[0].fallback_z == pytest.approx(one_sided_z_test(0.1, 32, 0.25, 32)[0])
    assert json.loads(json.dumps([d.to_dict() for d in decisions]))[3]["p"] > 0.5
    strict = collapse_decisions(read_jsonl(path), CollapseRule(min_completions=64))
    assert not any(d.decided for d in strict)


def test_a_rollout_after_a_skipped_update_is_not_compared():
    lines = [
        {"step": 1, "fallback_rate": 0.1, "validity_rate": 0.9, "num_completions": N},
        {
            "step": 2,
            "fallback_rate": 0.1,
            "validity_rate": 0.9,
            "num_completions": N,
            "skipped_update": True,
        },
        {"step": 3, **PROSE},  # same weights as step 2
        {"step": 4, **PROSE},
        {"step": 5, "fallback_rate": 0.1, "validity_rate": 0.9, "num_completions": N},
    ]
    assert collapse_at(lines, 2) is None and decision_at(lines, 2) is None
    replayed = replay(lines)
    assert (replayed.updates, replayed.collapses) == (3, 0)  # 1->2, 3->4, 4->5


def test_without_rollback_each_rollout_is_compared_with_the_previous_one():
    detector = CollapseDetector()
    rates = [(0.1, 0.9), (0.8, 0.2), (0.8, 0.2), (0.1, 0.9), (0.9, 0.1)]
    events = [detector.observe(step, f, v, completions=N) for step, (f, v) in enumerate(rates)]
    assert [e is not None for e in events] == [False, True, False, False, True]
    assert detector.updates == 4 and detector.collapse_rate == 0.5
    assert len(detector.decisions) == 4


def test_the_first_rollout_and_skipped_updates_are_not_counted():
    detector = CollapseDetector()
    assert detector.observe(1, 0.1, 0.9, completions=N) is None
    assert detector.updates == 0 and detector.collapse_rate == 0.0
    assert detector.observe(2, 0.9, 0.1, completions=N, after_update=False) is None
    assert detector.updates == 0
    assert detector.observe(3, 0.9, 0.1, completions=N) is None and detector.updates == 1


def test_undecided_updates_are_counted_but_not_in_the_rate():
    detector = CollapseDetector()
    detector.observe(1, 0.1, 0.9, completions=N)
    detector.observe(2, 0.9, 0.1)  # no count: compared, not decided
    detector.observe(3, 0.9, 0.1, completions=N)
    detector.observe(4, 0.1, 0.9, completions=N)  # recovery: decided, no collapse
    assert detector.summary() == {
        "updates": 3,
        "decided": 1,
        "collapses": 0,
        "collapse_rate": 0.0,
    }


def test_missing_nan_or_out_of_range_rates_are_ignored():
    detector = CollapseDetector()
    detector.observe(1, 0.1, 0.9, completions=N)
    assert detector.observe(2, math.nan, 0.9, completions=N) is None
    assert detector.observe(3, None, None, completions=N) is None
    assert detector.observe(4, 1.5, 0.9, completions=N) is None
    event = detector.observe(5, 0.9, 0.9, completions=N)
    assert detector.updates == 1 and event.before_step == 1


def test_restore_baseline_undoes_only_the_last_observed_rollout():
    detector = CollapseDetector()
    detector.observe(1, 0.1, 0.9, completions=N)
    detector.observe(2, 0.2, 0.8, completions=N)
    detector.observe(3, 0.9, 0.1, completions=N)
    detector.restore_baseline()
    detector.restore_baseline()  # a second call is a no-op
    assert detector.observe(4, 0.8, 0.2, completions=N).before_step == 2


def test_events_are_json_ready_and_the_rule_is_validated():
    detector = CollapseDetector(CollapseRule(fallback_jump=0.5, validity_drop=0.5))
    detector.observe(1, 0.0, 1.0, completions=N)
    event = detector.observe(2, 0.625, 1.0, completions=N)
    assert isinstance(event, CollapseEvent)
    data = json.loads(json.dumps(event.to_dict()))
    assert data["fallback_after"] == 0.625 and data["step"] == 2 and "fallback" in data["reason"]
    assert data["n_before"] == N and data["fallback_p"] < 0.01 and data["p"] == data["fallback_p"]
    assert json.loads(json.dumps(detector.summary()))["collapses"] == 1
    for bad in (0, 1.5, -0.1, "0.3", True, math.nan):
        with pytest.raises(ConfigError, match=r"CollapseRule.fallback_jump: .*in \(0, 1\]"):
            CollapseRule(fallback_jump=bad)
    for bad in (0, 0.6, None):
        with pytest.raises(ConfigError, match=r"CollapseRule.alpha"):
            CollapseRule(alpha=bad)
    for bad in (1, 16.0, True):
        with pytest.raises(ConfigError, match=r"CollapseRule.min_completions"):
            CollapseRule(min_completions=bad)


def test_the_health_config_gives_the_rule_and_the_old_call_form_still_works():
    config = HealthConfig(collapse_alpha=0.05, collapse_min_completions=8)
    assert config.collapse_rule == CollapseRule(0.2, 0.2, 0.05, 8)
    lines = [
        {"step": 1, "fallback_rate": 0.0, "validity_rate": 1.0, "num_completions": N},
        {"step": 2, "fallback_rate": 0.25, "validity_rate": 0.75, "num_completions": N},
    ]
    assert collapse_at(lines, 1) is None  # p ~ 0.017 > 0.001
    assert collapse_at(lines, 1, config.collapse_rule) is not None  # p <= 0.05
    assert collapse_at(lines, 1, 0.3, 0.3) is None  # (fallback_jump, validity_drop): 0.25 < 0.3
    assert replay(lines, 0.2, 0.2).decisions == replay(lines).decisions
