"""One K and one dtype from group selection to the advantages that are trained (issue 21).

The scores of a group can differ in float64 and be equal in float32 (1.0 vs 1.0 + 1e-9): such a
group must not be selected as informative and then trained with all-zero advantages. K comes
from the rollout alone: a rollout and a table (or advantages) of another K cannot be combined.
"""

import numpy as np
import pytest
import torch

from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import RewardTable
from flowgrpo.trainer.config import AlgorithmConfig, TrainConfig, load_config
from flowgrpo.trainer.loop.rollout import Rollout
from flowgrpo.trainer.loop.step import (
    Scored,
    compute_train_advantages,
    informative_groups,
    select_groups,
)
from flowgrpo.trainer.loop.update import UpdateBatch

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "global", "gdpo")
TINY_GAP = 1e-9  # resolved by float64, lost in float32 (its ulp at 1.0 is 1.2e-7)


def rollout_of(n_groups: int, k: int) -> Rollout:
    problems = [Problem(f"p/{g}", "math", f"q{g}", "1") for g in range(n_groups)]
    n = n_groups * k
    return Rollout(
        problems, k, [torch.tensor([1, 2]) for _ in problems], torch.zeros(n, 1, dtype=torch.long),
        torch.ones(n, 1), torch.zeros(n, dtype=torch.bool), ["x"] * n, 0.0,
    )  # fmt: skip


def scored_of(groups: list[list[float]]) -> Scored:
    """One-component scores (weight 1), one list per group."""
    k = len(groups[0])
    scores = np.array([[x] for group in groups for x in group], dtype=np.float64)
    details = tuple({"problem_id": f"p/{i // k}"} for i in range(len(scores)))
    table = RewardTable(("validity",), scores, np.array([1.0]), k, details)
    return Scored(rollout_of(len(groups), k), table, 0.0)


GROUPS = [
    [1.0, 1.0 + TINY_GAP, 1.0, 1.0 + TINY_GAP],  # distinct in float64 only
    [0.25, 0.25, 0.25, 0.25],  # tied exactly
    [0.0, 1.0, 0.0, 0.5],  # real signal
    [0.5, 0.5 + TINY_GAP, 0.5, 0.5],  # distinct in float64 only
]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_no_group_selected_as_informative_trains_with_zero_advantages(estimator):
    scored = scored_of(GROUPS)
    assert len({float(x) for x in scored.table.scores[:4, 0]}) == 2  # the gap is really there
    keep = informative_groups(scored.table, estimator)
    assert keep, "the group with real signal is kept"
    config = TrainConfig(algorithm=AlgorithmConfig(advantage=estimator))
    adv_N = compute_train_advantages(config, select_groups(scored, keep))
    k = scored.group_size
    for i, g in enumerate(keep):
        assert bool((adv_N[i * k : (i + 1) * k] != 0).any()), f"group {g} trains with zeros"
    assert 1 not in keep  # a tied group is not selected


@pytest.mark.parametrize("estimator", ("grpo", "dr_grpo", "rloo"))
def test_a_gap_lost_in_the_training_dtype_is_not_selected(estimator):
    """Group-local estimators: exactly the group with a real (float32-visible) gap is kept."""
    assert informative_groups(scored_of(GROUPS).table, estimator) == [2]


def test_trained_advantages_use_the_batch_k_not_the_config_k():
    """The config says K=8; the batch has groups of 4: advantages are per group of 4."""
    config = load_config(None, ())
    assert config.rollout.num_generations == 8
    scored = scored_of([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    adv_N = compute_train_advantages(config, scored)  # dr_grpo: reward - group mean
    expected = [-0.75, 0.25, 0.25, 0.25, -0.25, -0.25, -0.25, 0.75]
    assert adv_N.dtype == torch.float32
    assert adv_N.tolist() == pytest.approx(expected)


def test_a_rollout_and_a_table_of_different_k_cannot_be_combined():
    good = scored_of([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]])  # 2 groups of K=4
    with pytest.raises(ValueError, match=r"disagree: K=8 .* the table's K=4"):
        Scored(rollout_of(1, 8), good.table, 0.0)  # same 8 rows, another K
    with pytest.raises(ValueError, match=r"disagree: K=4 and 12 rows .* 8 rows"):
        Scored(rollout_of(3, 4), good.table, 0.0)


def test_an_update_batch_needs_one_advantage_per_row():
    rollout = rollout_of(2, 4)
    UpdateBatch(rollout, torch.zeros(8))
    with pytest.raises(ValueError, match=r"2 groups of K=4 are 8 rows, but adv_N has shape \(6,\)"):
        UpdateBatch(rollout, torch.zeros(6))
