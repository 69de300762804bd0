"""Health checks on synthetic histories: each alert fires exactly when it should, not before."""

import json
import logging
import math

import pytest
import yaml

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.monitoring import health
from flowgrpo.trainer.monitoring.health import (
    EXIT_CODE_ALERT_STOP,
    Alert,
    HealthConfig,
    HealthMonitor,
    check_info,
    check_names,
    format_alert,
    get_check,
    register_check,
    run_checks,
)


def healthy_line(step: int) -> dict:
    """A metrics line with nothing wrong (lengths and times vary a little)."""
    return {
        "step": step,
        "loss": 0.05 + 0.001 * step,
        "grad_norm": 0.4,
        "reward": 0.5,
        "entropy": 1.2,
        "frac_reward_zero_std": 0.25,
        "completions/mean_length": 20.0 + step % 3,
        "completions/min_length": 12,
        "completions/max_length": 31,
        "step_time": 10.0 + (step % 2),
        "adv_frac_extreme": 0.1,
        "fallback_rate": 0.2,
        "validity_rate": 0.8,
        "num_completions": 64,
        "rollback": False,
    }


def history(n: int, **changes) -> list[dict]:
    """``n`` healthy lines (steps 1..n); ``changes[key] = {step: value}`` overrides values."""
    lines = [healthy_line(step) for step in range(1, n + 1)]
    for key, by_step in changes.items():
        key = key.replace("__", "/")
        for step, value in by_step.items():
            lines[step - 1][key] = value
    return lines


def fired(lines, name, config=None):
    """Steps at which check ``name`` fires when the history is replayed step by step."""
    config = config or HealthConfig()
    return [
        lines[end - 1]["step"]
        for end in range(1, len(lines) + 1)
        if any(a.name == name for a in run_checks(lines[:end], config))
    ]


def test_a_healthy_history_raises_no_alert():
    lines = history(40)
    assert all(run_checks(lines[:end]) == [] for end in range(1, 41))


def test_entropy_alert_fires_from_the_step_it_drops_below_the_threshold():
    lines = history(10, entropy={6: 0.1, 7: 0.09, 8: 0.01, 9: 0.05})
    assert fired(lines, "entropy_low") == [7, 8, 9]  # 0.1 itself is not below 0.1
    assert fired(lines, "entropy_low", HealthConfig(entropy_min=0.5)) == [6, 7, 8, 9]
    alert = run_checks(lines[:8])[0]
    assert alert.values["entropy"] == 0.01 and alert.step == 8 and "entropy" in alert.advice


def test_deadlock_fires_on_the_nth_consecutive_zero_std_step_and_keeps_firing():
    lines = history(10, frac_reward_zero_std={s: 1.0 for s in range(5, 11)})
    assert fired(lines, "deadlock") == [7, 8, 9, 10]
    assert fired(lines, "deadlock", HealthConfig(deadlock_steps=5)) == [9, 10]
    alert = get_check("deadlock")(lines[:8], HealthConfig())
    assert alert.values["since_step"] == 5 and "dynamic sampling" in alert.advice


ZERO = {s: 1.0 for s in range(1, 6)}
NO_GRAD = {"loss": dict.fromkeys(range(1, 6), 0.0), "grad_norm": dict.fromkeys(range(1, 6), 0.0)}


@pytest.mark.parametrize("name", ["deadlock", "zero_grad"])
@pytest.mark.parametrize(
    ("shown", "advised", "never"),
    [  # (what the metrics show, what the advice says, what it must not suggest)
        ({"resampled_groups": dict.fromkeys(range(1, 6), 2)}, "max_resample_rounds",
         "turn on dynamic sampling"),
        ({"fallback_rate": dict.fromkeys(range(1, 6), 1.0)}, "rollout.constrained: grammar",
         "turn on dynamic sampling"),
        ({}, "turn on dynamic sampling", "max_resample_rounds"),
    ],
    ids=["dynamic sampling on", "all prose", "neither"],
)  # fmt: skip
def test_a_no_signal_hint_never_suggests_what_the_run_already_does(name, shown, advised, never):
    """Issue 43: the tiny run was told to turn on dynamic sampling, which was on."""
    lines = history(5, frac_reward_zero_std=ZERO, kept_groups=dict.fromkeys(range(1, 6), 0),
                    **NO_GRAD, **shown)  # fmt: skip
    alert = get_check(name)(lines, HealthConfig())
    assert advised in alert.advice and never not in alert.advice


