"""The config helpers every section's checks use (``flowgrpo.configuration``)."""

import math

import pytest

from flowgrpo.configuration import finite_number, whole_number

# value, finite_number, whole_number: a bool is neither (YAML's `yes` must not pass as 1)
TABLE = [
    (3, True, True),
    (0, True, True),
    (-2, True, True),
    (2.5, True, False),
    (3.0, True, False),
    (True, False, False),
    (False, False, False),
    (math.nan, False, False),
    (math.inf, False, False),
    ("3", False, False),
    (None, False, False),
]


@pytest.mark.parametrize(("value", "finite", "whole"), TABLE)
def test_numbers_a_config_accepts(value, finite, whole):
    assert finite_number(value) is finite
    assert whole_number(value) is whole
