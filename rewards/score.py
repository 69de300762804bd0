"""Scoring a batch: samples from (problem, completion) groups, the reward table, its combination.

A batch holds groups of ``group_size`` consecutive completions, one group per problem. The
trainer calls :func:`prepare_samples` then :func:`score_samples` (:func:`score_batch` does both
in one call, for tests and examples) and gets a :class:`RewardTable`: one row per sample, one
column per active component, NaN where a sample cannot be scored, plus per-sample details for
logging. :func:`rewards.combine.weighted_sum` turns
the table into one reward per sample; GDPO (per-component group normalisation) lives with the
trainer's advantage estimators and reads ``table.scores`` directly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from flowgrpo.dsl import OperatorTable
from flowgrpo.operators.interpreter import run_workflows
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards.combine import check_group_size, weighted_sum
from flowgrpo.rewards.components import get_component
from flowgrpo.rewards.history import RecentWorkflows
from flowgrpo.rewards.leaks import states_answer
from flowgrpo.rewards.sample import Sample, make_sample
from flowgrpo.rewards.spec import RewardSpec

logger = logging.getLogger(__name__)

_EXECUTION_COMPONENTS = frozenset({"accuracy", "cost"})


# --------------------------------------------------------------------------- samples


def prepare_samples(
    problems: Sequence[Problem],
    completions: Sequence[str],
    group_size: int,
    llm=None,
    limits=None,
    cache=None,
    check: Callable | None = None,
    sandbox: Callable | None = None,
    execute: bool = True,
    operators: OperatorTable | None = None,
    executions: int = 1,
) -> list[Sample]:
    """Extract, validate and (optionally) execute every completion of a batch.

    Args:
        problems: one problem per group.
        completions: ``len(problems) * group_size`` model outputs; group g is
            ``completions[g * group_size:(g + 1) * group_size]``, all answering ``problems[g]``.
        group_size: K, completions per problem.
        llm: the executor backend (:class:`operators.llm.LLM`); needed only when ``execute``
            and some workflow is valid.
        limits, cache, check, sandbox: passed to :func:`operators.interpreter.run_workflows`.
        executions: runs per valid workflow (``rollout.executions``): the first is
            ``Sample.execution``, the others ``Sample.repeats`` (repeat index 1, 2, ...; see
            :func:`operators.interpreter.run_workflows`).
        execute: run the valid workflows. Off: every sample's execution is None (accuracy and
            cost then score valid samples NaN).
        operators: the operator table workflows are extracted and validated against (a run's,
            with its own operators); None: the process-wide table.

    Only valid workflows run, all in ONE ``run_workflows`` call (LLM calls batched per stage;
    identical (workflow, problem) pairs run once; earlier results come from ``cache``).
    Fallbacks and invalid workflows get ``execution=None``. Validation uses the problem's domain
    and the static bounds of ``limits`` (its call budget; the interpreter validates the same
    way), so a workflow valid here is not one the executor stops for its number of operators.
    """
    _check_batch(problems, completions, group_size)
    samples = [
        make_sample(problem, text, operators=operators, limits=limits)
        for g, problem in enumerate(problems)
        for text in completions[g * group_size : (g + 1) * group_size]
    ]
    todo = [i for i, s in enumerate(samples) if s.valid]
    if not execute or not todo:
        return samples
    if llm is None:
        raise ValueError(
            f"{len(todo)} valid workflow(s) need an executor: pass llm=..., or execute=False "
            "to score without running them"
        )
    if isinstance(executions, bool) or not isinstance(executions, int) or executions < 1:
        raise ValueError(f"executions must be an integer >= 1, got {executions!r}")
    return _execute(
        samples, todo, executions, llm=llm, limits=limits, cache=cache, check=check,
        sandbox=sandbox, operators=operators,
    )  # fmt: skip


def _execute(samples: list[Sample], todo: list[int], executions: int, **run) -> list[Sample]:
    """``samples`` with the rows ``todo`` executed ``executions`` times each, in one
    :func:`run_workflows` call (``run``: its other arguments)."""
    pairs = [(samples[i].canonical, samples[i].problem) for i in todo for _ in range(executions)]
    results = run_workflows(pairs, repeats=[r for _ in todo for r in range(executions)], **run)
    for n, i in enumerate(todo):
        first, *rest = results[n * executions : (n + 1) * executions]
        samples[i] = replace(samples[i], execution=first, repeats=tuple(rest))
    unscorable = sum(r.unscorable for r in results)
    if unscorable:
        logger.warning("%d of %d executions unscorable (executor failed)", unscorable, len(results))
    return samples


def _check_batch(problems, completions, group_size) -> None:
    if isinstance(completions, str) or isinstance(problems, Problem):
        raise ValueError("problems and completions must be sequences (one entry per item)")
    check_group_size(0, group_size)  # K alone: the count is checked against the problems next
    if len(completions) != len(problems) * group_size:
        raise ValueError(
            f"got {len(completions)} completions for {len(problems)} problems with group_size "
            f"{group_size}: expected {len(problems) * group_size} (one group of consecutive "
            "completions per problem)"
        )
    for i, text in enumerate(completions):
        if not isinstance(text, str):
            raise ValueError(f"completion {i} must be a string, got {type(text).__name__}")


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class RewardTable:
    """Per-component scores of a batch, NaN where unscorable, with per-sample details.

    Attributes:
        names: active components (weight > 0), in spec order: the columns.
        scores: float64 ``[N, C]``, read-only; row i is sample i (groups are consecutive blocks
            of ``group_size`` rows).
        weights: float64 ``[C]``, the spec weights of ``names``.
        group_size: K.
        details: per sample: problem_id, source, fallback, syntax_ok, valid, exact, canonical,
            structure, errors and warnings (codes), operators, planned_calls (worst case),
            executed, answer, correct, exec_score, calls, tokens, unscorable, execution_error.
    """

    names: tuple[str, ...]
    scores: np.ndarray
    weights: np.ndarray
    group_size: int
    details: tuple[dict[str, Any], ...]

    def __post_init__(self):
        scores = np.array(self.scores, dtype=np.float64)
        weights = np.array(self.weights, dtype=np.float64)
        n = len(self.details)
        if scores.shape != (n, len(self.names)) or weights.shape != (len(self.names),):
            raise ValueError(
                f"RewardTable shapes disagree: scores {scores.shape}, weights {weights.shape}, "
                f"{len(self.names)} names, {n} details"
            )
        check_group_size(n, self.group_size)
        scores.setflags(write=False)
        weights.setflags(write=False)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "details", tuple(self.details))

    @property
    def n_samples(self) -> int:
        return self.scores.shape[0]

    @property
    def n_groups(self) -> int:
        return self.n_samples // self.group_size

    def component(self, name: str) -> np.ndarray:
        """The column of ``name`` ([N], read-only); an inactive name raises with the columns."""
        if name not in self.names:
            raise ValueError(f"no component {name!r} in this table; columns: {list(self.names)}")
        return self.scores[:, self.names.index(name)]

    def total(self) -> np.ndarray:
        """:func:`weighted_sum` of the table ([N], NaN for a sample with every component NaN)."""
        return weighted_sum(self.scores, self.weights)

    def scorable(self) -> np.ndarray:
        """Bool [N]: the sample has at least one non-NaN component (else: advantage 0)."""
        return ~np.isnan(self.scores).all(axis=1)

    def as_records(self) -> list[dict[str, Any]]:
        """One dict per sample: group, index in group, details, component scores, total reward.

        NaN scores stay ``float('nan')`` (write JSON with ``allow_nan`` or map them to None).
        """
        totals = self.total()
        records = []
        for i, detail in enumerate(self.details):
            row = {"group": i // self.group_size, "index": i % self.group_size, **detail}
            row.update({n: float(v) for n, v in zip(self.names, self.scores[i])})
            row["reward"] = float(totals[i])
            records.append(row)
        return records

    def summary(self) -> dict[str, float]:
        """Per component: NaN-aware mean and std, and the share of NaN; for step logs."""
        out: dict[str, float] = {}
        for c, name in enumerate(self.names):
            col = self.scores[:, c]
            ok = col[~np.isnan(col)]
            out[f"{name}/mean"] = float(ok.mean()) if ok.size else math.nan
            out[f"{name}/std"] = float(ok.std()) if ok.size else math.nan
            out[f"{name}/nan_frac"] = float(1.0 - ok.size / col.size) if col.size else 0.0
        return out


def _details(sample: Sample) -> dict[str, Any]:
    report, run = sample.report, sample.execution
    return {
        "problem_id": sample.problem.id,
        "source": sample.extraction.source,
        "fallback": sample.fallback,
        "syntax_ok": sample.syntax_ok,
        "valid": sample.valid,
        "exact": sample.extraction.exact,
        "canonical": sample.canonical,
        "structure": sample.structure,
        "errors": tuple(p.code for p in report.errors) if report else (),
        "warnings": tuple(p.code for p in report.warnings) if report else (),
        "operators": report.operators if report else (),
        "planned_calls": report.calls if report else 0,
        "executed": run is not None,
        "answer": run.answer if run else None,
        "correct": run.correct if run else None,
        "exec_score": run.score if run else None,
        "calls": run.calls if run else None,
        "tokens": run.tokens if run else None,
        "unscorable": sample.unscorable,
        "execution_error": run.error if run else None,
        "answer_in_instruction": states_answer(sample),
    }


# --------------------------------------------------------------------------- scoring


def score_samples(
    samples: Sequence[Sample],
    group_size: int,
    spec: RewardSpec | None = None,
    history: RecentWorkflows | None = None,
    update_history: bool = True,
) -> RewardTable:
    """Score every group of ``samples`` with the spec's active components.

    Each component sees one group at a time (consecutive blocks of ``group_size``), so a group's
    scores do not depend on the other groups or on the batch size. With a ``history``, diversity
    reads rarity against the batches pushed *before* this one; then, when ``update_history``,
    this batch's workflows (those eligible for diversity) are pushed.

    Raises:
        ValueError: the samples do not split into groups of one problem each, or a component
            returned the wrong shape or a score outside [0, 1] (NaN aside).
    """
    spec = _spec(spec)
    samples = list(samples)
    _check_groups(samples, group_size)
    names, options = spec.names, spec.options
    fns = [get_component(name) for name in names]
    scores = np.empty((len(samples), len(names)), dtype=np.float64)
    for start in range(0, len(samples), group_size):
        group = samples[start : start + group_size]
        for c, (name, fn) in enumerate(zip(names, fns)):
            column = np.asarray(fn(group, options, history), dtype=np.float64)
            if column.shape != (group_size,):
                raise ValueError(
                    f"component {name!r} returned shape {column.shape} for a group of "
                    f"{group_size}; it must return one score per sample"
                )
            _check_scores(name, column)
            scores[start : start + group_size, c] = column
    table = RewardTable(
        names, scores, np.array(spec.active_weights), group_size, tuple(map(_details, samples))
    )
    if history is not None and update_history:
        history.push(s.diversity_key for s in samples if _history_eligible(s, spec))
    return table


def _spec(spec) -> RewardSpec:
    """The spec given: None for the defaults, a mapping as a config's ``rewards`` section."""
    if spec is None:
        return RewardSpec()
    if isinstance(spec, Mapping):
        return RewardSpec.from_dict(spec)
    if not isinstance(spec, RewardSpec):
        raise TypeError(f"spec must be a RewardSpec, a mapping {{weights, options}} or None, "
                        f"got {type(spec).__name__}")  # fmt: skip
    return spec


