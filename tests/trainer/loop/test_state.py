"""The step state (loop/state.py): one immutable value for what changes between steps, produced
by the pure ``next_state`` from the state, the step's metrics line and the config; checked
against hand-computed walks, and round-tripped through a checkpoint's plain data."""

from __future__ import annotations

import dataclasses
import math

import pytest

from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.state import (
    StepState,
    initial_state,
    next_state,
    state_metrics,
)

CONTROLLED = ("algorithm.entropy_control.target=0.3", "algorithm.entropy_control.delta=0.01",
              "algorithm.entropy_control.max_coef=0.025")  # fmt: skip
HOT = ("rollout.tie_temperature=1.6", "rollout.tie_temperature_step=0.4",
       "rollout.max_tie_temperature=2.5")  # fmt: skip


def config(*overrides):
    return load_config("configs/tiny.yaml", overrides)


def test_the_initial_state_is_the_configs_values():
    assert initial_state(config()) == StepState(entropy_coef=0.0)
    cfg = config("algorithm.loss.entropy_coef=0.002", *HOT)
    assert initial_state(cfg) == StepState(entropy_coef=0.002, tie_temperature=1.6)


def test_the_state_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        initial_state(config()).entropy_coef = 1.0


def test_a_walk_of_steps_matches_the_hand_computed_table():
    """Entropy 0.1, 0.1, 0.1, 0.5 against target 0.3 (delta 0.01, cap 0.025); every step tied
    with no group kept, then an untied step (tie temperature 1.6, +0.4 up to 2.5)."""
    cfg = config(*CONTROLLED, *HOT)
    lines = [
        {"entropy": 0.1, "resample_temperature": 1.6, "kept_groups": 0},
        {"entropy": 0.1, "resample_temperature": 2.0, "kept_groups": 0},
        {"entropy": 0.1, "resample_temperature": 2.4, "kept_groups": 0},
        {"entropy": 0.5, "resample_temperature": None, "kept_groups": 2},
    ]
    expected = [(0.01, 0.1, 2.0), (0.02, 0.1, 2.4), (0.025, 0.1, 2.5), (0.015, 0.5, 1.6)]
    state = initial_state(cfg)
    for line, (coef, entropy, hot) in zip(lines, expected):
        state = next_state(state, line, cfg)
        assert state.entropy_coef == pytest.approx(coef)
        assert state.last_entropy == entropy and state.tie_temperature == pytest.approx(hot)


def test_next_state_is_pure():
    cfg, line = config(*CONTROLLED), {"entropy": 0.1}
    state = initial_state(cfg)
    assert next_state(state, line, cfg) == next_state(state, line, cfg)
    assert state == initial_state(cfg) and line == {"entropy": 0.1}  # nothing mutated


@pytest.mark.parametrize("entropy", [None, math.nan])
def test_an_unmeasured_entropy_leaves_the_coefficient(entropy):
    cfg = config(*CONTROLLED)
    state = StepState(entropy_coef=0.02, last_entropy=0.1)
    after = next_state(state, {"entropy": entropy}, cfg)
    assert after.entropy_coef == 0.02 and after.last_entropy is None


def test_with_the_controller_off_the_coefficient_is_the_configs():
    cfg = config("algorithm.loss.entropy_coef=0.003")
    state = next_state(initial_state(cfg), {"entropy": 0.0}, cfg)
    assert state == StepState(entropy_coef=0.003)
    assert state_metrics(state, cfg, updated=True) == {}  # nothing to record


def test_the_metrics_record_the_coefficient_the_update_applied():
    cfg = config(*CONTROLLED)
    below, above = StepState(0.02, last_entropy=0.1), StepState(0.02, last_entropy=0.9)
    assert state_metrics(below, cfg, updated=True) == {"entropy_coef": 0.02}
    assert state_metrics(above, cfg, updated=True) == {"entropy_coef": 0.0}  # above: none
    assert state_metrics(below, cfg, updated=False) == {"entropy_coef": 0.0}  # no update


def test_a_checkpoints_plain_data_round_trips_and_old_ones_take_initial_values():
    cfg = config(*CONTROLLED, *HOT)
    state = StepState(entropy_coef=0.02, last_entropy=0.1, tie_temperature=2.4)
    assert StepState.from_dict(state.to_dict(), cfg) == state
    assert StepState.from_dict({}, cfg) == initial_state(cfg)
