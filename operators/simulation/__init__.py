"""A SIMULATED executor with a known optimum (issue 13): every workflow's accuracy is exact.

The simulated executor (backend ``"simulated"``, :class:`~operators.backends.simulated.
SimulatedExecutor`) stands in for an executor LLM: each operator call succeeds, detects, fixes
or votes with the documented probabilities of :class:`SimulationParams`, and its text runs
through the real interpreter, sandbox and checkers. Because the rules are known, this package
computes, for any valid math workflow:

* :func:`analyze`: a workflow's accuracy and calls, exact, by propagating
  a distribution over an abstract state through the AST (interpreter semantics, call budget
  included);
* :func:`best_workflow` over a documented finite space (:func:`workflow_space`) and
  :func:`regret` = best expected reward in the space minus a workflow's;
* :func:`operators.simulation.exact.enumerate_exact`: the same numbers by enumerating every
  outcome of the REAL interpreter run (exponential; a cross-check of :func:`analyze`; not
  imported here: it runs the real interpreter, which this package does not need).

See docs/SIMULATED_EXECUTOR.md. It is a simulation: never report its numbers as a model's.
"""

from flowgrpo.operators.simulation.analytic import (
    Difficulty,
    WorkflowStats,
    analyze,
)
from flowgrpo.operators.simulation.params import DIFFICULTIES, Probs, SimulationParams
from flowgrpo.operators.simulation.space import (
    ACCURACY,
    Best,
    Regret,
    Tradeoff,
    best_workflow,
    expected_reward,
    regret,
    workflow_space,
)

__all__ = [
    "ACCURACY",
    "DIFFICULTIES",
    "Best",
    "Difficulty",
    "Probs",
    "Regret",
    "SimulationParams",
    "Tradeoff",
    "WorkflowStats",
    "analyze",
    "best_workflow",
    "expected_reward",
    "regret",
    "workflow_space",
]