def _check_scores(name: str, column: np.ndarray) -> None:
    """A component scores each sample in [0, 1], NaN where it cannot (rewards/components.py):
    a score outside would change the reward's scale without a word (a plugin's 7.0 counted
    seven times its weight)."""
    if np.isinf(column).any():
        raise ValueError(f"component {name!r} returned an infinite score: {column}")
    scored = column[~np.isnan(column)]
    if ((scored < 0.0) | (scored > 1.0)).any():
        raise ValueError(
            f"component {name!r} returned scores outside [0, 1]: {column}; a component scores "
            "each sample in [0, 1] (NaN: cannot be scored) and its weight sets its share"
        )


def _history_eligible(sample: Sample, spec: RewardSpec) -> bool:
    if sample.diversity_key is None:
        return False
    return sample.valid or not spec.options.diversity_requires_valid


def _check_groups(samples: list[Sample], group_size: int) -> None:
    check_group_size(len(samples), group_size)
    for start in range(0, len(samples), group_size):
        ids = {s.problem.id for s in samples[start : start + group_size]}
        if len(ids) > 1:
            raise ValueError(
                f"group {start // group_size} mixes problems {sorted(ids)}: a group must be the "
                "K completions of one problem (check group_size and the sample order)"
            )


def score_batch(
    problems: Sequence[Problem],
    completions: Sequence[str],
    group_size: int,
    spec: RewardSpec | None = None,
    llm=None,
    history: RecentWorkflows | None = None,
    limits=None,
    cache=None,
    check: Callable | None = None,
    sandbox: Callable | None = None,
    execute: bool | None = None,
) -> RewardTable:
    """:func:`prepare_samples` then :func:`score_samples` in one call (tests, examples; the
    trainer calls the two itself, ``flowgrpo.trainer.loop.step.sample_and_score``).

    ``execute=None`` executes when accuracy or cost is active in ``spec``. See the two functions
    for the arguments.
    """
    spec = _spec(spec)
    if execute is None:
        execute = bool(_EXECUTION_COMPONENTS & set(spec.names))
    samples = prepare_samples(
        problems, completions, group_size, llm, limits, cache, check, sandbox, execute
    )
    return score_samples(samples, group_size, spec, history)
