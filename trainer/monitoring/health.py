"""Training-health checks: pure functions over the metrics history that turn numbers into alerts.

Each check has a name (in a registry), thresholds in :class:`HealthConfig`, and returns an
:class:`Alert` (name, step, message, the numbers that triggered it, what to try) or None. A
check looks at the history up to and including the newest step, so it fires at exactly the step
where its condition becomes true, and **keeps firing at every step while the condition holds**
(so each affected metrics line carries the alert; :class:`HealthMonitor` logs at WARNING only
on entry and counts every firing).

Checks (see DESIGN.md, "Why it exists"):

=====================  ==========================================================================
``entropy_low``        entropy < ``entropy_min``
``deadlock``           ``frac_reward_zero_std`` = 1, no group kept, for ``deadlock_steps`` steps
``frozen_length``      completion length: same mean, min = max, for ``frozen_length_steps``
``zero_grad``          loss = 0 and grad_norm = 0 for ``zero_grad_steps`` consecutive steps
``step_time_collapse`` step_time < ratio × median of the previous steps (after a warm-up)
``adv_extreme``        ``adv_frac_extreme`` (share of \\|A\\| ≥ 0.99) > ``adv_extreme_max``
``fallback_high``      ``fallback_rate`` > ``fallback_max`` for ``fallback_steps`` steps
``unscorable_high``    ``unscorable_rate`` > ``unscorable_max`` for ``unscorable_steps`` steps
``update_collapse``    vs the rollout before the update: z-test on fallback rise / validity fall
=====================  ==========================================================================

A value that is missing, None or NaN makes a check unable to decide: it does not fire, and it
breaks a streak of consecutive steps. Torch-free; no I/O.

This module runs the checks (:func:`run_checks`, :class:`HealthMonitor`) and is the one to
import from: it re-exports :class:`Alert` and the registry helpers (from :mod:`.alerts`),
:class:`HealthConfig` (from :mod:`.health_config`) and the built-in checks (from :mod:`.checks`,
registered by importing this module).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from flowgrpo.trainer.monitoring.alerts import (
    HEALTH_CHECKS,
    Alert,
    CheckFn,
    check_info,
    check_names,
    format_alert,
    get_check,
    register_check,
)
from flowgrpo.trainer.monitoring.checks import (
    check_adv_extreme,
    check_deadlock,
    check_entropy_low,
    check_fallback_high,
    check_frozen_length,
    check_step_time_collapse,
    check_unscorable_high,
    check_update_collapse,
    check_zero_grad,
)
from flowgrpo.trainer.monitoring.health_config import GUARD_MODES, GuardMode, HealthConfig

__all__ = [
    "EXIT_CODE_ALERT_STOP",
    "GUARD_MODES",
    "HEALTH_CHECKS",
    "Alert",
    "CheckFn",
    "GuardMode",
    "HealthConfig",
    "HealthMonitor",
    "check_adv_extreme",
    "check_deadlock",
    "check_entropy_low",
    "check_fallback_high",
    "check_frozen_length",
    "check_info",
    "check_names",
    "check_step_time_collapse",
    "check_stop_on",
    "check_unscorable_high",
    "check_update_collapse",
    "check_zero_grad",
    "format_alert",
    "get_check",
    "register_check",
    "run_checks",
]

logger = logging.getLogger(__name__)

EXIT_CODE_ALERT_STOP = 3
"""Exit status of ``flowgrpo train`` when it stopped because an alert named in ``stop_on``
fired (0 success, 1 a problem found, 2 usage error)."""


def check_stop_on(config: HealthConfig) -> None:
    """``ConfigError`` unless every ``config.stop_on`` name is a registered check: a built-in
    one (registered by importing this module, which a config load does not do) or a plugin's.
    What a run environment's build calls, so that a run that never imported the trainer knows
    the built-in names too."""
    config.check_names()


def run_checks(
    history: Sequence[Mapping], config: HealthConfig | None = None, names: Iterable[str] = ()
) -> list[Alert]:
    """Every alert for the newest line of ``history`` (all checks, or only ``names``)."""
    if config is None:
        config = HealthConfig()
    if not history:
        return []
    chosen = tuple(names) or check_names()
    alerts = []
    for name in chosen:
        alert = get_check(name)(history, config)
        if alert is not None:
            alerts.append(alert)
    return alerts


class HealthMonitor:
    """Keeps the metrics history of a run and evaluates the checks once per step.

    The loop calls :meth:`observe` with each step's metrics dict (after the step; the returned
    alerts go into the line's ``alerts``), then stops with ``EXIT_CODE_ALERT_STOP`` when
    :attr:`should_stop` is true. Pass ``history`` (earlier metrics lines) when resuming.

    Memory stays flat over long runs: :attr:`history` keeps the last ``max_history`` lines
    (default 200, as many as a checkpoint stores for a resume; raised to what the configured
    windows need: the checks look back ``step_time_window`` + 1 lines at most, the collapse
    rule to the previous rollout) and :attr:`alerts` the last ``max_history`` alerts;
    :attr:`counts` counts every firing since the start. Without the bound each step added about
    2 KB (scripts/soak.py, docs/BENCHMARKS.md "Soak").
    """

    def __init__(
        self,
        config: HealthConfig | None = None,
        history: Iterable[Mapping] = (),
        max_history: int = 200,
    ):
        self.config = config or HealthConfig()
        c = self.config
        windows = (c.step_time_window + 1, c.deadlock_steps, c.frozen_length_steps,
                   c.zero_grad_steps, c.fallback_steps, c.unscorable_steps)  # fmt: skip
        self.max_history = max(int(max_history), *windows, 2)
        self.history: list[dict] = [dict(line) for line in history][-self.max_history :]
        self.counts: dict[str, int] = {}
        self.alerts: list[Alert] = []
        self.stop_alert: Alert | None = None
        self._active: set[str] = set()

    @property
    def should_stop(self) -> bool:
        """True once an alert named in ``config.stop_on`` has fired."""
        return self.stop_alert is not None

    @property
    def stop_reason(self) -> str | None:
        """Why the run should stop (the alert, formatted), or None."""
        if self.stop_alert is None:
            return None
        return f"stopping on alert (health.stop_on): {format_alert(self.stop_alert)}"

    def observe(self, metrics: Mapping) -> list[Alert]:
        """Add one step's metrics, run the checks, count and log the alerts; return them."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"observe() takes a dict of metrics, got {type(metrics).__name__}")
        self.history.append(dict(metrics))
        del self.history[: -self.max_history]
        alerts = run_checks(self.history, self.config)
        fired = {a.name for a in alerts}
        for alert in alerts:
            self.counts[alert.name] = self.counts.get(alert.name, 0) + 1
            level = logging.DEBUG if alert.name in self._active else logging.WARNING
            logger.log(level, "%s", format_alert(alert))
            if self.stop_alert is None and alert.name in self.config.stop_on:
                self.stop_alert = alert
        self._active = fired
        self.alerts.extend(alerts)
        del self.alerts[: -self.max_history]
        return alerts
