"""Adaptive entropy control (Skywork-OR1): the coefficient's walk against hand-computed tables,
the bonus applied only at or below the target, and the settings' validation."""

import math

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.algorithms.entropy_control import applied_entropy_coef, next_entropy_coef
from flowgrpo.trainer.config import EntropyControl

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
     ("max_coef", math.nan)],
)  # fmt: skip
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"algorithm.entropy_control.{field}"):
        EntropyControl(**{field: value})
