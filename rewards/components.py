"""Reward components: each scores every sample of one group (the K completions of one problem).

A component is ``fn(group, options, history) -> np.ndarray``: float64, shape ``[K]``, one score
in [0, 1] per sample, NaN where the sample cannot be scored. Components are registered by name
in :data:`REWARD_COMPONENTS` (:func:`register_component`) and chosen by name in the reward spec;
a spec may also name one outside flowgrpo by dotted path (``"my_pkg.rewards:length"``). Every
built-in one depends on the group as a set (the order of samples does not matter) and never on
other groups.

NaN means *unscorable*: the executor failed after retries, or a valid workflow was not executed
(``execute=False``). Only ``accuracy`` and ``cost`` read the execution, so only they give NaN;
``validity``, ``diversity`` and ``format`` always score.

Examples below use this group (``p`` a math problem, ``run(calls, correct)`` an execution)::

    group = [make_sample(p, "I think it is 5"),                 # fallback (prose)
             make_sample(p, "Custom -> -> Format"),             # syntax error
             make_sample(p, "Revise -> Custom"),                # semantic error
             make_sample(p, "Custom -> Format", run(2, False)), # valid, wrong
             make_sample(p, "Custom", run(1, True))]            # valid, correct
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from flowgrpo.operators.checkers import check_math_answer
from flowgrpo.operators.state import ExecutionResult
from flowgrpo.registry import Registry
from flowgrpo.rewards.history import RecentWorkflows
from flowgrpo.rewards.leaks import states_answer
from flowgrpo.rewards.options import RewardOptions
from flowgrpo.rewards.sample import Sample

ComponentFn = Callable[[Sequence[Sample], RewardOptions, "RecentWorkflows | None"], np.ndarray]

#: Reward components by name.
REWARD_COMPONENTS: Registry[ComponentFn] = Registry("reward component")


def register_component(name: str, fn: ComponentFn | None = None):
    """Register ``fn`` as the reward component ``name``; without ``fn``, a decorator that does.

    The name must be an identifier; a duplicate name raises ``ValueError``.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a component name must be an identifier, got {name!r}")
    return REWARD_COMPONENTS.register(name, fn)


def get_component(name: str) -> ComponentFn:
    """The component registered as ``name`` (or a dotted path); unknown names list the choices."""
    return REWARD_COMPONENTS.get(name)


def available_components() -> tuple[str, ...]:
    """Registered component names, sorted."""
    return REWARD_COMPONENTS.names()


def _array(values) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64)


# --------------------------------------------------------------------------- validity


@register_component("validity")
def validity(group: Sequence[Sample], options: RewardOptions, history=None) -> np.ndarray:
    """The validity level of each sample's workflow (never NaN).

    ======================  =========================  =======
    case                    option                     default
    ======================  =========================  =======
    no workflow (fallback)  ``validity_fallback``      0.0
    does not parse          ``validity_syntax_error``  0.1
    validation errors       ``validity_semantic_error`` 0.4
    valid, with warnings    ``validity_warnings``      0.9
    valid                   ``validity_valid``         1.0
    ======================  =========================  =======

    A sample without a report is scored as a fallback. With the example group: ``[0.0, 0.1,
    0.4, 1.0, 1.0]``.
    """
    return _array(_validity_level(s, options) for s in group)


def _validity_level(sample: Sample, options: RewardOptions) -> float:
    report = sample.report
    if sample.fallback or report is None:
        return options.validity_fallback
    if not report.syntax_ok:
        return options.validity_syntax_error
    if report.errors:
        return options.validity_semantic_error
    if report.warnings:
        return options.validity_warnings
    return options.validity_valid


# --------------------------------------------------------------------------- accuracy


