"""Study statistics against hand-computed values (Wilson, Student t) and hand-built runs."""

import math

import pytest
from studylib.study import (
    OLD_RULE,
    collapse_onset,
    guard_rates,
    mean_interval,
    wilson_interval,
)

from flowgrpo.trainer.monitoring.collapse import CollapseRule


def test_wilson_interval_matches_the_published_values():
    # 0/10: upper = z^2 / (n + z^2) = 3.8416 / 13.8416; 5/10: 0.2366 .. 0.7634 (tables)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.72246, 1.0), abs=1e-4)


def test_wilson_interval_of_no_trials_is_everything():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_mean_interval_uses_student_t():
    mean, half = mean_interval([1.0, 2.0, 3.0])  # sd 1, se 1/sqrt(3), t(0.975, 2) = 4.303
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3), rel=1e-6)


def test_mean_interval_edge_cases():
    assert math.isnan(mean_interval([])[0])
    mean, half = mean_interval([0.5, float("nan")])  # one value left: no spread
    assert mean == 0.5 and math.isnan(half)


def _run(fallback, validity=None, n=16):
    validity = validity or [1.0 - f for f in fallback]
    return [
        {"step": i + 1, "fallback_rate": f, "validity_rate": v, "num_completions": n}
        for i, (f, v) in enumerate(zip(fallback, validity, strict=True))
    ]


def test_collapse_onset_is_where_the_end_left_the_start():
    flat = _run([0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    collapsed = _run([0.1, 0.1, 0.1, 0.2, 0.9, 1.0, 1.0])
    assert collapse_onset(flat) is None
    assert collapse_onset(collapsed) == 5


def test_collapse_onset_by_validity_alone():
    history = _run([0.0] * 7, validity=[0.6, 0.6, 0.6, 0.5, 0.2, 0.1, 0.1])
    assert collapse_onset(history) == 5


def test_a_collapse_at_the_first_update_is_measured_from_the_untrained_start():
    # the first three rollouts average 0.73 here: a three-rollout start would hide this collapse
    history = _run([0.19, 1.0, 1.0, 1.0, 1.0, 1.0], validity=[0.69, 0, 0, 0, 0, 0])
    assert collapse_onset(history) == 2


def test_the_onset_is_the_first_move_of_either_rate():
    # broken DSL from step 2, prose only from step 5: the collapse began at step 2
    history = _run([0.2, 0.0, 0.0, 0.0, 0.6, 1.0, 1.0], validity=[0.6, 0, 0, 0, 0, 0, 0])
    assert collapse_onset(history) == 2


def test_a_run_too_short_to_have_an_end_is_not_judged():
    assert collapse_onset(_run([0.1, 1.0, 1.0])) is None


def test_a_transient_spike_is_not_a_collapse():
    assert collapse_onset(_run([0.1, 0.1, 0.1, 0.8, 0.1, 0.1, 0.1])) is None


def test_guard_rates_count_false_positives_and_detections():
    noisy_ok = _run([0.1, 0.1, 0.1, 0.45, 0.1, 0.1, 0.1])  # +0.35 once on 16 samples
    collapsed = _run([0.1, 0.1, 0.1, 0.1, 0.9, 1.0, 1.0])
    rule = CollapseRule()  # alpha 0.001, jump 0.2, 16 completions
    new = guard_rates([noisy_ok, collapsed], rule)
    old = guard_rates([noisy_ok, collapsed], OLD_RULE)
    assert (new.ok_runs, new.collapsed_runs) == (1, 1)
    assert new.ok_runs_flagged == 0 and new.collapsed_detected == 1 and new.delays == [0]
    assert old.ok_runs_flagged == 1 and old.ok_updates_flagged == 1 and old.ok_updates == 6
    assert old.update_false_positive_rate == pytest.approx(1 / 6)
    assert new.detection_rate == 1.0 and old.detection_rate == 1.0


def test_guard_rates_without_runs_of_a_kind_are_nan():
    rates = guard_rates([_run([0.1] * 6)], CollapseRule())
    assert math.isnan(rates.detection_rate) and rates.run_false_positive_rate == 0.0
