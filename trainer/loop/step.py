"""The parts of one training step: rollout and scoring (with dynamic sampling), the collapse
guard, and the update. :mod:`trainer.loop` calls them in order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from flowgrpo.rewards import prepare_samples, score_samples
from flowgrpo.trainer.algorithms.advantages import combine_rewards, compute_advantages, group_stats
from flowgrpo.trainer.monitoring.metrics import rollout_metrics
from flowgrpo.trainer.loop.rollout import concat_rollouts, generate_rollout
from flowgrpo.trainer.loop.update import UpdateInputs, policy_update

logger = logging.getLogger(__name__)


@dataclass
class Scored:
    """A scored step: its metrics, what to train on (None: nothing informative), samples."""

    metrics: dict
    train: UpdateInputs | None
    samples: list[dict]
    train_tokens: int
    rollout: object = None
    table: object = None
    adv_N: torch.Tensor | None = None


def _sample_and_score(trainer, problems):
    """(rollout, reward table, scores [N, C]) for ``problems``."""
    cfg = trainer.config
    r = cfg.rollout
    rollout = generate_rollout(
        trainer.model,
        trainer.tokenizer,
        problems,
        r.num_generations,
        r.temperature,
        r.top_p,
        r.max_new_tokens,
        r.generate_merged,
    )
    start = time.perf_counter()
    samples = prepare_samples(
        rollout.problems,
        rollout.texts,
        r.num_generations,
        llm=trainer.executor,
        limits=trainer.exec_limits,
        cache=trainer.cache,
        execute=r.execute and trainer.executor is not None,
    )
    table = score_samples(samples, r.num_generations, cfg.rewards, trainer.history)
    return rollout, table, time.perf_counter() - start


def _advantages(trainer, scores_NC: np.ndarray, weights_C: np.ndarray) -> torch.Tensor:
    return compute_advantages(
        trainer.config.algorithm.advantage,
        torch.tensor(np.array(scores_NC), dtype=torch.float32),
        trainer.config.rollout.num_generations,
        torch.tensor(np.array(weights_C), dtype=torch.float32),
    )


def _informative_groups(adv_N: torch.Tensor, k: int) -> list[int]:
    """Groups with any non-zero advantage (estimator-agnostic: gdpo included)."""
    return [g for g, row in enumerate(adv_N.view(-1, k)) if bool((row != 0).any())]


def rollout_and_score(trainer) -> Scored:
    """Sample and score this step's rollout; metrics describe the policy as it is."""
    r = trainer.config.rollout
    problems = trainer.sampler.draw(r.problems_per_step)
    rollout, table, score_time = _sample_and_score(trainer, problems)
    adv_N = _advantages(trainer, table.scores, table.weights)
    combined = combine_rewards(
        torch.tensor(np.array(table.scores)), torch.tensor(np.array(table.weights))
    )
    stats = group_stats(combined, r.num_generations)
    metrics = rollout_metrics(table, rollout, adv_N, {**stats, "combined": combined.numpy()})
    cache = trainer.cache.stats() if trainer.cache else {}
    metrics.update(
        gen_time=rollout.seconds,
        score_time=score_time,
        **{f"exec/{key}": value for key, value in cache.items()},
    )
    samples = _sample_rows(
        trainer.step, rollout, table, adv_N, combined, trainer.config.logging.samples_per_step
    )
    return Scored(metrics, None, samples, int(rollout.mask_NT.sum()), rollout, table, adv_N)


def select_training_groups(trainer, scored: Scored) -> Scored:
    """Pick the groups to train on (dynamic sampling, DAPO arXiv 2503.14476).

    Groups whose advantages are all zero are dropped and, within ``max_resample_rounds``,
    replaced by groups of fresh problems. Advantages are recomputed over the final batch (exact
    for the batch-normalising estimators). Fills ``scored.train`` (None: nothing to learn).
    """
    r = trainer.config.rollout
    k, rollout, table = r.num_generations, scored.rollout, scored.table
    if r.dynamic_sampling:
        keep = _informative_groups(scored.adv_N, k)
    else:
        keep = list(range(len(rollout.problems)))
    kept = [(rollout.select_groups(keep), table.scores[_rows(keep, k)])] if keep else []
    extra_tokens, resampled = _resample(trainer, kept, len(rollout.problems) - len(keep))
    scored.metrics.update(
        kept_groups=sum(len(p[0].problems) for p in kept), resampled_groups=resampled
    )
    scored.train_tokens += extra_tokens
    if kept:
        final = concat_rollouts([p[0] for p in kept])
        train_adv = _advantages(trainer, np.concatenate([p[1] for p in kept]), table.weights)
        scored.train = UpdateInputs(final, train_adv)
    return scored


