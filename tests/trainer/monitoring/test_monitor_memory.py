"""HealthMonitor memory stays flat: a bounded history that fires the same alerts."""

from flowgrpo.trainer.monitoring.health import HealthConfig, HealthMonitor


def line(step: int) -> dict:
    """Healthy, except a deadlock (equal rewards) on steps 40-49 and slow steps every 7th."""
    return {
        "step": step,
        "entropy": 1.0,
        "frac_reward_zero_std": 1.0 if 40 <= step < 50 else 0.2,
        "step_time": 1.0 if step % 7 else 0.1,
        "completions/mean_length": 10 + step % 3,
        "unscorable_rate": 0.0,
    }


def fired(monitor: HealthMonitor, steps: int) -> list[tuple[int, str]]:
    return [(a.step, a.name) for s in range(1, steps + 1) for a in monitor.observe(line(s))]


def test_history_and_alerts_are_bounded_and_fire_as_without_a_bound():
    config = HealthConfig(step_time_window=5, step_time_warmup=3)
    bounded = HealthMonitor(config, max_history=10)
    unbounded = HealthMonitor(config, max_history=10_000)
    assert fired(bounded, 300) == fired(unbounded, 300)
    assert len(bounded.history) == 10 and bounded.history[-1]["step"] == 300
    assert len(unbounded.history) == 300
    assert len(bounded.alerts) <= 10 and bounded.counts == unbounded.counts
    assert bounded.counts["deadlock"] == 8  # steps 42..49


def test_the_bound_never_cuts_what_the_checks_look_at():
    monitor = HealthMonitor(HealthConfig(step_time_window=50), max_history=3)
    assert monitor.max_history == 51  # the step-time median needs 50 earlier lines
    assert HealthMonitor().max_history == 200
    resumed = HealthMonitor(HealthConfig(), [line(s) for s in range(1, 2001)])
    assert [x["step"] for x in resumed.history] == list(range(1801, 2001))
