"""``sim/*`` metrics: how good the policy's workflows are under the SIMULATED executor.

The simulation plugin's metrics hook (:data:`SIM_HOOK`, registered by
:mod:`flowgrpo.operators.backends.simulated`; see :mod:`flowgrpo.metrics_hooks`).
With ``executor.kind: simulated`` (issue 13) the expected accuracy of every workflow is known
exactly (:func:`operators.simulation.analyze`), so each step can report, over its sampled
completions, the expected accuracy of the workflows the policy wrote and their **regret**
against the best workflow of the simulation's space (:func:`operators.simulation.regret`).
These are numbers from a model of operators, not from an LLM; the keys say so (``sim/``) and
are null in runs that do not use the simulated executor.

The trade-off regret optimises is the run's own reward for accuracy and cost:
``rewards.weights.accuracy * accuracy + rewards.weights.cost * E[cost score]`` with
``rewards.options.cost_max_calls`` (the ``cost`` component without tokens; the simulation does
not model tokens). With both weights 0 (a validity-only run) accuracy alone (weight 1) is used.
Validity and diversity are not part of it: every workflow of the space is valid, and a fallback
or invalid completion scores 0 (its regret is the best reward). Regret is therefore in reward
units; with accuracy weight 1 and cost weight 0 it is in accuracy points.

Pure functions of their arguments; the analytic results are cached by the simulation package
(the first step pays about 1-3 s per difficulty to score the space, later ones milliseconds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flowgrpo.metrics_hooks import MetricsHook
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import ACCURACY, SimulationParams, Tradeoff, analyze, regret
from flowgrpo.operators.simulation.settings import simulation_settings

SIM_KEYS = (
    "sim/regret",
    "sim/expected_accuracy",
    "sim/best_expected_accuracy",
    "sim/best_share",
    "sim/valid_regret",
)
"""The keys :func:`simulation_metrics` returns (all None without the simulated executor)."""


@dataclass(frozen=True)
class RegretSettings:
    """What regret is measured with: the simulation, the run's call budget and its trade-off.

    Attributes:
        params: the simulated executor's parameters (``executor.options.params``).
        limits: the run's executor limits (the call budget changes what a workflow achieves).
        tradeoff: the expected reward the best workflow maximises (see the module docstring).
    """

    params: SimulationParams
    limits: Limits
    tradeoff: Tradeoff = ACCURACY


def regret_settings(config, limits: Limits) -> RegretSettings | None:
    """The settings of a ``TrainConfig`` whose executor limits are ``limits`` (the run's, from
    ``operators.executor.executor_limits``); None unless ``executor.kind`` is ``simulated``."""
    section = config.executor
    if section.kind != "simulated":
        return None
    judged = config.rewards.for_one_workflow()  # the rule `flowgrpo search` ranks by
    weights = judged.weights
    tradeoff = Tradeoff(weights["accuracy"], weights["cost"], judged.options.cost_max_calls)
    return RegretSettings(simulation_settings(section).params, limits, tradeoff)


def simulation_metrics(
    workflows: Sequence[str | None],
    difficulties: Sequence[str | None],
    settings: RegretSettings | None,
) -> dict:
    """The ``sim/*`` metrics of completions (means over them).

    Args:
        workflows: per completion, the canonical text of its valid workflow, or None (fallback
            or invalid: expected accuracy 0, regret = the best reward).
        difficulties: per completion, its problem's kind (``SimulationParams.kind_of``: its
            difficulty, and template where the world overrides it; None: the default).
        settings: None (not simulated): every key None.

    Returns ``sim/regret`` (mean regret), ``sim/expected_accuracy`` (mean exact accuracy of the
    workflows written), ``sim/best_expected_accuracy`` (mean accuracy of the best workflow for
    each completion's problem), ``sim/best_share`` (share of completions that ARE that best
    workflow, or beat the space) and ``sim/valid_regret`` (mean regret over the valid workflows
    only, None when there is none: the quality of the workflows chosen, apart from format).
    """
    if settings is None or not workflows:
        return dict.fromkeys(SIM_KEYS)
    if len(workflows) != len(difficulties):
        raise ValueError(f"{len(workflows)} workflows but {len(difficulties)} difficulties")
    p, limits, tradeoff = settings.params, settings.limits, settings.tradeoff
    regrets, accuracies, best_accuracies, best, valid = [], [], [], 0, []
    for text, level in zip(workflows, difficulties):
        r = regret(text, p, level, limits=limits, tradeoff=tradeoff)
        regrets.append(r.regret)
        own = 0.0 if r.workflow is None else analyze(r.workflow, p, level, limits).accuracy
        accuracies.append(own)
        best_accuracies.append(analyze(r.best, p, level, limits).accuracy)
        best += r.workflow is not None and r.regret <= 1e-12
        if r.workflow is not None:
            valid.append(r.regret)
    n = len(workflows)
    return {
        "sim/regret": sum(regrets) / n,
        "sim/expected_accuracy": sum(accuracies) / n,
        "sim/best_expected_accuracy": sum(best_accuracies) / n,
        "sim/best_share": best / n,
        "sim/valid_regret": sum(valid) / len(valid) if valid else None,
    }


def simulated_summary(samples, problems, k: int, settings: RegretSettings | None) -> dict:
    """Over evaluated ``samples`` (k per problem, in problem order): the exact expected accuracy
    and regret of the workflows written (``sim/*``, as in the training metrics), to read next
    to the empirical pass@1, and the ``executor`` note."""
    workflows = [s.canonical if s.valid else None for s in samples]
    kinds = [_kind(settings, p) for p in problems for _ in range(k)]
    return {"executor": SIMULATED, **simulation_metrics(workflows, kinds, settings)}


def _kind(settings: RegretSettings | None, problem) -> str | None:
    """The problem's kind in the simulation (its difficulty, and template where the world
    overrides it)."""
    return settings.params.kind_of(problem) if settings is not None else None


SIMULATED = "SIMULATED (operators/simulation): accuracies are from a model, not an LLM"


def _compute(settings: RegretSettings, workflows, problems) -> dict:
    return simulation_metrics(workflows, [_kind(settings, p) for p in problems], settings)


def _console(m) -> str:
    if m.get("sim/regret") is None:
        return ""
    return f" | SIMULATED regret {_fmt(m.get('sim/regret'))} E[acc] " + _fmt(
        m.get("sim/expected_accuracy")
    )


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.3f}"


REPORT_KEYS = (
    "sim/expected_accuracy",
    "sim/best_expected_accuracy",
    "sim/regret",
    "sim/best_share",
)


def _report(result) -> list[str]:
    if result.get("sim/regret") is None:
        return []
    return [f"  {key:30s} {result[key]:.3f}  (analytic, simulated executor)" for key in REPORT_KEYS]


#: What each ``sim/*`` key means (docs/METRICS.md lists them from here).
SIM_MEANINGS = {
    "sim/regret": (
        "mean regret of the step's completions, best expected reward minus theirs (rewards' "
        "accuracy/cost weights; fallback/invalid score 0)"
    ),
    "sim/expected_accuracy": (
        "mean exact expected accuracy of the workflows written (0 for fallback/invalid)"
    ),
    "sim/best_expected_accuracy": (
        "mean expected accuracy of the best workflow for each completion's problem kind "
        "(difficulty, and template where the world sets one apart)"
    ),
    "sim/best_share": ("share of completions that are a best workflow"),
    "sim/valid_regret": (
        "mean regret over the valid workflows alone (null: none valid); workflow choice apart "
        "from format"
    ),
}


SIM_HOOK = MetricsHook(
    keys=SIM_KEYS,
    start=regret_settings,
    compute=_compute,
    console=_console,
    report=_report,
    note=SIMULATED,
    meanings=SIM_MEANINGS,
    headline=("sim/expected_accuracy", "sim/regret"),
)
"""The plugin's metrics hook: ``sim/*`` in every step's line and in ``flowgrpo eval``."""


__all__ = [
    "SIMULATED",
    "SIM_HOOK",
    "SIM_KEYS",
    "RegretSettings",
    "regret_settings",
    "simulated_summary",
    "simulation_metrics",
]
