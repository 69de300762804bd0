"""``sim/*`` metrics: how good the policy's workflows are under the SIMULATED executor.

With ``rollout.executor: simulated`` (issue 13) the expected accuracy of every workflow is known
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

from collections.abc import Sequence
from dataclasses import dataclass

from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import SimulationParams, analyze, regret

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
        params: the simulated executor's parameters (``rollout.simulation.params``).
        limits: the run's executor limits (the call budget changes what a workflow achieves).
        accuracy_weight / cost_weight / cost_max_calls: the expected reward the best workflow
            maximises (see the module docstring).
    """

    params: SimulationParams
    limits: Limits
    accuracy_weight: float = 1.0
    cost_weight: float = 0.0
    cost_max_calls: int = 20

    @property
    def weights(self) -> dict:
        return {
            "accuracy_weight": self.accuracy_weight,
            "cost_weight": self.cost_weight,
            "cost_max_calls": self.cost_max_calls,
        }


def regret_settings(config) -> RegretSettings | None:
    """The settings of a ``TrainConfig``; None unless ``rollout.executor`` is ``simulated``."""
    r = config.rollout
    if r.executor != "simulated":
        return None
    weights = config.rewards.weights
    accuracy, cost = float(weights.get("accuracy", 0.0)), float(weights.get("cost", 0.0))
    if accuracy == 0.0 and cost == 0.0:
        accuracy = 1.0
    limits = Limits(max_llm_calls=r.executor_max_calls, max_seconds=r.executor_max_seconds)
    return RegretSettings(
        r.simulation.params, limits, accuracy, cost, config.rewards.options.cost_max_calls
    )


def simulation_metrics(
    workflows: Sequence[str | None],
    difficulties: Sequence[str | None],
    settings: RegretSettings | None,
) -> dict:
    """The ``sim/*`` metrics of completions (means over them).

    Args:
        workflows: per completion, the canonical text of its valid workflow, or None (fallback
            or invalid: expected accuracy 0, regret = the best reward).
        difficulties: per completion, its problem's difficulty (``problem.meta["difficulty"]``;
            None: the simulation's default difficulty).
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
    p, limits, weights = settings.params, settings.limits, settings.weights
    regrets, accuracies, best_accuracies, best, valid = [], [], [], 0, []
    for text, level in zip(workflows, difficulties):
        r = regret(text, p, level, limits=limits, **weights)
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


def rollout_simulation_metrics(config, table, rollout) -> dict:
    """:func:`simulation_metrics` of a scored rollout (``table.details`` rows, ``rollout``'s
    problems repeated K times) under ``config``'s simulated executor; all None otherwise."""
    settings = regret_settings(config)
    if settings is None:
        return dict.fromkeys(SIM_KEYS)
    k = table.group_size
    problems = [problem for problem in rollout.problems for _ in range(k)]
    workflows = [d["canonical"] if d["valid"] else None for d in table.details]
    levels = [problem.meta.get("difficulty") for problem in problems]
    return simulation_metrics(workflows, levels, settings)


__all__ = [
    "SIM_KEYS",
    "RegretSettings",
    "regret_settings",
    "rollout_simulation_metrics",
    "simulation_metrics",
]