@register_component("accuracy")
def accuracy(group: Sequence[Sample], options: RewardOptions, history=None) -> np.ndarray:
    """Correctness of the executed workflow's answer.

    * invalid workflow or fallback (never executed): 0.0;
    * valid but not executed, or the executor failed (unscorable): NaN;
    * an instruction states the reference answer (``Custom("Reply with exactly: 5")``: the
      policy answered, the executor copied; :mod:`rewards.leaks`): 0.0;
    * correct (the checker's ``correct``): 1.0;
    * wrong: 0.0, or partial credit when graded for the domain, capped at
      ``max_partial_credit`` (0.9): math with ``graded_math`` (off by default): relative-error
      tiers 0.7 / 0.4 / 0.2 / 0 (:data:`operators.checkers.math.GRADED_TIERS`, read as the
      verdict reads the answer); code with
      ``graded_code`` (on): the fraction of hidden tests passed (the execution's score); qa with
      ``graded_qa`` (off): token F1 (the execution's score).

    A workflow executed several times (``rollout.executions``) scores the mean over its
    scorable runs: an estimate of its accuracy on the problem with less variance (the
    "several executions per design" of MetaAgent-X, arXiv 2605.14212).

    With the example group: ``[0.0, 0.0, 0.0, 0.0, 1.0]``. Not handled: an unknown domain gets
    no partial credit.
    """
    return _array(_accuracy(s, options) for s in group)


def _executed(sample: Sample) -> float | tuple[ExecutionResult, ...]:
    """The sample's scorable runs, or the score of one that has none: 0 for a sample that was
    not run because it is invalid or prose, NaN for a valid one not run or unscorable."""
    if not sample.valid:
        return 0.0
    runs = tuple(run for run in sample.runs if not run.unscorable)
    return runs if runs else math.nan


def _accuracy(sample: Sample, options: RewardOptions) -> float:
    """Mean over the sample's scorable runs (one unless ``rollout.executions`` > 1); 0 when
    an instruction states the answer (:func:`rewards.leaks.states_answer`)."""
    runs = _executed(sample)
    if isinstance(runs, float):
        return runs
    if states_answer(sample):
        return 0.0
    return sum(_run_accuracy(sample.problem, run, options) for run in runs) / len(runs)


def _run_accuracy(problem, run: ExecutionResult, options: RewardOptions) -> float:
    if run.correct:
        return 1.0
    return min(_partial_credit(problem, run, options), options.max_partial_credit)


def _partial_credit(problem, run: ExecutionResult, options: RewardOptions) -> float:
    domain = problem.domain
    if domain == "math":
        if not options.graded_math or run.answer is None or problem.answer is None:
            return 0.0
        try:  # the verdict's own reading: a near miss of an integer is a tier, never exact
            return check_math_answer(run.answer, problem.answer, graded=True).score
        except ValueError:  # an empty reference: no partial credit
            return 0.0
    graded = {"code": options.graded_code, "qa": options.graded_qa}.get(domain, False)
    score = float(run.score) if graded else 0.0
    return min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0


# --------------------------------------------------------------------------- cost


@register_component("cost")
def cost(group: Sequence[Sample], options: RewardOptions, history=None) -> np.ndarray:
    """Cheapness of the execution in [0, 1]: fewer executor calls (and tokens) score higher.

    ``calls_part = 1 - min(calls, cost_max_calls) / cost_max_calls`` (the run's call budget,
    ``executor.max_calls``; 12 by default: 1 call scores 0.917, 12 score 0). With
    ``cost_max_tokens`` set, the score is the mean of ``calls_part`` and the same formula over
    executor tokens. Independent of correctness: two samples with the same accuracy are ordered
    by cost; accuracy dominates through its weight.

    Invalid workflows and fallbacks get 0, not 1: otherwise writing prose would be the cheapest
    way to earn cost. Valid but not executed, or unscorable: NaN. With the example group:
    ``[0.0, 0.0, 0.0, 0.833, 0.917]`` (rounded; 12 calls).
    """
    return _array(_cost(s, options) for s in group)


def _cost(sample: Sample, options: RewardOptions) -> float:
    """Mean over the sample's scorable runs (one unless ``rollout.executions`` > 1)."""
    runs = _executed(sample)
    if isinstance(runs, float):
        return runs
    return sum(_run_cost(run, options) for run in runs) / len(runs)


