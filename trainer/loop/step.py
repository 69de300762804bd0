"""One training step as typed functions: rollout -> scores -> advantages -> update -> health.

:class:`~flowgrpo.trainer.loop.trainer.Trainer` calls, in order:

1. :func:`first_rollout` — sample K completions for B problems and score them
   (:func:`sample_and_score`); :func:`rollout_metrics_of` describes the policy as it is.
2. the guard's decision on those metrics (``monitoring.collapse``), in the Trainer.
3. :func:`collect` — with dynamic sampling (DAPO, arXiv 2503.14476), drop groups with no
   learning signal and replace them with groups of fresh problems: the batch to train on.
   When every group tied, the replacement rounds sample at the step state's tie temperature
   (``rollout.tie_temperature``; :mod:`.state`; the response to a deadlock).
4. :func:`compute_train_advantages` — advantages ONCE, on exactly the batch that is trained;
   :func:`train_metrics` and :func:`sample_rows` (each sample with the advantage it was
   trained with; null when it was not trained on).
5. :func:`..update.policy_update` and the health checks, in the Trainer, which owns the model
   and optimizer.

Every function here takes what it reads as arguments and returns new values; none mutates the
trainer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import (
    RecentWorkflows,
    RewardTable,
    prepare_samples,
    score_samples,
    weighted_sum,
)
from flowgrpo.trainer.algorithms.advantages import compute_advantages, group_stats
from flowgrpo.trainer.config import TrainConfig
from flowgrpo.trainer.loop.constrain import sampling_limits
from flowgrpo.trainer.loop.environment import RunEnvironment
from flowgrpo.trainer.loop.rollout import Rollout, concat_rollouts, generate_rollout
from flowgrpo.trainer.loop.sampling_cache import SamplingCache
from flowgrpo.trainer.monitoring.metrics import rollout_metrics

logger = logging.getLogger(__name__)

#: The dtype of the scores from group selection to the advantages that are trained: float32,
#: the loss dtype, so a selected group never trains with zero advantages and the trained
#: advantages are bit-identical to those the default run has always used (float64 up to the
#: selection changed them by one ulp).
SCORE_DTYPE = torch.float32


@dataclass(frozen=True)
class StepEnv:
    """What sampling and scoring read (built once by the Trainer; never mutated here, except
    that scoring appends to the diversity ``history`` and the execution ``cache``).
    ``environment`` is the run's: its prompt is rendered, its operator table validates, its
    executor runs the workflows. Fixed for the run: what moves between steps is the
    :class:`~.state.StepState`."""

    config: TrainConfig
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    environment: RunEnvironment
    cache: ExecutionCache | None
    history: RecentWorkflows
    sampling: SamplingCache | None = None  # what the run's sampling calls share


@dataclass(frozen=True)
class Scored:
    """A rollout and its reward table (same rows, same K), with the scoring time.

    K has one source: the rollout's ``group_size`` (the table is scored with it); a rollout and
    a table that disagree on K or on the number of rows raise ``ValueError``.
    """

    rollout: Rollout
    table: RewardTable
    score_seconds: float
    spares: Rollout | None = None  # the first rollout's unscored spare groups (spare_problems)

    def __post_init__(self):
        k, rows = self.rollout.group_size, len(self.rollout.problems) * self.rollout.group_size
        if self.table.group_size != k or self.table.n_samples != rows:
            raise ValueError(
                f"rollout and reward table disagree: K={k} and {rows} rows vs the table's "
                f"K={self.table.group_size} and {self.table.n_samples} rows; score the rollout "
                "with its own group_size"
            )

    @property
    def group_size(self) -> int:
        """K, completions per problem (the rollout's)."""
        return self.rollout.group_size


@dataclass(frozen=True)
class Collected:
    """One step's data: the first rollout (metrics) and the batch to train on (None: none).
    ``resample_temperature``: the temperature the replacement rounds sampled ``train`` at when
    every group of ``first`` tied (``rollout.tie_temperature``); None: the step's own."""

    first: Scored
    train: Scored | None
    kept_groups: int
    resampled_groups: int
    generated_tokens: int
    gen_seconds: float
    score_seconds: float
    resample_temperature: float | None = None


def sample_and_score(
    env: StepEnv, problems: Sequence[Problem], temperature: float | None = None
) -> Scored:
    """Sample ``num_generations`` completions per problem at ``temperature`` (None:
    ``rollout.temperature``) and score them (one batched call); everything after the sampling
    reads K from the rollout."""
    return score(env, sample(env, problems, temperature))


def sample(env: StepEnv, problems: Sequence[Problem], temperature: float | None = None) -> Rollout:
    """``num_generations`` completions per problem at ``temperature`` (None: the step's own),
    decoded as one batch."""
    r, run = env.config.rollout, env.environment
    return generate_rollout(
        env.model,
        env.tokenizer,
        problems,
        r.num_generations,
        r.temperature if temperature is None else temperature,
        r.top_p,
        r.max_new_tokens,
        r.generate_merged,
        prompt=run.prompt,
        constrained=r.constrained,
        limits=sampling_limits(run.limits),
        dtype=None if r.sample_dtype == "model" else getattr(torch, r.sample_dtype),
        packed=r.packed_weights,
        reuse=env.sampling,
    )  # fmt: skip  (constrained: within the call budget the run's executor enforces)


def score(env: StepEnv, rollout: Rollout) -> Scored:
    """The rollout's reward table: its valid workflows run by the executor, then scored."""
    r, run = env.config.rollout, env.environment
    k = rollout.group_size  # from here on, K is the rollout's
    start = time.perf_counter()
    samples = prepare_samples(
        rollout.problems, rollout.texts, k, llm=run.executor, limits=run.limits,
        cache=env.cache, execute=r.execute and run.executor is not None,
        operators=run.operators, executions=r.executions,
    )  # fmt: skip
    table = score_samples(samples, k, env.config.rewards, env.history)
    return Scored(rollout, table, time.perf_counter() - start)


def table_advantages(estimator: str, table: RewardTable) -> torch.Tensor:
    """adv_N of the rows of ``table`` with its own K, computed from scores and weights cast
    ONCE to :data:`SCORE_DTYPE`.

    The one way the step computes advantages: choosing informative groups (:func:`informative_
    groups`) and training (:func:`compute_train_advantages`) see the same numbers, so a reward
    gap that only float64 resolves (1.0 vs 1.0 + 1e-9) is neither selected nor trained, instead
    of being selected in float64 and then trained with all-zero float32 advantages.
    """
    return compute_advantages(
        estimator,
        torch.tensor(table.scores, dtype=SCORE_DTYPE),
        table.group_size,
        torch.tensor(table.weights, dtype=SCORE_DTYPE),
    )


def informative_groups(table: RewardTable, estimator: str) -> list[int]:
    """Groups whose advantages, computed for the group alone, are not all zero.

    For the group-local estimators this is exactly the in-batch result; for the batch-normalising
    ones (global, gdpo) batch scaling keeps exact zeros, so the same groups are zero. Selection
    only: the advantages that are trained on are computed once, on the final batch.
    """
    k = table.group_size
    keep = []
    for g in range(table.n_groups):
        rows = slice(g * k, (g + 1) * k)
        group = RewardTable(table.names, table.scores[rows], table.weights, k, table.details[rows])
        if bool((table_advantages(estimator, group) != 0).any()):
            keep.append(g)
    return keep


def select_groups(scored: Scored, groups: Sequence[int]) -> Scored:
    """The rows of ``groups`` (rollout and table alike)."""
    k = scored.group_size
    rows = [g * k + j for g in groups for j in range(k)]
    t = scored.table
    table = RewardTable(t.names, t.scores[rows], t.weights, k, tuple(t.details[i] for i in rows))
    return Scored(scored.rollout.select_groups(groups), table, scored.score_seconds)


def concat_scored(parts: Sequence[Scored]) -> Scored:
    """One batch from several (groups in order)."""
    if len(parts) == 1:
        return parts[0]
    t0 = parts[0].table
    table = RewardTable(
        t0.names,
        np.concatenate([p.table.scores for p in parts]),
        t0.weights,
        t0.group_size,
        tuple(d for p in parts for d in p.table.details),
    )
    rollout = concat_rollouts([p.rollout for p in parts])
    return Scored(rollout, table, sum(p.score_seconds for p in parts))


def first_rollout(env: StepEnv, draw: Callable[[int], list[Problem]]) -> Scored:
    """This step's rollout of ``problems_per_step`` fresh problems: it describes the policy as
    it is (metrics, the guard's decision) before any resampling.

    With ``rollout.spare_problems`` S > 0 the same sampling call samples S more fresh
    problems, kept unscored in :attr:`Scored.spares` for the replacement round (:func:`collect`):
    sampling is bound by reading the weights once per decoding step, so S more groups in the call
    cost far less than a call of their own (docs/BENCHMARKS.md), as DAPO's over-sampling
    generates more prompts than it trains on (verl's ``gen_batch_size``)."""
    r = env.config.rollout
    b, spare = r.problems_per_step, r.spare_problems
    if not spare:
        return sample_and_score(env, draw(b))
    rollout = sample(env, draw(b + spare))
    spares = replace(rollout.select_groups(range(b, b + spare)), seconds=0.0)
    return replace(score(env, rollout.select_groups(range(b))), spares=spares)


def replacement_round(
    env: StepEnv, draw: Callable[[int], list[Problem]], missing: int, spares: Rollout | None
) -> Scored:
    """Groups of ``missing`` fresh problems at the step's temperature: the first from
    ``spares`` (sampled with the first rollout, by the same policy at the same temperature: the
    same draw as sampling them now), the rest sampled now."""
    used = 0 if spares is None else min(missing, len(spares.problems))
    parts = [spares.select_groups(range(used))] if used else []
    if missing > used:
        parts.append(sample(env, draw(missing - used)))
    return score(env, concat_rollouts(parts))


def collect(
    env: StepEnv,
    draw: Callable[[int], list[Problem]],
    first: Scored,
    tie_temperature: float | None = None,
) -> Collected:
    """The batch to train on, from ``first`` with dynamic sampling (see the module docstring).

    ``tie_temperature``: the temperature of the replacement rounds when every group of
    ``first`` tied (None: the step's own). Every group tied = the policy wrote one answer per
    problem, so a round at the same temperature draws it again (the deadlock); a hotter round
    samples the alternatives the policy still gives mass to, and the groups it keeps carry a
    reward difference again (Polaris-style exploration, An et al. 2025).

    ``rollout.resample: same``: the rounds redraw the tied groups' own problems, at the tie
    temperature whenever a group tied (the same problem at the same temperature mostly draws the
    same workflow again), so a problem whose group tied is compared against the alternatives
    for *that* problem instead of being replaced by another problem."""
    r, estimator = env.config.rollout, env.config.algorithm.advantage
    groups = len(first.rollout.problems)
    keep = informative_groups(first.table, estimator) if r.dynamic_sampling else list(range(groups))
    parts = [select_groups(first, keep)] if keep else []
    missing, rounds, resampled = groups - len(keep), 0, 0
    tokens, gen_s, score_s = int(first.rollout.mask_NT.sum()), first.rollout.seconds, 0.0
    score_s += first.score_seconds
    same = r.resample == "same"
    hot = tie_temperature if r.dynamic_sampling and (not keep or same) else None
    tied = [p for i, p in enumerate(first.rollout.problems) if i not in keep]
    spares = first.spares
    while r.dynamic_sampling and missing > 0 and rounds < r.max_resample_rounds:
        if same or hot is not None:  # not what the spares were sampled as
            extra = sample_and_score(env, tied if same else draw(missing), hot)
        else:  # fresh problems at the step's temperature: the spares serve once
            extra, spares = replacement_round(env, draw, missing, spares), None
        good = informative_groups(extra.table, estimator)
        tied = [p for i, p in enumerate(extra.rollout.problems) if i not in good]
        if good:
            parts.append(select_groups(extra, good))
        missing, rounds = missing - len(good), rounds + 1
        resampled += len(extra.rollout.problems)
        tokens += int(extra.rollout.mask_NT.sum())  # of scored groups: unused spares not counted
        gen_s, score_s = gen_s + extra.rollout.seconds, score_s + extra.score_seconds
    train = concat_scored(parts) if parts else None
    kept = 0 if train is None else len(train.rollout.problems)
    return Collected(first, train, kept, resampled, tokens, gen_s, score_s, hot if rounds else None)


def untrained(first: Scored) -> Collected:
    """The step's data when nothing is trained (the guard rolled back)."""
    tokens = int(first.rollout.mask_NT.sum())
    return Collected(first, None, 0, 0, tokens, first.rollout.seconds, first.score_seconds)


def compute_train_advantages(config: TrainConfig, train: Scored | None) -> torch.Tensor | None:
    """adv_N of the batch that is trained (None when there is none): computed once, here, by
    :func:`table_advantages` with the batch's own K."""
    if train is None:
        return None
    return table_advantages(config.algorithm.advantage, train.table)


def _combined(table: RewardTable) -> np.ndarray:
    return np.asarray(weighted_sum(table.scores, table.weights))


def rollout_metrics_of(first: Scored) -> dict:
    """Metrics of the first rollout: the policy as it is (advantage keys filled later)."""
    combined = _combined(first.table)
    stats = group_stats(torch.tensor(combined), first.group_size)
    return rollout_metrics(first.table, first.rollout, None, {**stats, "combined": combined})


def train_metrics(collected: Collected, adv_N: torch.Tensor | None) -> dict:
    """Dynamic-sampling counts, times and advantage statistics of the trained batch."""
    return {
        "kept_groups": collected.kept_groups,
        "resampled_groups": collected.resampled_groups,
        "resample_temperature": collected.resample_temperature,
        "gen_time": collected.gen_seconds,
        "score_time": collected.score_seconds,
        "adv_frac_extreme": None if adv_N is None else float((adv_N.abs() >= 0.99).float().mean()),
        "adv_abs_mean": None if adv_N is None else float(adv_N.abs().mean()),
    }


def _sample_row(step: int, text: str, detail: dict, reward: float, names, scores, adv) -> dict:
    finite = np.isfinite(reward)
    return {
        "step": step,
        "problem_id": detail.get("problem_id"),
        "completion": text,
        "reward": float(reward) if finite else None,
        "advantage": adv,
        **{key: detail.get(key) for key in ("canonical", "structure", "fallback", "valid")},
        **{key: detail.get(key) for key in ("correct", "answer")},
        "rewards": {n: (float(v) if np.isfinite(v) else None) for n, v in zip(names, scores)},
    }


def sample_rows(step: int, collected: Collected, adv_N: torch.Tensor | None, limit: int):
    """samples.jsonl rows of every scored completion of the step (first rollout, then the
    resampled groups that were trained), each with the advantage it was trained with (None
    when its group was dropped). ``limit`` < 0: all rows."""
    trained: dict[tuple[int, str], float] = {}
    if collected.train is not None and adv_N is not None:
        t = collected.train
        for i, (problem, text) in enumerate(zip(_row_problems(t), t.rollout.texts)):
            trained.setdefault((id(problem), text), float(adv_N[i]))
    rows = []
    scored = [collected.first]
    if collected.train is not None and collected.resampled_groups:
        scored.append(_resampled_part(collected))
    for part in scored:
        combined = _combined(part.table)
        problems = _row_problems(part)
        for i, detail in enumerate(part.table.details):
            if 0 <= limit <= len(rows):
                return rows
            adv = trained.get((id(problems[i]), part.rollout.texts[i]))
            rows.append(_sample_row(
                step, part.rollout.texts[i], detail, combined[i], part.table.names,
                part.table.scores[i], adv,
            ))  # fmt: skip
    return rows


def _row_problems(scored: Scored) -> list[Problem]:
    k = scored.group_size
    return [p for p in scored.rollout.problems for _ in range(k)]


def _resampled_part(collected: Collected) -> Scored:
    """The trained groups that did not come from the first rollout."""
    first_ids = {id(p) for p in collected.first.rollout.problems}
    train = collected.train
    groups = [g for g, p in enumerate(train.rollout.problems) if id(p) not in first_ids]
    return select_groups(train, groups)
