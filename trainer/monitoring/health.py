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
``deadlock``           ``frac_reward_zero_std`` = 1 for ``deadlock_steps`` consecutive steps
``frozen_length``      completion length: same mean, min = max, for ``frozen_length_steps``
``zero_grad``          loss = 0 and grad_norm = 0 for ``zero_grad_steps`` consecutive steps
``step_time_collapse`` step_time < ratio × median of the previous steps (after a warm-up)
``adv_extreme``        ``adv_frac_extreme`` (share of \\|A\\| ≥ 0.99) > ``adv_extreme_max``
``fallback_high``      ``fallback_rate`` > ``fallback_max`` for ``fallback_steps`` steps
``update_collapse``    this rollout vs the one before the update: fallback jump / validity drop
=====================  ==========================================================================

A value that is missing, None or NaN makes a check unable to decide: it does not fire, and it
breaks a streak of consecutive steps. Torch-free; no I/O.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Literal, get_args

from flowgrpo.configuration import check, from_dict
from flowgrpo.registry import Registry
from flowgrpo.trainer.monitoring.collapse import collapse_at

logger = logging.getLogger(__name__)

EXIT_CODE_ALERT_STOP = 3
"""Exit status of ``flowgrpo train`` when it stopped because an alert named in ``stop_on``
fired (0 success, 1 a problem found, 2 usage error)."""

GuardMode = Literal["off", "warn", "rollback"]
GUARD_MODES: tuple[str, ...] = get_args(GuardMode)
_ZERO = 1e-12  # |x| at or below this counts as exactly zero (loss, grad_norm)


@dataclass(frozen=True)
class Alert:
    """One health alert at one step.

    Attributes:
        name: the check's registry name.
        step: the step it fired at (the ``step`` of the newest metrics line).
        message: what is wrong, with the numbers.
        values: the numbers that triggered it (JSON-ready).
        advice: what to try.
    """

    name: str
    step: int
    message: str
    values: dict = field(default_factory=dict)
    advice: str = ""

    def to_dict(self) -> dict:
        """A JSON-ready dict (an item of the metrics line's ``alerts`` list)."""
        return asdict(self)


def format_alert(alert: Alert) -> str:
    """One console line: ``ALERT name at step N: message | try: advice``."""
    text = f"ALERT {alert.name} at step {alert.step}: {alert.message}"
    return f"{text} | try: {alert.advice}" if alert.advice else text


CheckFn = Callable[[Sequence[Mapping], "HealthConfig"], "Alert | None"]

HEALTH_CHECKS: Registry[CheckFn] = Registry("health check")
"""Every health check by name; each entry's metadata holds ``keys`` (the metrics keys it reads)
and ``summary`` (its one-line condition). :func:`run_checks` runs them in sorted name order."""


