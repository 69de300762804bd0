"""Plugins' metrics in the loop and in evaluation: the registered metrics hooks
(:mod:`flowgrpo.metrics_hooks`) that are on for a run, and their numbers.

:func:`start_hooks` asks every registered hook once, when the run is set up, whether it has
something to report for this config; :func:`rollout_hook_metrics` (each training step, on the
step's first rollout) and :func:`sample_hook_metrics` (``flowgrpo eval``, on the evaluated
completions) call the ones that do. Pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowgrpo.configuration import ConfigError
from flowgrpo.metrics_hooks import METRICS_HOOKS, MetricsHook
from flowgrpo.operators.executor import check_executor, executor_limits

__all__ = ["ActiveHook", "rollout_hook_metrics", "sample_hook_metrics", "start_hooks"]


@dataclass(frozen=True)
class ActiveHook:
    """A metrics hook that is on for a run, with the settings its ``start`` returned."""

    name: str
    hook: MetricsHook
    settings: Any


def start_hooks(config) -> tuple[ActiveHook, ...]:
    """The hooks that are on for ``config`` (a ``TrainConfig``), after the plugin of its
    executor kind is imported (a built-in plugin registers its hooks then); each is started
    with the limits of the config's executor section. A hook's ``ValueError`` becomes a
    ``ConfigError``."""
    try:
        check_executor(config.executor)
        limits = executor_limits(config.executor)
        active = []
        for name in METRICS_HOOKS.names():
            hook = METRICS_HOOKS.get(name)
            settings = hook.start(config, limits)
            if settings is not None:
                active.append(ActiveHook(name, hook, settings))
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return tuple(active)


def hook_metrics(active: Sequence[ActiveHook], workflows, problems) -> dict:
    """Every active hook's metrics of completions (``workflows``: canonical text of each valid
    workflow or None; ``problems``: each completion's problem)."""
    out: dict = {}
    for entry in active:
        out.update(entry.hook.compute(entry.settings, workflows, problems))
    return out


def rollout_hook_metrics(active: Sequence[ActiveHook], table, rollout) -> dict:
    """The hooks' metrics of a scored rollout (``table.details`` rows; ``rollout``'s problems
    repeated K times); {} when no hook is on."""
    if not active:
        return {}
    problems = [problem for problem in rollout.problems for _ in range(table.group_size)]
    workflows = [d["canonical"] if d["valid"] else None for d in table.details]
    return hook_metrics(active, workflows, problems)


def sample_hook_metrics(active: Sequence[ActiveHook], samples, problems, k: int) -> dict:
    """The hooks' metrics of evaluated ``samples`` (k per problem, in problem order), with the
    ``executor`` note of a hook that has one; {} when no hook is on."""
    out: dict = {}
    for entry in active:
        if entry.hook.note:
            out["executor"] = entry.hook.note
    if active:
        workflows = [s.canonical if s.valid else None for s in samples]
        out.update(hook_metrics(active, workflows, [p for p in problems for _ in range(k)]))
    return out