def _resample(trainer, kept: list, missing: int) -> tuple[int, int]:
    """Replace ``missing`` zero-signal groups with informative groups of fresh problems.

    Appends to ``kept``; returns (completion tokens generated, groups resampled).
    """
    r = trainer.config.rollout
    rounds = tokens = resampled = 0
    while r.dynamic_sampling and missing > 0 and rounds < r.max_resample_rounds:
        extra, table, _ = _sample_and_score(trainer, trainer.sampler.draw(missing))
        good = _informative_groups(
            _advantages(trainer, table.scores, table.weights), r.num_generations
        )
        if good:
            kept.append((extra.select_groups(good), table.scores[_rows(good, r.num_generations)]))
        missing -= len(good)
        rounds += 1
        resampled += len(extra.problems)
        tokens += int(extra.mask_NT.sum())
    return tokens, resampled


def _rows(groups: list[int], k: int) -> np.ndarray:
    return np.array([g * k + j for g in groups for j in range(k)], dtype=np.int64)


def _sample_rows(step, rollout, table, adv_N, combined, limit: int) -> list[dict]:
    rows = []
    for i, detail in enumerate(table.details):
        if 0 <= limit <= i:
            break
        value = float(combined[i])
        rows.append(
            {
                "step": step,
                "problem_id": detail.get("problem_id"),
                "completion": rollout.texts[i],
                "reward": value if np.isfinite(value) else None,
                "advantage": float(adv_N[i]),
                "canonical": detail.get("canonical"),
                "structure": detail.get("structure"),
                "fallback": detail.get("fallback"),
                "valid": detail.get("valid"),
                "correct": detail.get("correct"),
                "answer": detail.get("answer"),
                "rewards": {
                    n: (float(v) if np.isfinite(v) else None)
                    for n, v in zip(table.names, table.scores[i])
                },
            }
        )
    return rows


def maybe_rollback(trainer, metrics: dict) -> bool:
    """Compare this rollout with the one before the last update; undo the update on collapse.

    The same rule as the ``update_collapse`` health check and ``flowgrpo diagnose``
    (:func:`trainer.collapse.collapse_at`). Returns True when the update was rolled back (the
    step then trains on nothing: this rollout came from the collapsed policy).
    """
    from flowgrpo.trainer.monitoring.collapse import collapse_at
    from flowgrpo.trainer.monitoring.guard import restore_snapshot

    health = trainer.config.health
    if health.guard == "off":
        return False
    history = trainer.monitor.history
    event = collapse_at(
        [*history, metrics],
        len(history),
        health.collapse_fallback_jump,
        health.collapse_validity_drop,
    )
    if event is None:
        return False
    metrics["collapse"] = event.to_dict()
    if health.guard != "rollback" or trainer.snapshot is None:
        return False
    restore_snapshot(
        trainer.model,
        trainer.optimizer,
        trainer.snapshot,
        health.rollback_lr_factor,
        trainer.scheduler,
    )
    logger.warning(
        "step %d: update -> collapse (%s): rolled back to the weights before step %s's update",
        metrics["step"],
        event.reason,
        trainer.snapshot.step,
    )
    trainer.snapshot = None
    return True


@torch.no_grad()
def rollout_entropy(trainer, rollout) -> float:
    """Mean token entropy of the policy on a rollout it did not train on (no update this step:
    entropy is still logged, the signal the zero-variance deadlock hides)."""
    from flowgrpo.trainer.algorithms.logprobs import group_logprobs

    total = count = 0.0
    k = rollout.group_size
    for g, prompt in enumerate(rollout.prompt_ids):
        rows = slice(g * k, (g + 1) * k)
        mask_KT = rollout.mask_NT[rows]
        _, entropy_KT = group_logprobs(
            trainer.model, prompt, rollout.completion_ids_NT[rows], mask_KT, _mode(trainer.config)
        )
        total += float((entropy_KT.cpu() * mask_KT).sum())
        count += float(mask_KT.sum())
    return total / max(count, 1.0)


def update(trainer, inputs: UpdateInputs) -> dict:
    cfg = trainer.config
    return policy_update(
        trainer.model,
        trainer.optimizer,
        trainer.scheduler,
        inputs,
        trainer.loss_cfg,
        cfg.algorithm.num_iterations,
        _mode(cfg),
        cfg.optim.max_grad_norm,
        trainer.world,
    )


def _mode(cfg) -> str:
    return "full" if cfg.model.gradient_checkpointing else cfg.rollout.logprob_mode