def register_check(
    name: str, fn: CheckFn | None = None, *, keys: Iterable[str] = (), summary: str = ""
):
    """Add ``check(history, config) -> Alert | None`` to :data:`HEALTH_CHECKS` as ``name``.

    Use as ``register_check(name, fn)`` or as a decorator ``@register_check(name)``.
    ``keys`` are the metrics keys it reads (a report shows the check as not evaluated when none
    of them was logged); ``summary`` is its one-line condition. Names must be identifiers (they
    are written in ``health.stop_on``); duplicate names raise.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"check name must be an identifier like 'entropy_low', got {name!r}")
    return HEALTH_CHECKS.register(name, fn, keys=tuple(keys), summary=summary)


def check_names() -> tuple[str, ...]:
    """Registered check names, sorted (the order checks run and reports list them in)."""
    return HEALTH_CHECKS.names()


def get_check(name: str) -> CheckFn:
    """The check function registered as ``name``; unknown names list the choices."""
    return HEALTH_CHECKS.get(name)


def check_info(name: str) -> tuple[tuple[str, ...], str]:
    """(metrics keys read, one-line condition) of a registered check."""
    meta = HEALTH_CHECKS.meta(name)
    return tuple(meta.get("keys", ())), str(meta.get("summary", ""))


# --------------------------------------------------------------------------- config


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
        stop_on: check names whose alert stops the run (exit code ``EXIT_CODE_ALERT_STOP``);
            empty = only warn.
        collapse_fallback_jump: absolute rise of the fallback rate after an update that counts
            as an update → collapse event.
        collapse_validity_drop: absolute fall of the validity rate that counts as one.
        guard: what a collapse event does: ``off`` (not checked, no alert), ``warn`` (alert;
            the default, because with small rollouts a 0.3 jump can be noise and a rollback
            then throws away a real update), ``rollback`` (alert, restore the adapter and
            optimizer from before the update, lower the learning rate).
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
    stop_on: tuple[str, ...] = ()
    collapse_fallback_jump: float = 0.3
    collapse_validity_drop: float = 0.3
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
            check(name in HEALTH_CHECKS, "health.stop_on", HEALTH_CHECKS.unknown_message(name))
        check(
            not ("update_collapse" in stop_on and self.guard == "off"),
            "health.stop_on",
            "names update_collapse but guard is 'off' (collapses are not checked then): set "
            "health.guard to 'warn' or 'rollback', or drop it from stop_on",
        )
        object.__setattr__(self, "stop_on", stop_on)

    @classmethod
    def from_dict(cls, data: Mapping | None, path: str = "health.") -> HealthConfig:
        """Build from a config file's ``health`` section (:func:`flowgrpo.configuration.
        from_dict` with messages prefixed ``path``); None gives the defaults."""
        return from_dict(cls, data, path)

    def to_dict(self) -> dict:
        """A JSON/YAML-ready dict (``stop_on`` as a list)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stop_on"] = list(self.stop_on)
        return out


def _steps(value, _config) -> bool:
    return _is_int(value) and value >= 1


def _fraction(value, _config) -> bool:
    return _is_num(value) and 0 < value <= 1


def _share(value, _config) -> bool:
    return _is_num(value) and 0 <= value <= 1


_STEPS = "an integer >= 1 (a number of consecutive steps)"
_RULES = {
    "entropy_min": (lambda v, c: _is_num(v) and v >= 0, "a number >= 0 (nats; 0 disables it)"),
    "deadlock_steps": (_steps, _STEPS),
    "frozen_length_steps": (_steps, _STEPS),
    "zero_grad_steps": (_steps, _STEPS),
    "step_time_collapse_ratio": (
        lambda v, c: _is_num(v) and 0 <= v < 1,
        "a fraction in [0, 1) (0 disables the check)",
    ),
    "step_time_warmup": (_steps, "an integer >= 1 (previous steps before the check starts)"),
    "step_time_window": (
        lambda v, c: _is_int(v) and v >= c.step_time_warmup,
        "an integer >= step_time_warmup",
    ),
    "adv_extreme_max": (_share, "a share in [0, 1] (1 disables the check)"),
    "fallback_max": (_share, "a share in [0, 1] (1 disables the check)"),
    "fallback_steps": (_steps, _STEPS),
    "collapse_fallback_jump": (_fraction, "an absolute change in (0, 1]"),
    "collapse_validity_drop": (_fraction, "an absolute change in (0, 1]"),
    "guard": (lambda v, c: v in GUARD_MODES, f"one of {', '.join(GUARD_MODES)}"),
    "rollback_lr_factor": (_fraction, "a factor in (0, 1] (1 keeps the learning rate)"),
}


# --------------------------------------------------------------------------- helpers


def _num(line: Mapping, key: str) -> float | None:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _step(history: Sequence[Mapping], index: int = -1) -> int:
    index = index % len(history)
    step = history[index].get("step")
    return step if _is_int(step) else index


def _tail(history: Sequence[Mapping], n: int) -> list[Mapping] | None:  # None: fewer lines
    size = len(history)
    return None if size < n else [history[i] for i in range(size - n, size)]


def _streak(history: Sequence[Mapping], n: int, ok: Callable[[Mapping], bool]) -> bool:
    return len(history) >= n and all(ok(history[i]) for i in range(len(history) - n, len(history)))


def _first_step_of_streak(history: Sequence[Mapping], ok: Callable[[Mapping], bool]) -> int:
    i = len(history) - 1
    while i > 0 and ok(history[i - 1]):
        i -= 1
    return _step(history, i)


# --------------------------------------------------------------------------- the checks


@register_check("entropy_low", keys=("entropy",), summary="entropy < entropy_min")
def check_entropy_low(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Entropy collapse: the policy stopped exploring (2.5 -> 0.006 in a few steps was seen)."""
    entropy = _num(history[-1], "entropy")
    if entropy is None or not entropy < config.entropy_min:
        return None
    return Alert(
        "entropy_low",
        _step(history),
        f"entropy {entropy:.4g} is below {config.entropy_min:g}: the policy is close to "
        "deterministic and stops exploring",
        {"entropy": entropy, "entropy_min": config.entropy_min},
        "lower the learning rate; raise the upper clip epsilon (clip-higher, 0.28); use the "
        "clip_cov or kl_cov loss; add an entropy bonus or top-entropy-quantile masking",
    )


def _zero_std(line: Mapping) -> bool:
    value = _num(line, "frac_reward_zero_std")
    return value is not None and value >= 1 - 1e-9


@register_check(
    "deadlock",
    keys=("frac_reward_zero_std",),
    summary="frac_reward_zero_std = 1 for deadlock_steps steps",
)
def check_deadlock(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Every group had equal rewards for N steps: every advantage is 0, no gradient at all."""
    n = config.deadlock_steps
    if not _streak(history, n, _zero_std):
        return None
    since = _first_step_of_streak(history, _zero_std)
    return Alert(
        "deadlock",
        _step(history),
        f"frac_reward_zero_std = 1 for {n}+ consecutive steps (since step {since}): every group "
        "got equal rewards, so every advantage is 0 and there is no gradient",
        {"frac_reward_zero_std": 1.0, "steps": n, "since_step": since},
        "turn on dynamic sampling (resample or skip zero-variance groups); mix tasks or "
        "difficulties in the prompts; raise the group size K or the sampling temperature",
    )


def _length(line: Mapping) -> tuple[float, float | None, float | None] | None:
    mean = _num(line, "completions/mean_length")
    if mean is None:
        return None
    return mean, _num(line, "completions/min_length"), _num(line, "completions/max_length")


@register_check(
    "frozen_length",
    keys=("completions/mean_length",),
    summary="same mean completion length, min = max, for frozen_length_steps steps",
)
def check_frozen_length(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Every completion has the same length for N steps: the model writes one fixed output."""
    tail = _tail(history, config.frozen_length_steps)
    if tail is None:
        return None
    lengths = [_length(line) for line in tail]
    if any(item is None for item in lengths):
        return None
    mean = lengths[-1][0]
    for m, lo, hi in lengths:
        if abs(m - mean) > 1e-9 or (lo is not None and hi is not None and hi - lo > 1e-9):
            return None
    n = config.frozen_length_steps
    return Alert(
        "frozen_length",
        _step(history),
        f"completion length frozen at {mean:g} tokens with no spread for {n}+ steps: the "
        "policy writes the same output every time",
        {"mean_length": mean, "steps": n},
        "look at samples.jsonl (flowgrpo analyze); lower the learning rate; see entropy_low",
    )


def _zero_grad(line: Mapping) -> bool:
    loss, grad = _num(line, "loss"), _num(line, "grad_norm")
    return loss is not None and grad is not None and abs(loss) <= _ZERO and abs(grad) <= _ZERO


@register_check(
    "zero_grad",
    keys=("loss", "grad_norm"),
    summary="loss = 0 and grad_norm = 0 for zero_grad_steps steps",
)
def check_zero_grad(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """No learning signal at all for N steps (the reward_std = 0 deadlock seen in real runs)."""
    n = config.zero_grad_steps
    if not _streak(history, n, _zero_grad):
        return None
    since = _first_step_of_streak(history, _zero_grad)
    return Alert(
        "zero_grad",
        _step(history),
        f"loss = 0 and grad_norm = 0 for {n}+ consecutive steps (since step {since}): the "
        "optimizer is not changing the model",
        {"loss": 0.0, "grad_norm": 0.0, "steps": n, "since_step": since},
        "see deadlock: turn on dynamic sampling, raise K or the temperature, mix tasks; check "
        "that the trainable parameters require grad",
    )


@register_check(
    "step_time_collapse",
    keys=("step_time",),
    summary="step_time < step_time_collapse_ratio x running median",
)
def check_step_time_collapse(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """A step much faster than usual: rollouts or executor calls are probably not happening."""
    now = _num(history[-1], "step_time")
    ratio = config.step_time_collapse_ratio
    if now is None or ratio <= 0:
        return None
    size = len(history)
    start = max(0, size - 1 - config.step_time_window)
    previous = [_num(history[i], "step_time") for i in range(start, size - 1)]
    previous = [t for t in previous if t is not None]
    if len(previous) < config.step_time_warmup:
        return None
    median = statistics.median(previous)
    if median <= 0 or not now < ratio * median:
        return None
    return Alert(
        "step_time_collapse",
        _step(history),
        f"step took {now:.3g} s, under {ratio:g} x the running median {median:.3g} s: "
        "rollouts or executor calls are probably no longer happening",
        {"step_time": now, "median": median, "ratio": ratio},
        "check the executor (server down? every output a fallback, so nothing runs?) and "
        "the generation length; see fallback_high and deadlock",
    )


@register_check(
    "adv_extreme",
    keys=("adv_frac_extreme",),
    summary="share of |A| >= 0.99 > adv_extreme_max",
)
def check_adv_extreme(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Most advantages are ±1: the K=2 signature, where a valid DSL scored 0.2 gets -1.

    Reads ``adv_frac_extreme`` and, for groups of 2 (``group_size`` in the line),
    ``reward_z_frac_extreme``: the same share on within-group reward z-scores, which shows K=2
    whatever the estimator's std convention (grpo's unbiased std makes K=2 advantages ±0.707).
    Larger groups with two reward levels also have |z| = 1, so z-scores are not used for them.
    """
    keys = ["adv_frac_extreme"]
    if _num(history[-1], "group_size") == 2:
        keys.append("reward_z_frac_extreme")
    shares = [_num(history[-1], k) for k in keys]
    shares = [s for s in shares if s is not None]
    share = max(shares) if shares else None
    if share is None or not share > config.adv_extreme_max:
        return None
    return Alert(
        "adv_extreme",
        _step(history),
        f"{share:.0%} of advantages have |A| >= 0.99 (bound {config.adv_extreme_max:g}): the "
        "K=2 signature, where any reward difference becomes a full ±1",
        {"adv_frac_extreme": share, "adv_extreme_max": config.adv_extreme_max},
        "raise the group size K (>= 8); use dr_grpo (no std division) or gdpo advantages",
    )


@register_check(
    "fallback_high",
    keys=("fallback_rate",),
    summary="fallback_rate > fallback_max for fallback_steps steps",
)
def check_fallback_high(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Almost every output is prose, not a workflow, for N steps."""
    high = lambda line: (_num(line, "fallback_rate") or 0.0) > config.fallback_max  # noqa: E731
    if not _streak(history, config.fallback_steps, high):
        return None
    rate = _num(history[-1], "fallback_rate")
    return Alert(
        "fallback_high",
        _step(history),
        f"fallback rate {rate:.0%} above {config.fallback_max:g} for {config.fallback_steps}+ "
        "steps: almost no output contains a workflow",
        {
            "fallback_rate": rate,
            "fallback_max": config.fallback_max,
            "since_step": _first_step_of_streak(history, high),
        },
        "check the prompt and its examples (flowgrpo analyze on samples.jsonl); give the "
        "validity reward more weight; lower the learning rate; use the rollback guard",
    )


@register_check(
    "update_collapse",
    keys=("fallback_rate", "validity_rate"),
    summary="fallback jump / validity drop after an update",
)
def check_update_collapse(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """This rollout vs the one before the last update (see :func:`trainer.collapse.collapse_at`)."""
    if config.guard == "off":
        return None
    event = collapse_at(
        history, len(history) - 1, config.collapse_fallback_jump, config.collapse_validity_drop
    )
    if event is None:
        return None
    return Alert(
        "update_collapse",
        _step(history),
        f"update -> collapse since step {event.before_step}: {event.reason}",
        {
            "fallback_before": event.fallback_before,
            "fallback_after": event.fallback_after,
            "validity_before": event.validity_before,
            "validity_after": event.validity_after,
            "before_step": event.before_step,
        },
        "raise the group size K (>= 8); use dr_grpo or gdpo; lower the learning rate; set "
        "health.guard to rollback",
    )


# --------------------------------------------------------------------------- running


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
    :attr:`should_stop` is true. Pass ``history`` (earlier metrics lines) when resuming. The
    whole history is kept in memory (one small dict per step).
    """

    def __init__(self, config: HealthConfig | None = None, history: Iterable[Mapping] = ()):
        self.config = config or HealthConfig()
        self.history: list[dict] = [dict(line) for line in history]
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
        return alerts
