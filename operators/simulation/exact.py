"""Exact outcome distribution of a workflow by enumerating every run of the REAL interpreter.

:func:`enumerate_exact` runs :func:`operators.interpreter.run_workflows` once per combination of
simulated draws (depth-first, replaying a prefix of choices), with the SIMULATED executor and
:func:`simulated_sandbox` in place of the process sandbox, and sums the probabilities of the
paths. It shares nothing with :mod:`operators.simulation.analytic` except the probabilities, so
agreement between the two checks that the analysis follows the interpreter's semantics
(budget stops, lockstep parallel branches, loop exits). Cost grows with the number of paths
(exponential in the number of calls): for tests and small workflows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flowgrpo.dsl import Workflow
from flowgrpo.operators.interpreter import Limits, run_workflows
from flowgrpo.operators.simulation.executor import SimulatedExecutor, simulated_sandbox
from flowgrpo.operators.simulation.model import latent_classes
from flowgrpo.operators.simulation.params import SimulationParams
from flowgrpo.operators.tasks.base import Problem


@dataclass(frozen=True)
class ExactResult:
    """Accuracy and calls summed over every path (weights: draw and latent-class probabilities).

    Attributes:
        accuracy: probability that the run's answer is right (by the real checker).
        expected_calls: expected ``ExecutionResult.calls``.
        calls: ``{calls: probability}``.
        paths: how many runs were enumerated.
    """

    accuracy: float
    expected_calls: float
    calls: dict[int, float]
    paths: int


class _Replay:
    """A chooser that replays ``prefix`` and then takes the first possible outcome."""

    def __init__(self, prefix: Sequence[int]):
        self.prefix = list(prefix)
        self.taken: list[tuple[int, tuple[float, ...]]] = []

    def __call__(self, weights: Sequence[float], key: tuple) -> int:
        weights = tuple(weights)
        if len(self.taken) < len(self.prefix):
            index = self.prefix[len(self.taken)]
        else:
            index = next(i for i, w in enumerate(weights) if w > 0)
        self.taken.append((index, weights))
        return index


def enumerate_exact(
    workflow: Workflow | str,
    problem: Problem,
    params: SimulationParams | None = None,
    limits: Limits | None = None,
    max_paths: int = 200_000,
) -> ExactResult:
    """Every outcome of running ``workflow`` on ``problem`` with the simulated executor.

    Raises ``RuntimeError`` past ``max_paths`` runs, and when a run does not finish normally
    for a reason other than the call budget.
    """
    params = params or SimulationParams()
    calls: dict[int, float] = {}
    accuracy, paths = 0.0, 0
    for latent, weight in latent_classes(params):
        stack: list[list[int]] = [[]]
        while stack:
            prefix = stack.pop()
            replay = _Replay(prefix)
            llm = SimulatedExecutor(params, chooser=replay, latent=latent)
            (result,) = run_workflows([(workflow, problem)], llm, limits, sandbox=simulated_sandbox)
            if result.error and not result.error.startswith("call budget"):
                raise RuntimeError(f"simulated run failed: {result.error}")
            paths += 1
            if paths > max_paths:
                raise RuntimeError(f"more than {max_paths} paths; use operators.simulation.analyze")
            p = weight
            for index, weights in replay.taken:
                p *= weights[index]
            accuracy += p * result.correct
            calls[result.calls] = calls.get(result.calls, 0.0) + p
            for j in range(len(prefix), len(replay.taken)):
                index, weights = replay.taken[j]
                head = [i for i, _ in replay.taken[:j]]
                stack += [[*head, k] for k, w in enumerate(weights) if w > 0 and k != index]
    expected = sum(k * p for k, p in calls.items())
    return ExactResult(accuracy, expected, dict(sorted(calls.items())), paths)


__all__ = ["ExactResult", "enumerate_exact", "simulated_sandbox"]
