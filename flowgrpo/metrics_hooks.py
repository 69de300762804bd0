"""Metrics hooks: a plugin's own metrics, in every training step's line and in evaluations.

The extension point for numbers only a plugin can compute (the simulated executor's ``sim/*``
regret is one, registered by its plugin module ``flowgrpo.operators.backends.simulated``). A
plugin registers a :class:`MetricsHook` when it is imported::

    from flowgrpo.metrics_hooks import MetricsHook, register_metrics_hook

    register_metrics_hook("mine", MetricsHook(keys=("mine/score",), start=start, compute=compute))

For a run, ``hook.start(config, limits)`` is called once when the run is set up (the
``TrainConfig``, after its plugins and its executor's plugin are imported, and the interpreter's
per-workflow ``Limits`` of its ``executor`` section); it returns the hook's settings for the run,
or None when the hook has nothing to say about this run (then it is never called again).
Each step, ``hook.compute(settings, workflows, problems)`` gets the step's first
rollout, one entry per completion: the canonical text of its valid workflow or None (fallback or
invalid), and its :class:`~flowgrpo.operators.tasks.base.Problem`; it returns ``{key: value}``
for its ``keys`` (floats or None), added to the step's metrics line. ``flowgrpo eval`` calls it
the same way over the evaluated completions. Keys should carry a prefix of their own
(``mine/...``); they are written after the core schema's keys (``trainer/monitoring/metrics.py``),
and only in runs where the hook is on.

This module imports nothing from flowgrpo's packages (it sits below ``flowgrpo.dsl``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowgrpo.registry import Registry

__all__ = ["METRICS_HOOKS", "MetricsHook", "register_metrics_hook"]


@dataclass(frozen=True)
class MetricsHook:
    """A plugin's metrics (see the module docstring for when each function is called).

    Attributes:
        keys: the metric keys ``compute`` returns.
        start: ``(config, limits) -> settings or None``: the hook's settings for a run (None:
            off for this run); ``limits``: the run's interpreter ``Limits``. Raise
            ``ValueError`` naming the field for a config it cannot serve.
        compute: ``(settings, workflows, problems) -> {key: value}`` (see the module
            docstring).
        console: ``(metrics line) -> str``: text added to the step's console line ("" for
            none); None: nothing.
        report: ``(evaluation result) -> list of lines`` added to ``flowgrpo eval``'s text;
            None: nothing.
        note: what the numbers are, stored as the evaluation result's ``executor`` entry and
            shown on its second line (e.g. that they come from a simulation); None: nothing.
        meanings: key -> what it means, for the metrics reference (docs/METRICS.md lists the
            built-in plugins' keys from here); a key without one is listed bare.
        headline: the keys ``flowgrpo eval`` compares between results and draws over
            checkpoints (``eval --compare``, ``eval --all``), where a result has them.
    """

    keys: tuple[str, ...]
    start: Callable[[Any, Any], Any]
    compute: Callable[[Any, Sequence[str | None], Sequence[Any]], dict]
    console: Callable[[Mapping[str, Any]], str] | None = None
    report: Callable[[Mapping[str, Any]], list[str]] | None = None
    note: str | None = None
    meanings: Mapping[str, str] = field(default_factory=dict)
    headline: tuple[str, ...] = ()


#: Metrics hooks by name.
METRICS_HOOKS: Registry[MetricsHook] = Registry("metrics hook")


def register_metrics_hook(name: str, hook: MetricsHook) -> MetricsHook:
    """Register ``hook`` under ``name``; registering a name twice raises ``ValueError``."""
    if not isinstance(hook, MetricsHook):
        raise ValueError(f"metrics hook {name!r} must be a MetricsHook, got {hook!r}")
    return METRICS_HOOKS.register(name, hook)
