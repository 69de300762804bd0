"""Adaptive entropy control (Skywork-OR1): the coefficient's walk against hand-computed tables,
the bonus applied only at or below the target, and the settings' validation."""

import math

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.algorithms.entropy_control import (
    EntropyControl,
    applied_entropy_coef,
    next_entropy_coef,
    next_temperature,
)

CONTROL = EntropyControl(target=0.3, delta=0.01, max_coef=0.025)


@pytest.mark.parametrize(
    ("coef", "entropy", "expected"),
    [
        (0.0, 0.1, 0.01),  # below the target: up by delta
        (0.01, 0.29, 0.02),
        (0.02, 0.05, 0.025),  # clamped at max_coef
        (0.025, 0.0, 0.025),
        (0.02, 0.3, 0.01),  # at the target: down
        (0.005, 0.9, 0.0),  # clamped at 0
        (0.0, 0.9, 0.0),
        (0.01, None, 0.01),  # unmeasured: unchanged
        (0.01, math.nan, 0.01),
    ],
)
def test_the_coefficient_walks_toward_the_target(coef, entropy, expected):
    assert next_entropy_coef(coef, entropy, CONTROL) == pytest.approx(expected)


def test_a_run_of_low_entropy_steps_raises_the_coefficient_to_its_cap():
    coef, walk = 0.0, []
    for entropy in (0.1, 0.1, 0.1, 0.1, 0.5, 0.5, 0.5):
        coef = next_entropy_coef(coef, entropy, CONTROL)
        walk.append(round(coef, 6))
    assert walk == [0.01, 0.02, 0.025, 0.025, 0.015, 0.005, 0.0]


def test_the_bonus_is_applied_only_at_or_below_the_target():
    assert applied_entropy_coef(0.02, 0.1, CONTROL) == 0.02
    assert applied_entropy_coef(0.02, 0.3, CONTROL) == 0.02
    assert applied_entropy_coef(0.02, 0.31, CONTROL) == 0.0
    assert applied_entropy_coef(0.02, None, CONTROL) == 0.02  # first step: nothing measured


def test_off_leaves_the_configured_coefficient_alone():
    off = EntropyControl()
    assert next_entropy_coef(0.003, 0.0, off) == 0.003
    assert applied_entropy_coef(0.003, 9.0, off) == 0.003


@pytest.mark.parametrize(
    ("field", "value"),
    [("target", -0.1), ("target", 0.0), ("target", math.inf), ("delta", 0.0), ("max_coef", -1.0),
     ("temperature_delta", -0.1), ("temperature_delta", math.nan), ("max_temperature", math.inf)],
)  # fmt: skip
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"algorithm.entropy_control.{field}"):
        EntropyControl(**{field: value})


HOT = EntropyControl(target=0.3, temperature_delta=0.25, max_temperature=1.5)


@pytest.mark.parametrize(
    ("temperature", "entropy", "expected"),
    [
        (0.8, 0.1, 1.05),  # below the target: up by temperature_delta
        (1.05, 0.29, 1.3),
        (1.3, 0.0, 1.5),  # clamped at max_temperature
        (1.5, 0.3, 1.25),  # at the target: down
        (0.9, 0.9, 0.8),  # never below the run's own temperature (base 0.8)
        (0.8, 0.9, 0.8),
        (1.05, None, 1.05),  # unmeasured: unchanged
        (1.05, math.nan, 1.05),
    ],
)
def test_the_temperature_walks_toward_the_target_within_its_bounds(temperature, entropy, expected):
    assert next_temperature(temperature, entropy, HOT, base=0.8) == pytest.approx(expected)


def test_without_a_temperature_delta_the_temperature_never_moves():
    assert next_temperature(0.8, 0.0, CONTROL, base=0.8) == 0.8  # coefficient-only controller
    assert next_temperature(0.8, 0.0, EntropyControl(temperature_delta=0.2), base=0.8) == 0.8


def test_a_max_temperature_below_the_rollout_temperature_names_the_fix():
    with pytest.raises(ConfigError, match=r"max_temperature.*below rollout\.temperature=1\.8"):
        HOT.check_temperature(1.8)
    HOT.check_temperature(1.5)  # equal is allowed: the lever then never raises it
    EntropyControl(target=0.3, max_temperature=0.1).check_temperature(1.2)  # lever off: no rule
