"""Search once per label: the best single workflow for each kind of problem a task labels.

Where a task's records carry a label that decides which workflow is best (a difficulty, a
subject, a template: ``Problem.meta[key]``), the baseline a user tries before RL is not one
workflow but a table from label to workflow: :func:`search_by` runs the sequential-halving
search (:func:`.run.search`) on the training problems of each label value, the budget split
evenly between them. A policy trained with RL is worth more than this table only where the
feature that decides is not a label (docs/RESULTS.md, "Choosing per problem").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from flowgrpo.trainer.config import TrainConfig
from flowgrpo.trainer.loop.environment import RunEnvironment
from flowgrpo.trainer.search.halving import SearchResult
from flowgrpo.trainer.search.run import search, write_pairs


def label_of(problem, keys: Sequence[str]) -> str:
    """``problem``'s label: its ``meta`` values of ``keys`` as text, joined with ``/``. A key it
    lacks is a ``ValueError`` naming the problem and the keys it has."""
    missing = [key for key in keys if key not in problem.meta]
    if missing:
        raise ValueError(
            f"--by {missing[0]}: problem {problem.id} has no meta key {missing[0]!r} (it has "
            f"{sorted(problem.meta)}); use a key every training problem holds"
        )
    return "/".join(str(problem.meta[key]) for key in keys)


def split_by(environment: RunEnvironment, keys: Sequence[str]) -> dict[str, RunEnvironment]:
    """The environment once per label (:func:`label_of`, sorted), each holding only its
    problems."""
    groups: dict[str, list] = {}
    for problem in environment.problems:
        groups.setdefault(label_of(problem, keys), []).append(problem)
    if not groups:
        raise ValueError(f"--by {'/'.join(keys)}: the task gave no training problems")
    return {
        value: dataclasses.replace(environment, problems=tuple(problems))
        for value, problems in sorted(groups.items())
    }


def search_by(
    config: TrainConfig,
    budget: int,
    keys: Sequence[str],
    environment: RunEnvironment,
    *,
    candidates: Sequence[str] | None = None,
    seed: int = 0,
) -> dict[str, SearchResult]:
    """:func:`.run.search` on the problems of each label (the values of ``meta[k]`` for ``k`` in
    ``keys``), each with an equal share of ``budget`` (at least one call). ``environment`` has
    its executor built (:func:`.run.prepare`)."""
    parts = split_by(environment, keys)
    share = max(1, budget // len(parts))
    return {
        value: search(config, share, candidates=candidates, seed=seed, environment=part)
        for value, part in parts.items()
    }


def sft_pairs_by(
    path: str | Path,
    chosen: Mapping[str, Sequence[str]],
    environment: RunEnvironment,
    keys: Sequence[str],
    n: int,
) -> int:
    """Write ``n`` (at most the training problems) pairs to ``path``: each problem with one of
    *its own label's* workflows in ``chosen``, taken in turn within the label; with the labels
    the run's prompt shows (``meta``). Returns how many."""
    return write_pairs(path, environment, n, chosen, lambda problem: label_of(problem, keys))


__all__ = ["label_of", "search_by", "sft_pairs_by", "split_by"]
