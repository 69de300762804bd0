"""The update -> collapse detector: events, counts, the K=2 pattern, rollback baselines."""

import json
import math

import pytest

from flowgrpo.trainer.monitoring.collapse import (
    CollapseDetector,
    CollapseEvent,
    collapse_at,
    compare_rollouts,
    replay,
)
from flowgrpo.trainer.monitoring.health import HealthConfig, run_checks

GOOD = {"fallback_rate": 0.05, "validity_rate": 0.9}
PROSE = {"fallback_rate": 1.0, "validity_rate": 0.0}


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


@pytest.mark.parametrize("skip", [False, True])
def test_the_k2_pattern_gives_a_collapse_rate_of_37_of_38(skip):
    lines = k2_run(skip)
    detector = CollapseDetector()
    for index, line in enumerate(lines):
        after_update = index == 0 or not lines[index - 1]["skipped_update"]
        rates = line["fallback_rate"], line["validity_rate"]
        detector.observe(line["step"], *rates, after_update=after_update)
        if line["rollback"]:
            detector.restore_baseline()
    assert (detector.updates, detector.collapses) == (38, 37)
    assert detector.collapse_rate == pytest.approx(37 / 38)
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


def test_a_rollout_after_a_skipped_update_is_not_compared():
    lines = [
        {"step": 1, "fallback_rate": 0.1, "validity_rate": 0.9},
        {"step": 2, "fallback_rate": 0.1, "validity_rate": 0.9, "skipped_update": True},
        {"step": 3, "fallback_rate": 0.9, "validity_rate": 0.1},  # same weights as step 2
        {"step": 4, "fallback_rate": 0.9, "validity_rate": 0.1},
        {"step": 5, "fallback_rate": 0.1, "validity_rate": 0.9},
    ]
    assert collapse_at(lines, 2) is None
    replayed = replay(lines)
    assert (replayed.updates, replayed.collapses) == (3, 0)  # 1->2, 3->4, 4->5


def test_without_rollback_each_rollout_is_compared_with_the_previous_one():
    detector = CollapseDetector()
    rates = [(0.1, 0.9), (0.8, 0.2), (0.8, 0.2), (0.1, 0.9), (0.9, 0.1)]
    events = [detector.observe(step, f, v) for step, (f, v) in enumerate(rates)]
    assert [e is not None for e in events] == [False, True, False, False, True]
    assert detector.updates == 4 and detector.collapse_rate == 0.5


def test_thresholds_are_inclusive_and_either_rate_triggers():
    assert compare_rollouts(0.3, 0.9, 0.6, 0.9) is not None  # +0.3 despite float rounding
    assert compare_rollouts(0.3, 0.9, 0.59, 0.9) is None
    assert "validity rate 0.900 -> 0.600" in compare_rollouts(0.1, 0.9, 0.1, 0.6)
    both = compare_rollouts(0.0, 1.0, 0.5, 0.5)
    assert "fallback rate" in both and "validity rate" in both
    assert compare_rollouts(0.0, 1.0, 0.2, 0.8, fallback_jump=0.2) is not None


def test_the_first_rollout_and_skipped_updates_are_not_counted():
    detector = CollapseDetector()
    assert detector.observe(1, 0.1, 0.9) is None
    assert detector.updates == 0 and detector.collapse_rate == 0.0
    assert detector.observe(2, 0.9, 0.1, after_update=False) is None  # baseline replaced only
    assert detector.updates == 0
    assert detector.observe(3, 0.9, 0.1) is None and detector.updates == 1


def test_missing_or_nan_rates_are_ignored():
    detector = CollapseDetector()
    detector.observe(1, 0.1, 0.9)
    assert detector.observe(2, math.nan, 0.9) is None
    assert detector.observe(3, None, None) is None
    event = detector.observe(4, 0.9, 0.9)
    assert detector.updates == 1 and event.before_step == 1


def test_restore_baseline_undoes_only_the_last_observed_rollout():
    detector = CollapseDetector()
    detector.observe(1, 0.1, 0.9)
    detector.observe(2, 0.2, 0.9)
    detector.observe(3, 0.9, 0.1)
    detector.restore_baseline()
    detector.restore_baseline()  # a second call is a no-op
    assert detector.observe(4, 0.5, 0.6).before_step == 2


def test_events_are_json_ready_and_thresholds_validated():
    detector = CollapseDetector(fallback_jump=0.5, validity_drop=0.5)
    detector.observe(1, 0.0, 1.0)
    event = detector.observe(2, 0.6, 1.0)
    assert isinstance(event, CollapseEvent)
    data = json.loads(json.dumps(event.to_dict()))
    assert data["fallback_after"] == 0.6 and data["step"] == 2 and "fallback" in data["reason"]
    assert json.loads(json.dumps(detector.summary()))["collapses"] == 1
    for bad in (0, 1.5, -0.1, "0.3", True):
        with pytest.raises(ValueError, match=r"in \(0, 1\]"):
            CollapseDetector(fallback_jump=bad)
