"""Informative groups and the near-best share, against tables worked out by hand."""

import math

import pytest
from studylib.group_signal import group_signal, near_best_by_block


def _row(step, problem, accuracy, advantage, canonical="Custom", valid=True):
    rewards = {} if accuracy is None else {"accuracy": accuracy}
    return {"step": step, "problem_id": problem, "advantage": advantage,
            "rewards": rewards, "canonical": canonical, "valid": valid}  # fmt: skip


def test_familiar_groups_and_their_advantage_mass_by_hand():
    rows = [
        # step 1, p1: mean accuracy (1 + 0.9) / 2 = 0.95 -> familiar, |adv| mass 0.1 + 0.1
        _row(1, "p1", 1.0, 0.1), _row(1, "p1", 0.9, -0.1),
        # step 1, p2: mean 0.5 -> informative, mass 0.5 + 0.5
        _row(1, "p2", 1.0, 0.5), _row(1, "p2", 0.0, -0.5),
        # step 2, p1 again: another group (another step); an invalid row counts as accuracy 0
        _row(2, "p1", 1.0, 0.2), _row(2, "p1", None, -0.2, canonical=None, valid=False),
    ]  # fmt: skip
    s = group_signal(rows)
    assert (s.steps, s.groups) == (2, 3)
    assert s.familiar_share == pytest.approx(1 / 3)
    assert s.informative_per_step == pytest.approx(2 / 2)
    assert s.familiar_advantage_mass == pytest.approx(0.2 / 1.6)


def test_the_threshold_is_inclusive_and_adjustable():
    rows = [_row(1, "p", 0.95, 0.0), _row(1, "p", 0.95, 0.0)]
    assert group_signal(rows).familiar_share == 1.0
    assert group_signal(rows, familiar=0.96).familiar_share == 0.0


def test_all_tied_groups_have_no_mass_to_share():
    s = group_signal([_row(1, "p", 1.0, 0.0), _row(1, "p", 1.0, 0.0)])
    assert s.familiar_share == 1.0 and s.informative_per_step == 0.0
    assert math.isnan(s.familiar_advantage_mass)


def test_a_run_without_accuracy_is_a_clear_error():
    with pytest.raises(ValueError, match=r"rollout\.execute"):
        group_signal([_row(1, "p", None, 0.3)])
    with pytest.raises(ValueError, match="no samples"):
        group_signal([])


def test_near_best_share_per_block_by_hand():
    regrets = {"A": 0.0, "B": 0.02, "C": 0.05}
    calls = []

    def regret_of(text):
        calls.append(text)
        return regrets[text]

    rows = [
        _row(1, "p", 1, 0.3, "A"), _row(2, "p", 1, -0.2, "C"),
        _row(3, "p", 1, 0.0, None, valid=False),
        _row(4, "p", 1, -0.1, "B"), _row(5, "p", 1, 0.4, "C"), _row(6, "p", 1, 0.0, "C"),
        _row(7, "p", 1, 0.5, "C"), _row(7, "q", 1, 0.1, "A"), _row(8, "q", 1, None, "A"),
    ]  # fmt: skip
    blocks = near_best_by_block(rows, regret_of, block=3)
    # steps 1-3: A near, C not, invalid not -> 1/3, the near ones' advantage 0.3;
    # steps 4-6: B (0.02 is within) -> 1/3, advantage -0.1;
    # steps 7-9: A twice of 3 -> 2/3; advantages 0.1 and none (not trained on: left out) -> 0.1
    assert [(b.label, b.share, b.advantage) for b in blocks] == [
        ("1-3", pytest.approx(1 / 3), pytest.approx(0.3)),
        ("4-6", pytest.approx(1 / 3), pytest.approx(-0.1)),
        ("7-9", pytest.approx(2 / 3), pytest.approx(0.1)),
    ]
    assert sorted(calls) == ["A", "B", "C"]  # each workflow's regret computed once
    with pytest.raises(ValueError, match="block"):
        near_best_by_block(rows, regret_of, block=0)


def test_a_block_without_near_best_completions_has_no_advantage():
    rows = [_row(1, "p", 1, 0.2, "C"), _row(2, "p", 1, -0.2, "C")]
    (only,) = near_best_by_block(rows, lambda text: 0.05, block=5)
    assert only.share == 0.0 and math.isnan(only.advantage)
