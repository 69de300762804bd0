"""The ``health`` config section: thresholds of the health checks and the collapse guard.

Import :class:`HealthConfig` from :mod:`flowgrpo.trainer.monitoring.health`: that module also
registers the built-in checks, which ``stop_on`` is validated against (this module sits below
the checks so that they can name the config type).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Literal, get_args

from flowgrpo.configuration import check, check_types, finite_number, from_dict, whole_number
from flowgrpo.trainer.monitoring.alerts import HEALTH_CHECKS, check_names
from flowgrpo.trainer.monitoring.collapse import CollapseRule

__all__ = ["GUARD_MODES", "GuardMode", "HealthConfig"]

GuardMode = Literal["off", "warn", "rollback"]
GUARD_MODES: tuple[str, ...] = get_args(GuardMode)


@dataclass(frozen=True)
class HealthConfig:
    """Thresholds of the health checks and the collapse guard (the ``health`` config section).

    Built from YAML by :func:`flowgrpo.configuration.from_dict` (unknown keys raise with a
    suggestion; ``guard: off``, which YAML reads as false, becomes ``"off"``); every field is
    checked in ``__post_init__`` and a bad value raises :class:`~flowgrpo.configuration.
    ConfigError` naming ``health.<field>`` and the fix. Tests: ``tests/trainer/test_health.py``.

    Attributes:
        entropy_min: ``entropy_low`` fires below this mean token entropy (nats). 0 disables.
        deadlock_steps: consecutive steps with ``frac_reward_zero_std`` = 1 for ``deadlock``.
        frozen_length_steps: consecutive steps of identical mean length with min = max
            (when min/max are logged) for ``frozen_length``.
        zero_grad_steps: consecutive steps with loss = 0 and grad_norm = 0 for ``zero_grad``.
        step_time_collapse_ratio: ``step_time_collapse`` fires when a step takes less than
            this fraction of the median of the previous steps' times. 0 disables.
        step_time_warmup: previous steps needed before ``step_time_collapse`` can fire (>= 1).
        step_time_window: how many previous steps the running median covers (>= warm-up). A
            collapse lasting about half the window becomes the new median and stops firing.
        adv_extreme_max: ``adv_extreme`` fires when the share of advantages with
            \\|A\\| >= 0.99 exceeds this (the K=2 signature: every A is ±1). 1 disables.
        fallback_max: ``fallback_high`` fires when the fallback rate exceeds this ...
        fallback_steps: ... for this many consecutive steps.
        unscorable_max: ``unscorable_high`` fires when ``unscorable_rate`` (share of
            completions the executor could not score: server down, timeouts, errors) exceeds
            this ...
        unscorable_steps: ... for this many consecutive steps.
        stop_on: check names whose alert stops the run (exit code ``EXIT_CODE_ALERT_STOP``);
            empty = only warn.
        collapse_fallback_jump: minimum absolute rise of the fallback rate (0..1) between the
            rollout before an update and the one after it for an update → collapse event: the
            effect size, on top of the significance test (:mod:`.collapse`; issue 13).
        collapse_validity_drop: minimum absolute fall of the validity rate (0..1) for one.
        collapse_alpha: significance of the one-sided pooled two-proportion z-test that the
            fallback rate rose (or validity fell), per rate: the chance that sampling noise
            alone fires it. 0.001: at most 0.11% per update at 16 completions (0.16% with both
            rates; about 4% of 30-update runs see one; ``tests/trainer/test_collapse.py``
            measures it by simulation; why not 0.01: :mod:`.collapse`).
        collapse_min_completions: completions both rollouts need (the metrics key
            ``num_completions``) before a collapse is decided; fewer, or no count logged, and
            the update is not judged (no alert, no rollback).
        guard: what a collapse event does: ``off`` (not checked, no alert), ``warn`` (alert
            only; this section's default), ``rollback`` (alert, restore the adapter and
            optimizer from before the update, lower the learning rate; ``TrainConfig``'s
            default). ``guard: off`` in YAML (read as false) means ``off``.
        rollback_lr_factor: the learning rate is multiplied by this on each rollback (1 keeps
            it).
    """

    entropy_min: float = 0.1
    deadlock_steps: int = 3
    frozen_length_steps: int = 5
    zero_grad_steps: int = 3
    step_time_collapse_ratio: float = 0.2
    step_time_warmup: int = 3
    step_time_window: int = 50
    adv_extreme_max: float = 0.5
    fallback_max: float = 0.9
    fallback_steps: int = 3
    unscorable_max: float = 0.5
    unscorable_steps: int = 3
    stop_on: tuple[str, ...] = ()
    collapse_fallback_jump: float = 0.2
    collapse_validity_drop: float = 0.2
    collapse_alpha: float = 0.001
    collapse_min_completions: int = 16
    guard: GuardMode = "warn"
    rollback_lr_factor: float = 0.5

    def __post_init__(self):
        for name, (ok, what) in _RULES.items():
            value = getattr(self, name)
            default = HealthConfig.__dataclass_fields__[name].default
            check(
                ok(value, self),
                f"health.{name}",
                f"must be {what}, got {value!r}; set health.{name} in the config "
                f"(default {default!r})",
            )
        self._check_stop_on()
        check_types(self, "health.")  # after the rules above: they name the fix for a type

    def _check_stop_on(self) -> None:
        stop_on = self.stop_on
        check(
            not isinstance(stop_on, str) and isinstance(stop_on, Iterable),
            "health.stop_on",
            f"must be a list of check names, got {stop_on!r}; write e.g. stop_on: [deadlock] "
            f"(choices: {', '.join(check_names())})",
        )
        stop_on = tuple(stop_on)
        for name in stop_on:
            check(
                isinstance(name, str) and bool(name.strip()),
                "health.stop_on",
                f"{name!r} is not a check name (choices: {', '.join(check_names())})",
            )
        check(
            not ("update_collapse" in stop_on and self.guard == "off"),
            "health.stop_on",
            "names update_collapse but guard is 'off' (collapses are not checked then): set "
            "health.guard to 'warn' or 'rollback', or drop it from stop_on",
        )
        object.__setattr__(self, "stop_on", stop_on)

    def check_names(self) -> None:
        """Every ``stop_on`` name must be a registered health check (``ConfigError`` listing the
        choices). Not done at construction (config is data; a plugin may register checks): a
        run environment's build calls it after importing the plugins."""
        for name in self.stop_on:
            check(name in HEALTH_CHECKS, "health.stop_on", HEALTH_CHECKS.unknown_message(name))

    @classmethod
    def from_dict(cls, data: Mapping | None, path: str = "health.") -> HealthConfig:
        """Build from a config file's ``health`` section (:func:`flowgrpo.configuration.
        from_dict` with messages prefixed ``path``); None gives the defaults."""
        return from_dict(cls, data, path)

    @property
    def collapse_rule(self) -> CollapseRule:
        """The update → collapse rule of these settings (for :func:`.collapse.collapse_at`)."""
        return CollapseRule(
            self.collapse_fallback_jump,
            self.collapse_validity_drop,
            self.collapse_alpha,
            self.collapse_min_completions,
        )

    def to_dict(self) -> dict:
        """A JSON/YAML-ready dict (``stop_on`` as a list)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stop_on"] = list(self.stop_on)
        return out


def _steps(value, _config) -> bool:
    return whole_number(value) and value >= 1


def _fraction(value, _config) -> bool:
    return finite_number(value) and 0 < value <= 1


def _share(value, _config) -> bool:
    return finite_number(value) and 0 <= value <= 1


_STEPS = "an integer >= 1 (a number of consecutive steps)"
_RULES = {
    "entropy_min": (
        lambda v, c: finite_number(v) and v >= 0,
        "a number >= 0 (nats; 0 disables it)",
    ),
    "deadlock_steps": (_steps, _STEPS),
    "frozen_length_steps": (_steps, _STEPS),
    "zero_grad_steps": (_steps, _STEPS),
    "step_time_collapse_ratio": (
        lambda v, c: finite_number(v) and 0 <= v < 1,
        "a fraction in [0, 1) (0 disables the check)",
    ),
    "step_time_warmup": (_steps, "an integer >= 1 (previous steps before the check starts)"),
    "step_time_window": (
        lambda v, c: whole_number(v) and v >= c.step_time_warmup,
        "an integer >= step_time_warmup",
    ),
    "adv_extreme_max": (_share, "a share in [0, 1] (1 disables the check)"),
    "fallback_max": (_share, "a share in [0, 1] (1 disables the check)"),
    "fallback_steps": (_steps, _STEPS),
    "unscorable_max": (_share, "a share in [0, 1] (1 disables the check)"),
    "unscorable_steps": (_steps, _STEPS),
    "collapse_fallback_jump": (_fraction, "an absolute change in (0, 1]"),
    "collapse_validity_drop": (_fraction, "an absolute change in (0, 1]"),
    "collapse_alpha": (
        lambda v, c: finite_number(v) and 0 < v <= 0.5,
        "a significance level in (0, 0.5], e.g. 0.001",
    ),
    "collapse_min_completions": (
        lambda v, c: whole_number(v) and v >= 2,
        "an integer >= 2 (completions per rollout)",
    ),
    "guard": (lambda v, c: v in GUARD_MODES, f"one of {', '.join(GUARD_MODES)}"),
    "rollback_lr_factor": (_fraction, "a factor in (0, 1] (1 keeps the learning rate)"),
}
