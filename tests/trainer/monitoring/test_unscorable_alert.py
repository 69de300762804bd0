"""The ``unscorable_high`` health check: the executor failing for several steps in a row."""

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.monitoring.health import HealthConfig, HealthMonitor, run_checks


def lines(rates):
    return [{"step": i + 1, "unscorable_rate": r} for i, r in enumerate(rates)]


def fired(rates, config=None):
    history = lines(rates)
    config = config or HealthConfig()
    return [
        end
        for end in range(1, len(history) + 1)
        if any(a.name == "unscorable_high" for a in run_checks(history[:end], config))
    ]


def test_fires_on_the_nth_consecutive_step_above_the_bound_and_keeps_firing():
    # default: above 0.5 for 3 steps; 0.5 itself is not above; None breaks the streak
    assert fired([0.0, 0.6, 0.7, 0.8, 0.9, 0.5, 1.0, 1.0, None, 1.0, 1.0, 1.0]) == [4, 5, 12]


def test_thresholds_come_from_the_config():
    config = HealthConfig(unscorable_max=0.2, unscorable_steps=1)
    assert fired([0.1, 0.25, 0.2, 0.3], config) == [2, 4]


def test_alert_names_the_rate_the_streak_and_what_to_do():
    alerts = run_checks(lines([1.0, 0.75, 0.75]), HealthConfig())
    (alert,) = [a for a in alerts if a.name == "unscorable_high"]
    assert alert.step == 3 and alert.values["since_step"] == 1
    assert alert.values["unscorable_rate"] == 0.75 and "75%" in alert.message
    assert "executor" in alert.advice and "--resume" in alert.advice


def test_monitor_can_stop_the_run_on_it():
    monitor = HealthMonitor(HealthConfig(stop_on=["unscorable_high"], unscorable_steps=2))
    monitor.observe({"step": 1, "unscorable_rate": 1.0})
    assert not monitor.should_stop
    monitor.observe({"step": 2, "unscorable_rate": 1.0})
    assert monitor.should_stop and "unscorable_high" in monitor.stop_reason


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"unscorable_max": 1.5}, "unscorable_max"),
        ({"unscorable_max": -0.1}, "unscorable_max"),
        ({"unscorable_steps": 0}, "unscorable_steps"),
        ({"unscorable_steps": 2.5}, "unscorable_steps"),
    ],
)
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=f"^health.{field}: .*set health.{field}"):
        HealthConfig(**kwargs)
