"""Health alerts and the registry of health checks (the part every check module imports).

A health check is a pure function ``check(history, config) -> Alert | None`` over the metrics
history (a sequence of metrics lines, newest last) and a :class:`~flowgrpo.trainer.monitoring.
health_config.HealthConfig`. Checks are registered in :data:`HEALTH_CHECKS` (a
:class:`flowgrpo.registry.Registry`) with the metrics keys they read and a one-line summary;
the built-in ones are in :mod:`.checks`, registered when :mod:`.health` is imported.

Imports only :mod:`flowgrpo.registry`: it sits below the checks, the config and the monitor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from flowgrpo.registry import Registry

__all__ = [
    "HEALTH_CHECKS",
    "Alert",
    "CheckFn",
    "check_info",
    "check_names",
    "format_alert",
    "get_check",
    "register_check",
]


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


CheckFn = Callable[[Sequence[Mapping], Any], "Alert | None"]
"""``check(history, config) -> Alert | None``; ``config`` is a ``HealthConfig``."""

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
