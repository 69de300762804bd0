"""Sequential halving under a budget of executor calls: the best single workflow of a set.

Best-arm identification with a fixed budget (Karnin, Koren and Somekh, "Almost Optimal
Exploration in Multi-Armed Bandits", ICML 2013, Algorithm 1, *sequential halving*): in each of
``R = ceil(log2 n)`` rounds every surviving arm is pulled equally often, then the better half by
empirical mean survives. Two choices of ours, where the paper is silent or differs:

* **The budget is in executor calls, not pulls**, because workflows differ in cost (one call
  against a dozen). Each round may spend what is left divided by the rounds left; its pulls per
  arm are that spend over the survivors' measured mean calls per pull. The first round pulls
  every arm once whatever it costs (nothing is known before), so a budget below one run of
  every candidate stops there with the arms ranked by that one run.
* **Means accumulate over rounds** (the paper uses each round's fresh samples alone): no sample
  is thrown away, and the survivors of late rounds are compared on all their samples.
* **The first round is topped up**: after its one pull each (which measures the costs), every
  arm is pulled again as often as the round's share of the budget pays for, as the paper's
  first round would; with too small a budget it stays at one pull.
* **Ties go to a seeded random order**, not to the candidates' order.

A pull is one run of a workflow on one problem; every arm of a round runs on the **same**
problems (common random numbers), so arms are compared on equal draws. Pure: the runs are the
``pull`` function's (:mod:`.run` wires it to an executor); nothing here imports torch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: ``pull(workflows, pulls)`` -> for each workflow, ``pulls`` (reward, calls) pairs, one per
#: problem, the same ``pulls`` problems for every workflow; a reward None is a run that could
#: not be scored (its calls still count).
Pull = Callable[[Sequence[str], int], list[list[tuple[float | None, int]]]]

Z95 = 1.959964  # two-sided 95% normal quantile


@dataclass
class Arm:
    """One candidate workflow and what its pulls returned."""

    workflow: str
    rewards: list[float] = field(default_factory=list)
    calls: int = 0
    pulls: int = 0
    last_round: int = 0

    @property
    def n(self) -> int:
        """Scored pulls."""
        return len(self.rewards)

    @property
    def mean(self) -> float:
        return sum(self.rewards) / self.n if self.n else float("-inf")

    @property
    def mean_calls(self) -> float:
        """Executor calls per pull (scored or not)."""
        return self.calls / self.pulls if self.pulls else float("nan")

    @property
    def ci95(self) -> float:
        """Half-width of the 95% normal interval of the mean (inf below 2 samples)."""
        if self.n < 2:
            return float("inf")
        mean = self.mean
        var = sum((r - mean) ** 2 for r in self.rewards) / (self.n - 1)
        return Z95 * math.sqrt(var / self.n)


@dataclass(frozen=True)
class SearchRound:
    """One round: how many arms ran, how many pulls each, the calls it spent."""

    index: int
    arms: int
    pulls: int
    calls: int


@dataclass(frozen=True)
class SearchResult:
    """Every arm, best first (the last round's survivors by mean, then those eliminated
    later before those eliminated earlier), the rounds, and the calls spent."""

    arms: tuple[Arm, ...]
    rounds: tuple[SearchRound, ...]
    calls: int
    budget: int

    @property
    def best(self) -> Arm:
        return self.arms[0]


def successive_halving(
    workflows: Sequence[str], pull: Pull, budget: int, seed: int = 0
) -> SearchResult:
    """Sequential halving of ``workflows`` (distinct) with at most about ``budget`` executor
    calls (the first round may exceed it: see the module docstring). Ties of the mean are
    broken by a seeded random order, never by the candidates' order (which would favour the
    workflows listed first whenever one pull each leaves many arms tied)."""
    if not workflows:
        raise ValueError("the search needs at least one candidate workflow")
    if len(set(workflows)) != len(workflows):
        raise ValueError("candidate workflows must be distinct")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"the budget is a number of executor calls >= 1, got {budget!r}")
    arms = [Arm(w) for w in workflows]
    ties = list(range(len(arms)))
    random.Random(seed).shuffle(ties)
    tie = {a.workflow: t for a, t in zip(arms, ties)}
    survivors, rounds, spent = arms, [], 0
    total_rounds = max(1, math.ceil(math.log2(len(arms))))
    for index in range(total_rounds):
        pulls = _pulls(survivors, budget - spent, total_rounds - index, first=index == 0)
        if pulls < 1:
            break
        calls = _run_round(survivors, pull, pulls, index)
        if index == 0:  # one pull told the costs: top the first round up to its share
            more = _pulls(survivors, budget // total_rounds - calls, 1, first=False)
            calls += _run_round(survivors, pull, more, index) if more >= 1 else 0
            pulls += max(more, 0)
        spent += calls
        rounds.append(SearchRound(index, len(survivors), pulls, calls))
        if len(survivors) > 1:
            survivors = _better_half(survivors, tie)
    ranked = sorted(arms, key=lambda a: (-a.last_round, -a.mean, tie[a.workflow]))
    return SearchResult(tuple(ranked), tuple(rounds), spent, budget)


def _pulls(survivors: list[Arm], left: int, rounds_left: int, first: bool) -> int:
    """Pulls per arm this round: one in the first round, else this round's share of the budget
    left over the survivors' calls per pull, and at least one while the budget left pays for
    it (early rounds with many arms may take more than their share; later ones, with fewer
    arms, then get less)."""
    if first:
        return 1
    per_pull = sum(a.mean_calls for a in survivors)  # calls of one pull of every survivor
    if not per_pull > 0:
        return 1 if left > 0 else 0  # no calls measured (a free executor): pull once
    if left < per_pull:
        return 0
    return max(1, int(left / rounds_left // per_pull))


def _run_round(survivors: list[Arm], pull: Pull, pulls: int, index: int) -> int:
    results = pull([a.workflow for a in survivors], pulls)
    if len(results) != len(survivors) or any(len(r) != pulls for r in results):
        raise ValueError(f"pull returned {len(results)} rows for {len(survivors)} arms x {pulls}")
    calls = 0
    for arm, rows in zip(survivors, results):
        for reward, used in rows:
            if reward is not None and math.isfinite(reward):
                arm.rewards.append(float(reward))
            arm.calls += used
            calls += used
        arm.pulls += pulls
        arm.last_round = index
    return calls


def _better_half(survivors: list[Arm], tie: dict[str, int]) -> list[Arm]:
    """The ceil(n/2) best by mean (ties in the seeded random order ``tie``)."""
    keep = math.ceil(len(survivors) / 2)
    return sorted(survivors, key=lambda a: (-a.mean, tie[a.workflow]))[:keep]


__all__ = ["Arm", "Pull", "SearchResult", "SearchRound", "successive_halving"]