def test_a_tied_first_rollout_whose_resampled_groups_trained_is_no_deadlock():
    # dynamic sampling found informative groups at steps 6 and 9: those steps had a gradient
    tied = {s: 1.0 for s in range(4, 11)}
    kept = {s: 0 for s in range(4, 11)} | {6: 1, 9: 2}
    lines = history(10, frac_reward_zero_std=tied, kept_groups=kept)
    assert fired(lines, "deadlock") == []
    lines = history(10, frac_reward_zero_std=tied, kept_groups={s: 0 for s in range(4, 11)})
    assert fired(lines, "deadlock") == [6, 7, 8, 9, 10]


def test_an_interrupted_zero_std_streak_is_no_deadlock():
    lines = history(8, frac_reward_zero_std={3: 1.0, 4: 1.0, 5: 0.9, 6: 1.0, 7: 1.0})
    assert fired(lines, "deadlock") == []
    lines[7]["frac_reward_zero_std"] = 1.0
    assert fired(lines, "deadlock") == [8]


def test_frozen_length_needs_the_same_mean_and_no_spread_for_n_steps():
    frozen = {s: 17.0 for s in range(4, 12)}
    lines = history(
        11,
        completions__mean_length=frozen,
        completions__min_length=frozen,
        completions__max_length=frozen,
    )
    assert fired(lines, "frozen_length") == [8, 9, 10, 11]
    assert fired(lines, "frozen_length", HealthConfig(frozen_length_steps=2)) == list(range(5, 12))
    spread = history(11, completions__mean_length=frozen)  # same mean, but min < max
    assert fired(spread, "frozen_length") == []


def test_zero_grad_needs_both_loss_and_grad_norm_zero():
    zeros = {s: 0.0 for s in range(3, 9)}
    assert fired(history(8, loss=zeros, grad_norm=zeros), "zero_grad") == [5, 6, 7, 8]
    assert fired(history(8, loss=zeros), "zero_grad") == []  # a gradient still flows
    assert fired(history(8, grad_norm=zeros), "zero_grad") == []


def test_step_time_collapse_compares_with_the_running_median_after_warm_up():
    lines = history(8, step_time={5: 1.9, 6: 2.5, 7: 0.5})
    # median of previous steps ~10.5: 0.2 x median ~2.1, so 1.9 and 0.5 fire, 2.5 does not
    assert fired(lines, "step_time_collapse") == [5, 7]
    early = history(4, step_time={3: 0.1})  # only 2 previous steps: still warming up
    assert fired(early, "step_time_collapse") == []
    assert fired(history(4, step_time={4: 0.1}), "step_time_collapse") == [4]
    off = HealthConfig(step_time_collapse_ratio=0.0)
    assert fired(lines, "step_time_collapse", off) == []


def test_adv_extreme_fires_strictly_above_the_bound():
    lines = history(6, adv_frac_extreme={3: 0.5, 4: 1.0, 5: 0.51})
    assert fired(lines, "adv_extreme") == [4, 5]
    assert "K" in run_checks(lines[:4])[0].advice


def test_fallback_high_needs_n_consecutive_steps_above_the_bound():
    lines = history(8, fallback_rate={2: 0.95, 3: 1.0, 4: 0.92, 5: 0.9, 6: 0.97})
    assert fired(lines, "fallback_high") == [4]  # 0.9 is not above 0.9; the streak restarts
    assert fired(lines, "fallback_high", HealthConfig(fallback_steps=1)) == [2, 3, 4, 6]


def test_update_collapse_compares_each_rollout_with_the_one_before_the_update():
    lines = history(7, fallback_rate={4: 0.5, 5: 0.5, 6: 0.5}, validity_rate={6: 0.45})
    # 64 completions per rollout. step 4: fallback 0.2 -> 0.5 (z ~ 3.6); step 6: validity
    # 0.8 -> 0.45 (z ~ 4.1); steps 5 and 7 steady
    assert fired(lines, "update_collapse") == [4, 6]
    alert = get_check("update_collapse")(lines[:4], HealthConfig())
    assert alert.values["fallback_before"] == 0.2 and alert.values["fallback_after"] == 0.5
    assert alert.values["n_after"] == 64 and alert.values["fallback_p"] < 0.001
    assert "z=" in alert.message and "p=" in alert.message
    assert fired(lines, "update_collapse", HealthConfig(guard="off")) == []


def test_the_same_jump_is_noise_over_16_completions_and_undecided_without_a_count():
    lines = history(7, fallback_rate={4: 0.5, 5: 0.5, 6: 0.5}, validity_rate={6: 0.45})
    for line in lines:
        line["num_completions"] = 16  # +0.3 over 16 completions: z ~ 1.8, p ~ 0.04 > 0.01
    assert fired(lines, "update_collapse") == []
    assert fired(lines, "update_collapse", HealthConfig(collapse_alpha=0.05)) == [4, 6]
    assert fired(lines, "update_collapse", HealthConfig(collapse_min_completions=32)) == []
    for line in lines:
        del line["num_completions"]
    assert fired(lines, "update_collapse", HealthConfig(collapse_alpha=0.05)) == []


