"""The simulation plugin: registers the SIMULATED executor and its ``sim/*`` metrics hook.

A plugin like any user's (``plugins:``; docs/USAGE.md), through the same extension points: it
registers backend ``"simulated"`` (:func:`~flowgrpo.operators.backends.register_backend`) and
the metrics hook ``"sim"`` (:func:`~flowgrpo.metrics_hooks.register_metrics_hook`) when
imported. Nobody needs to name it in ``plugins:``: ``executor.kind: simulated`` imports it on
first use, as any built-in plugin module ``flowgrpo.operators.backends.<kind>`` is
(:func:`~flowgrpo.operators.backends.find_backend`, with :func:`flowgrpo.plugins.import_plugin`).
The simulation itself is the package :mod:`flowgrpo.operators.simulation`
(docs/SIMULATED_EXECUTOR.md); this module also re-exports the names a user of the plugin needs
(importing them from here registers the plugin).
"""

from __future__ import annotations

from flowgrpo.metrics_hooks import register_metrics_hook
from flowgrpo.operators.backends import register_backend
from flowgrpo.operators.simulation.executor import (
    CRASH,
    REVIEW_FAIL,
    REVIEW_PASS,
    NotSimulated,
    SimulatedExecutor,
    make_simulated,
)
from flowgrpo.operators.simulation.metrics import (
    SIM_HOOK,
    SIM_KEYS,
    SIMULATED,
    RegretSettings,
    regret_settings,
    simulated_summary,
    simulation_metrics,
)
from flowgrpo.operators.simulation.settings import check_simulated

register_backend("simulated", make_simulated, check=check_simulated)  # SIMULATED, not a model
register_metrics_hook("sim", SIM_HOOK)

__all__ = [
    "CRASH",
    "REVIEW_FAIL",
    "REVIEW_PASS",
    "SIMULATED",
    "SIM_HOOK",
    "SIM_KEYS",
    "NotSimulated",
    "RegretSettings",
    "SimulatedExecutor",
    "make_simulated",
    "regret_settings",
    "simulated_summary",
    "simulation_metrics",
]
