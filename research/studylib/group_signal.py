"""Where a run's learning signal comes from: informative groups and the near-best share per block.

Read from a run's ``samples.jsonl`` (one row per trained completion: ``step``, ``problem_id``,
``advantage``, ``rewards.accuracy``, ``canonical``). A *group* is the completions of one problem
at one step. A group whose mean accuracy is at least ``familiar`` (0.95) is a problem every
workflow solves (the SIMULATED executor's "familiar" latent class, docs/SIMULATED_EXECUTOR.md):
its advantages rank workflows by execution noise only, so it says nothing about which workflow
is better. The other groups are the informative ones; the choice is learnt from them
(research/RECORD.md, "Screening: 128 executions per workflow").

Torch-free and pure: the near-best share takes the regret of a workflow as a function, so the
caller decides the world (``research/group_signal.py`` builds it from the run's own config).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from flowgrpo.operators.tasks.arithmetic import DIFFICULTIES

FAMILIAR = 0.95  # mean group accuracy at or above which every workflow solved the problem
NEAR = 0.02  # "within 0.02 of the best workflow's expected reward" (issue 20)
# the arithmetic task draws its difficulties uniformly (rng.choice over DIFFICULTIES' keys)
UNIFORM_MIX = dict.fromkeys(sorted(DIFFICULTIES), 1)


@dataclass(frozen=True)
class GroupSignal:
    """Counts over a run's trained groups.

    Attributes:
        steps: distinct steps with at least one group.
        groups: distinct (step, problem) groups.
        familiar_share: share of groups with mean accuracy >= the threshold.
        informative_per_step: groups below the threshold, per step.
        familiar_advantage_mass: share of sum |advantage| carried by the familiar groups.
    """

    steps: int
    groups: int
    familiar_share: float
    informative_per_step: float
    familiar_advantage_mass: float


def _accuracy(row: Mapping) -> float:
    value = (row.get("rewards") or {}).get("accuracy")
    if value is None:
        # an invalid workflow is not executed: it solved nothing
        return 0.0 if row.get("valid") is False else math.nan
    return float(value)


def group_signal(rows: Iterable[Mapping], familiar: float = FAMILIAR) -> GroupSignal:
    """Informative groups and the advantage mass of familiar ones (see the module docstring).

    Raises:
        ValueError: no rows, or a valid row without ``rewards.accuracy`` (a run with
            ``rollout.execute: false`` has no accuracy to tell familiar problems by).
    """
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for row in rows:
        groups[(row["step"], row["problem_id"])].append(row)
    if not groups:
        raise ValueError("no samples: is this a run directory's samples.jsonl?")
    familiar_groups, mass, familiar_mass = 0, 0.0, 0.0
    for key, members in groups.items():
        accuracies = [_accuracy(r) for r in members]
        if any(math.isnan(a) for a in accuracies):
            raise ValueError(
                f"step {key[0]}, problem {key[1]}: a valid sample has no rewards.accuracy; "
                "group signal needs a run that executed its workflows (rollout.execute: true)"
            )
        group_mass = sum(abs(float(r.get("advantage") or 0.0)) for r in members)
        mass += group_mass
        if sum(accuracies) / len(accuracies) >= familiar:
            familiar_groups += 1
            familiar_mass += group_mass
    steps = len({step for step, _ in groups})
    return GroupSignal(
        steps=steps,
        groups=len(groups),
        familiar_share=familiar_groups / len(groups),
        informative_per_step=(len(groups) - familiar_groups) / steps,
        familiar_advantage_mass=familiar_mass / mass if mass > 0 else math.nan,
    )


@dataclass(frozen=True)
class NearBestBlock:
    """One block of steps of :func:`near_best_by_block`.

    Attributes:
        label: the block's steps, e.g. ``"6-10"``.
        share: share of the block's completions within ``near`` of the best.
        advantage: mean advantage of those near-best completions that have one (a row
            without an advantage was not trained on; NaN when there is none):
            how hard the update pushed toward them; a positive but small value while the share
            stays flat is a signal too weak for the budget, not a missing one.
    """

    label: str
    share: float
    advantage: float


def is_near(regret: float, near: float = NEAR) -> bool:
    """Whether a workflow with this regret counts as near the best (issue 20's "within 0.02");
    the tolerance keeps a regret equal to ``near`` up to float rounding inside."""
    return regret <= near + 1e-12


def near_best_by_block(
    rows: Iterable[Mapping], regret_of: Callable[[str], float], block: int = 5, near: float = NEAR
) -> list[NearBestBlock]:
    """Per block of ``block`` steps (1-5, 6-10, ...): the share of completions whose canonical
    workflow is within ``near`` of the best (``regret_of(canonical) <= near``; invalid
    completions count as not near) and those completions' mean advantage, in step order."""
    if block < 1:
        raise ValueError(f"block must be >= 1 step, got {block}")
    flags: dict[int, list[bool]] = defaultdict(list)  # per block: near or not, every completion
    advantages: dict[int, list[float]] = defaultdict(list)  # per block: the near ones' advantages
    cache: dict[str, bool] = {}
    for row in rows:
        index = (int(row["step"]) - 1) // block
        text = row.get("canonical")
        if text and text not in cache:
            cache[text] = is_near(regret_of(text), near)
        near_best = bool(text) and cache[text]
        flags[index].append(near_best)
        if near_best and row.get("advantage") is not None:
            advantages[index].append(float(row["advantage"]))
    return [
        NearBestBlock(
            f"{i * block + 1}-{(i + 1) * block}",
            sum(near_i) / len(near_i),
            statistics.fmean(advantages[i]) if advantages[i] else math.nan,
        )
        for i, near_i in sorted(flags.items())
    ]