def test_update_collapse_after_a_rollback_compares_with_the_restored_rollout():
    lines = history(5, fallback_rate={3: 0.9, 4: 0.85}, rollback={3: True})
    # step 4 is compared with step 2 (the weights of step 3's rollout were thrown away)
    assert fired(lines, "update_collapse") == [3, 4]
    alert = get_check("update_collapse")(lines[:4], HealthConfig())
    assert alert.values["before_step"] == 2


def test_missing_or_nan_values_never_fire_and_break_streaks():
    lines = [{"step": s, "frac_reward_zero_std": 1.0} for s in range(1, 6)]
    lines[2]["frac_reward_zero_std"] = math.nan
    assert fired(lines, "deadlock") == []
    assert run_checks([{"step": 1}]) == [] and run_checks([]) == []
    assert run_checks([{"step": 1, "entropy": None, "loss": "x"}]) == []


def test_the_step_defaults_to_the_line_index_when_not_logged():
    lines = [{"entropy": 1.0}, {"entropy": 0.0}]
    assert run_checks(lines)[0].step == 1


def test_alerts_are_json_ready_and_format_on_one_line():
    alert = run_checks(history(3, entropy={3: 0.01}))[0]
    data = json.loads(json.dumps(alert.to_dict()))
    assert data["name"] == "entropy_low" and data["step"] == 3 and data["values"]["entropy"] == 0.01
    text = format_alert(alert)
    assert text.startswith("ALERT entropy_low at step 3") and "\n" not in text


def test_registry_rejects_duplicates_and_lists_choices_for_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        register_check("deadlock")(lambda h, c: None)
    with pytest.raises(ValueError, match="already registered"):
        register_check("entropy_low", lambda h, c: None)
    with pytest.raises(ValueError, match=r"did you mean 'deadlock'.*choose one of: adv_extreme"):
        get_check("dedlock")
    assert {"entropy_low", "deadlock", "update_collapse"} <= set(check_names())
    with pytest.raises(ValueError, match="identifier"):
        register_check("not a name", lambda h, c: None)


def test_checks_are_listed_and_run_in_sorted_name_order():
    names = check_names()
    assert names == tuple(sorted(names)) and names[0] == "adv_extreme"
    assert health.HEALTH_CHECKS.names() == names
    assert check_info("deadlock") == (
        ("frac_reward_zero_std",),
        health.HEALTH_CHECKS.meta("deadlock")["summary"],
    )
    # entropy_low and deadlock fire on the same line: alerts come in name order
    lines = history(4, entropy={4: 0.01}, frac_reward_zero_std={2: 1.0, 3: 1.0, 4: 1.0})
    assert [a.name for a in run_checks(lines)] == ["deadlock", "entropy_low"]


def test_a_registered_check_runs_and_can_be_selected_by_name():
    @register_check("test_reward_negative", keys=("reward",))
    def negative(history, config):
        if history[-1].get("reward", 0) < 0:
            return Alert("test_reward_negative", history[-1]["step"], "reward < 0")
        return None

    try:
        lines = history(3, reward={3: -1.0})
        assert [a.name for a in run_checks(lines)] == ["test_reward_negative"]
        assert run_checks(lines, names=["deadlock"]) == []
        assert HealthConfig(stop_on=["test_reward_negative"]).stop_on == ("test_reward_negative",)
    finally:
        health.HEALTH_CHECKS.unregister("test_reward_negative")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"entropy_min": -1}, "entropy_min"),
        ({"deadlock_steps": 0}, "deadlock_steps"),
        ({"zero_grad_steps": 2.5}, "zero_grad_steps"),
        ({"frozen_length_steps": True}, "frozen_length_steps"),
        ({"step_time_collapse_ratio": 1.0}, "step_time_collapse_ratio"),
        ({"step_time_window": 2}, "step_time_window"),
        ({"adv_extreme_max": 1.5}, "adv_extreme_max"),
        ({"fallback_max": math.nan}, "fallback_max"),
        ({"collapse_fallback_jump": 0}, "collapse_fallback_jump"),
        ({"collapse_alpha": 0}, "collapse_alpha"),
        ({"collapse_alpha": 0.9}, "collapse_alpha"),
        ({"collapse_min_completions": 1}, "collapse_min_completions"),
        ({"collapse_min_completions": 16.0}, "collapse_min_completions"),
        ({"guard": "panic"}, "guard"),
        ({"rollback_lr_factor": 2.0}, "rollback_lr_factor"),
        ({"stop_on": "deadlock"}, "stop_on"),
        ({"stop_on": ["dedlock"]}, "stop_on"),
        ({"stop_on": ["update_collapse"], "guard": "off"}, "stop_on"),
    ],
)
def test_bad_config_values_name_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ConfigError, match=f"^health.{field}: ") as info:
        HealthConfig(**kwargs).check_names()  # stop_on names: when a run is built
    message = str(info.value)
    assert any(fix in message for fix in ("set health.", "choose one of", "drop it", "write e.g."))