def _run_cost(run: ExecutionResult, options: RewardOptions) -> float:
    calls = options.cost_calls
    score = 1.0 - min(run.calls, calls) / calls
    if options.cost_max_tokens is None:
        return score
    tokens = 1.0 - min(run.tokens, options.cost_max_tokens) / options.cost_max_tokens
    return 0.5 * (score + tokens)


# --------------------------------------------------------------------------- diversity


@register_component("diversity")
def diversity(
    group: Sequence[Sample], options: RewardOptions, history: RecentWorkflows | None = None
) -> np.ndarray:
    """How different each sample's workflow is from its K - 1 siblings, in [0, 1].

    ``diversity_metric="canonical"`` (default): the share of siblings whose canonical form
    differs (a sibling without a workflow counts as different). ``"structural"``: the mean over
    siblings of the multiset-Jaccard distance between the samples' operators plus constructs
    (chain, conditional, loop, parallel); identical workflows are at distance 0, a sibling
    without a workflow at 1. Both read workflows as :attr:`Sample.diversity_key` writes them:
    without instructions, loops of one, checks whose branches are alike, loops of loops and
    parallel branches nothing reads (:func:`dsl.canonical.skeleton`). Each would make a
    workflow "different" at no or little cost while the executor does the same work, and RL
    would learn to respell instead of to explore.

    Fallbacks get 0; so do invalid workflows while ``diversity_requires_valid`` (default). A
    group of one sample has no siblings: 0. With a history and ``diversity_history_weight`` w,
    the score is ``(1 - w) * group_score + w * history.rarity(canonical)``.

    With the example group (canonical): ``[0.0, 0.0, 0.0, 1.0, 1.0]``; K identical valid
    workflows: all 0.
    """
    keys = [s.diversity_key for s in group]
    if options.diversity_metric == "structural":
        group_scores = _structural(group, keys)
    else:
        group_scores = _distinct_share(keys)
    weight = options.diversity_history_weight if history is not None else 0.0
    out = np.empty(len(group), dtype=np.float64)
    for i, (sample, key) in enumerate(zip(group, keys)):
        invalid = options.diversity_requires_valid and not sample.valid
        if key is None or sample.fallback or invalid:
            out[i] = 0.0
        elif weight > 0:
            out[i] = (1.0 - weight) * group_scores[i] + weight * history.rarity(key)
        else:
            out[i] = group_scores[i]
    return out


def _distinct_share(keys: list[str | None]) -> list[float]:
    k = len(keys)
    if k < 2:
        return [0.0] * k
    counts = Counter(keys)
    return [(k - counts[key]) / (k - 1) for key in keys]


def _structural(group: Sequence[Sample], keys: list[str | None]) -> list[float]:
    k = len(keys)
    if k < 2:
        return [0.0] * k
    bags: dict[str, Counter] = {}
    for sample, key in zip(group, keys):
        if key is not None and key not in bags:
            report = sample.report
            constructs = report.features - {"instruction"}
            bags[key] = Counter(report.operators) + Counter(f"<{f}>" for f in constructs)
    counts = Counter(keys)
    scores = []
    for key in keys:
        if key is None:
            scores.append(0.0)
            continue
        total = sum(
            n * (1.0 if other is None else _jaccard_distance(bags[key], bags[other]))
            for other, n in counts.items()
        )  # the sample itself (and identical siblings) add distance 0
        scores.append(total / (k - 1))
    return scores


def _jaccard_distance(a: Counter, b: Counter) -> float:
    if a is b:
        return 0.0
    union = sum((a | b).values())
    return 1.0 - sum((a & b).values()) / union if union else 0.0


# --------------------------------------------------------------------------- format


@register_component("format")
def format_(group: Sequence[Sample], options: RewardOptions, history=None) -> np.ndarray:
    """1.0 when the output is exactly a workflow with nothing around it, else 0.0 (never NaN).

    Formatting only: an exact output that does not parse still scores 1 here (validity scores
    the syntax). With the example group: ``[0.0, 1.0, 1.0, 1.0, 1.0]``; ``"Sure!\\n```\\nCustom
    \\n```"`` scores 0.
    """
    return _array(1.0 if (not s.fallback and s.extraction.exact) else 0.0 for s in group)
