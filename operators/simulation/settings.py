"""The simulated executor's settings: ``executor.options`` of a run whose ``executor.kind`` is
``simulated`` (seed, parameters, sandbox).

The plugin's own section: the core config keeps it as a mapping (``ExecutorConfig.options``);
:func:`simulation_settings` reads it and :func:`check_simulated` (the ``check`` the plugin
module :mod:`flowgrpo.operators.backends.simulated` registers with its backend) checks it when
the run is built. Data only: parsing and checking, no backend (that is :mod:`.executor`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flowgrpo.configuration import ConfigError, check, from_dict
from flowgrpo.operators.simulation.params import SimulationParams

__all__ = ["SANDBOXES", "SimulationSettings", "check_simulated", "simulation_settings"]

#: Who runs the simulated Programmer's programs (``executor.simulation.sandbox``).
SANDBOXES = ("process", "in_process")

#: Task names whose problems are not math (the simulated executor cannot run them).
_CODE_TASKS = ("mbpp", "humaneval")


@dataclass(frozen=True)
class SimulationSettings:
    """The SIMULATED executor (``executor.kind: simulated``, these in ``executor.options``): not
    a model. Each operator call
    succeeds, detects, fixes or votes with documented probabilities; answers still run through
    the real interpreter, sandbox and checkers (docs/SIMULATED_EXECUTOR.md). Because every
    workflow's expected accuracy is then known exactly, each metrics line carries ``sim/*``
    keys (regret against the best workflow). Math tasks only.

    Attributes:
        seed: seed of every simulated draw (any integer; part of the execution cache key).
        params: fields of ``operators.simulation.SimulationParams`` that differ from its
            documented defaults, e.g. ``{review_false_alarm: 0.05}``; a per-difficulty field
            takes one number, ``[easy, medium, hard]`` or ``{easy: .., medium: .., hard: ..}``.
            Unknown names are refused at load with the closest one. The same parameters drive
            the executor and the analytic ``sim/*`` metrics. The saved config.yaml lists all.
        sandbox: who runs the simulated Programmer's programs: ``process`` (the real process
            sandbox: a process per program) or ``in_process``
            (the same outputs without a process; runs nothing but the simulation's own
            programs). The same answers and verdicts (a crash's traceback is shortened to its
            last line); in_process only saves time.
    """

    seed: int = 0
    params: SimulationParams = field(default_factory=SimulationParams)
    sandbox: str = "process"

    def __post_init__(self):
        check(
            self.sandbox in SANDBOXES,
            "executor.options.sandbox",
            "use " + " or ".join(SANDBOXES),
        )

    @classmethod
    def _from_raw(cls, value, path: str) -> SimulationSettings:
        """From YAML data: ``params`` through ``SimulationParams.from_dict`` (did-you-mean on
        unknown names), the rest through :func:`from_dict`."""
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path.rstrip('.')}: expected a mapping {{seed, params}}")
        data = dict(value)
        try:
            params = SimulationParams.from_dict(data.pop("params", None))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{path}params: {exc}") from None
        return dataclasses.replace(from_dict(cls, data, path), params=params)


def simulation_settings(section: Any) -> SimulationSettings:
    """The settings in ``section.options`` (an ``ExecutorConfig``); ``ConfigError`` naming the
    field for an unknown name or a bad value."""
    return SimulationSettings._from_raw(section.options, "executor.options.")


def check_simulated(section: Any, task: str | None = None) -> None:
    """The simulated kind's check (registered with its backend): its options parse, and
    ``task`` (a task spec; None: not checked) is math, the only problems it models."""
    simulation_settings(section)
    check(
        task is None or task.split(":")[0].lower() not in _CODE_TASKS,
        "executor.kind",
        f"the SIMULATED executor models math problems only, not task {task!r}; use "
        "arithmetic or gsm8k:PATH, or another executor",
    )