def test_guard_off_from_yaml_is_the_word_off():
    # `--set health.guard=off` and `guard: off` in a YAML file both arrive as False (YAML 1.1)
    assert yaml.safe_load("off") is False
    assert HealthConfig.from_dict({"guard": False}).guard == "off"
    assert HealthConfig.from_dict(yaml.safe_load("guard: off\nstop_on: [deadlock]")).guard == "off"
    assert HealthConfig.from_dict({"guard": "rollback"}).guard == "rollback"
    with pytest.raises(ConfigError, match=r"health.guard: got True; choose one of off, warn"):
        HealthConfig.from_dict({"guard": True})  # `on` is no mode
    with pytest.raises(ConfigError, match=r"health.stop_on: expected a list"):
        HealthConfig.from_dict({"stop_on": "deadlock"})
    with pytest.raises(ConfigError, match=r"health.deadlock_steps: expected an integer"):
        HealthConfig.from_dict({"deadlock_steps": "3"})
    assert HealthConfig.from_dict({"entropy_min": "1e-2"}).entropy_min == 0.01  # YAML 1.1 string


def test_config_from_a_mapping_rejects_unknown_keys_and_round_trips():
    config = HealthConfig.from_dict({"deadlock_steps": 5, "stop_on": ["deadlock"]})
    assert config.deadlock_steps == 5 and config.stop_on == ("deadlock",)
    assert HealthConfig.from_dict(config.to_dict()) == config
    assert HealthConfig.from_dict(None) == HealthConfig()
    with pytest.raises(
        ConfigError, match=r"unknown key health\.entropy_mn; did you mean 'entropy_min'"
    ):
        HealthConfig.from_dict({"entropy_mn": 0.2})
    with pytest.raises(ConfigError, match="health: expected a mapping"):
        HealthConfig.from_dict(["deadlock_steps"])


def test_monitor_counts_every_firing_and_logs_a_warning_only_on_entry(caplog):
    monitor = HealthMonitor()
    lines = history(6, entropy={3: 0.01, 4: 0.02, 5: 0.03})
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.monitoring.health"):
        per_step = [monitor.observe(line) for line in lines]
    assert [len(a) for a in per_step] == [0, 0, 1, 1, 1, 0]
    assert monitor.counts == {"entropy_low": 3}
    assert len([r for r in caplog.records if "entropy_low" in r.getMessage()]) == 1
    assert not monitor.should_stop and monitor.stop_reason is None


def test_monitor_stops_on_a_named_alert_only():
    lines = history(6, frac_reward_zero_std={s: 1.0 for s in range(2, 7)}, entropy={2: 0.01})
    warn_only = HealthMonitor(HealthConfig(stop_on=("zero_grad",)))
    for line in lines:
        warn_only.observe(line)
    assert not warn_only.should_stop and warn_only.counts["deadlock"] == 3
    monitor = HealthMonitor(HealthConfig(stop_on=("deadlock",)))
    stopped_at = None
    for line in lines:
        monitor.observe(line)
        if monitor.should_stop:
            stopped_at = line["step"]
            break
    assert stopped_at == 4
    assert "deadlock" in monitor.stop_reason and monitor.stop_alert.step == 4
    assert EXIT_CODE_ALERT_STOP == 3


def test_monitor_resumes_with_earlier_history():
    lines = history(4, frac_reward_zero_std={2: 1.0, 3: 1.0, 4: 1.0})
    monitor = HealthMonitor(history=lines[:3])
    assert [a.name for a in monitor.observe(lines[3])] == ["deadlock"]
    with pytest.raises(TypeError, match="dict of metrics"):
        monitor.observe([1, 2])


def test_adv_extreme_reads_reward_z_scores_only_for_groups_of_two():
    from flowgrpo.trainer.monitoring.health import HealthConfig, check_adv_extreme

    line = {"step": 1, "adv_frac_extreme": 0.0, "reward_z_frac_extreme": 1.0}
    assert check_adv_extreme([{**line, "group_size": 2}], HealthConfig()) is not None
    assert check_adv_extreme([{**line, "group_size": 8}], HealthConfig()) is None
