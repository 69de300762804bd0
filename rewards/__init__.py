"""Reward components for workflow completions and their combination.

Each component scores the K completions of one problem (a group), one score in [0, 1] per
sample, NaN where the sample cannot be scored (the executor failed: *unscorable*, never a silent
0). The trainer calls :func:`prepare_samples` (extract, validate, execute) then
:func:`score_samples` and gets a :class:`RewardTable`; :func:`score_batch` is the two in one
call (tests, examples)::

    from flowgrpo.rewards import RewardSpec, score_batch, weighted_sum

    table = score_batch(problems, completions, group_size=8, spec=RewardSpec(), llm=executor)
    table.names, table.scores        # ('validity', 'accuracy', 'diversity', 'cost'), [N, 4]
    rewards = weighted_sum(table.scores, table.weights)   # or GDPO on table.scores

:func:`weighted_sum` (NaN-aware, numpy arrays or torch tensors) and :func:`check_group_size`
live in :mod:`rewards.combine`; the trainer's advantage estimators use the same two.

Depends on ``dsl`` and ``operators``; never imports the trainer.
"""

from flowgrpo.rewards.combine import check_group_size, fill_group_mean, weighted_sum
from flowgrpo.rewards.components import (
    REWARD_COMPONENTS,
    ComponentFn,
    available_components,
    get_component,
    register_component,
)
from flowgrpo.rewards.history import RecentWorkflows
from flowgrpo.rewards.options import DIVERSITY_METRICS, RewardOptions
from flowgrpo.rewards.sample import Sample, make_sample
from flowgrpo.rewards.score import RewardTable, prepare_samples, score_batch, score_samples
from flowgrpo.rewards.spec import DEFAULT_WEIGHTS, RewardSpec

__all__ = [
    "DEFAULT_WEIGHTS",
    "DIVERSITY_METRICS",
    "REWARD_COMPONENTS",
    "ComponentFn",
    "RecentWorkflows",
    "RewardOptions",
    "RewardSpec",
    "RewardTable",
    "Sample",
    "available_components",
    "check_group_size",
    "fill_group_mean",
    "get_component",
    "make_sample",
    "prepare_samples",
    "register_component",
    "score_batch",
    "score_samples",
    "weighted_sum",
]
