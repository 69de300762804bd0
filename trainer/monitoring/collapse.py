"""The update → collapse detector: did an optimizer update turn DSL output into prose?

Each rollout is compared with the rollout before it, i.e. across the update between them.
``collapse_rate`` = collapses / decided updates is the number the original Qwen2.5-7B run only
found by parsing logs (37 of 38 updates, 97.4%, with group size K=2).

The rule (issue 13, item 4; tests: ``tests/trainer/test_collapse.py``). A rollout of ``n``
completions gives a fallback rate ``f`` and a validity rate ``v``. For the rollout before the
update (``f1, v1`` over ``n1``) and the one after it (``f2, v2`` over ``n2``), the fallback
rise is tested with the one-sided, pooled two-proportion z-test::

    p̂ = (n1·f1 + n2·f2) / (n1 + n2)                  pooled rate under "no change"
    z = (f2 − f1) / sqrt(p̂ · (1 − p̂) · (1/n1 + 1/n2))
    p = P(Z ≥ z) = erfc(z / √2) / 2                    Z standard normal

and the validity fall the same way on the invalid rates ``1 − v``. The update is a collapse
when, for the fallback rate or for the validity rate,

* both rollouts have at least ``min_completions`` completions (else: not decided),
* ``p ≤ alpha`` (the change is unlikely to be sampling noise), and
* the change is at least ``fallback_jump`` (rise) / ``validity_drop`` (fall), absolute: with
  large rollouts a tiny change is significant but not a collapse.

Why: the former rule fired on a fixed +0.3 jump; with 16 completions per rollout and a rate of
0.3-0.5, two draws of the *same* policy differ by +0.3 or more 4-6% of the time, and a rollback
on such noise made a good run worse. With the test, noise fires one rate's test at most about
``alpha`` of the time: for n = 16, rates 0.1-0.5 and alpha = 0.001, exactly 0.001-0.11% (summed
over all binomial outcomes; 0.3-1.0% at 0.01). With both rates the union bound gives
``2·alpha``; they move together (a fallback output is never valid), and simulation gives
0.11-0.16% at alpha = 0.001 (1.3-1.6% at 0.01). Why 0.001: a run tests every update, so the
chance that noise fires at least once in a 30-update run is about 4% at 0.001 and 35% at 0.01,
and each event undoes an update and halves the learning rate: at 0.01 a seed of the default
run was rolled back three times on dips that it recovers from without them (docs/RESULTS.md,
the K=2 collapse study and the default run). A real jump to all prose, 0.2 -> 1.0 at n = 16,
is detected 99.9% of the time; a partial one, 0.1 -> 0.7, 71% (92% at 0.01; 99% at n = 32). The
normal approximation is rough for small ``n·p``; the tests check these rates by simulation.

The completion count of a metrics line is ``num_completions``, else ``group_size × problems``
when both are logged; without one the pair is recorded but not decided (no event).

Torch-free: only :mod:`math`. The rollback itself (restoring weights) is in :mod:`.guard`; this
module only decides and counts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from flowgrpo.configuration import check, finite_number, whole_number

logger = logging.getLogger(__name__)

__all__ = [
    "CollapseDecision",
    "CollapseDetector",
    "CollapseEvent",
    "CollapseRule",
    "Rollout",
    "baseline_index",
    "collapse_at",
    "collapse_decisions",
    "completions_of",
    "decide",
    "decision_at",
    "one_sided_z_test",
    "rates_of",
    "replay",
    "spans_update",
]

_EPS = 1e-9  # 0.6 - 0.3 == 0.29999999999999993: compare effect sizes with this slack


@dataclass(frozen=True)
class CollapseRule:
    """When an update counts as update → collapse (see the module docstring for the formula).

    Attributes:
        fallback_jump: minimum absolute rise of the fallback rate (0..1), the effect size.
        validity_drop: minimum absolute fall of the validity rate (0..1).
        alpha: significance of each one-sided z-test, in (0, 0.5]: the chance that sampling
            noise alone fires one rate's test.
        min_completions: completions each of the two rollouts needs for a decision (>= 2).
    """

    fallback_jump: float = 0.2
    validity_drop: float = 0.2
    alpha: float = 0.001
    min_completions: int = 16

    def __post_init__(self):
        for name in ("fallback_jump", "validity_drop"):
            value = getattr(self, name)
            check(
                finite_number(value) and 0 < value <= 1,
                f"CollapseRule.{name}",
                f"must be a number in (0, 1] (an absolute change of a rate), got {value!r}",
            )
        check(
            finite_number(self.alpha) and 0 < self.alpha <= 0.5,
            "CollapseRule.alpha",
            f"must be a significance level in (0, 0.5], e.g. 0.001, got {self.alpha!r}",
        )
        n = self.min_completions
        check(
            whole_number(n) and n >= 2,
            "CollapseRule.min_completions",
            f"must be an integer >= 2 (completions per rollout), got {n!r}",
        )

    @classmethod
    def of(cls, rule: CollapseRule | float | None = None, validity_drop: float | None = None):
        """A rule from a rule, None (the defaults) or the old ``(fallback_jump,
        validity_drop)`` numbers (then ``alpha`` and ``min_completions`` are the defaults)."""
        if isinstance(rule, CollapseRule):
            return rule
        if rule is None and validity_drop is None:
            return cls()
        jump = cls.fallback_jump if rule is None else rule
        drop = cls.validity_drop if validity_drop is None else validity_drop
        return cls(fallback_jump=jump, validity_drop=drop)


def one_sided_z_test(rate_before: float, n_before: int, rate_after: float, n_after: int):
    """(z, p) of the pooled two-proportion z-test that the rate rose from before to after.

    ``p`` is one-sided, ``P(Z >= z)``. When the pooled rate is 0 or 1 both rates are equal and
    there is nothing to test: (0.0, 0.5).
    """
    pooled = (rate_before * n_before + rate_after * n_after) / (n_before + n_after)
    variance = pooled * (1.0 - pooled) * (1.0 / n_before + 1.0 / n_after)
    if variance <= 1e-12:
        return 0.0, 0.5
    z = (rate_after - rate_before) / math.sqrt(variance)
    return z, 0.5 * math.erfc(z / math.sqrt(2.0))


@dataclass(frozen=True)
class Rollout:
    """The numbers of one rollout the rule reads: step, rates (0..1), completions (or None)."""

    step: int
    fallback: float
    validity: float
    completions: int | None


@dataclass(frozen=True)
class CollapseDecision:
    """The comparison of one rollout with the rollout before the update, and its verdict.

    Attributes:
        step / before_step: steps of the rollout after / before the update.
        n_before / n_after: their completion counts (None: not logged).
        fallback_before / fallback_after / validity_before / validity_after: the rates (0..1).
        fallback_z / fallback_p: the z-test that the fallback rate rose (None: not decided).
        validity_z / validity_p: the z-test that the validity rate fell (on 1 - validity).
        decided: both counts known and >= ``min_completions``.
        collapse: the update is an update → collapse.
        reason: the crossed thresholds with the numbers, or why not decided / not a collapse.
    """

    step: int
    before_step: int | None
    n_before: int | None
    n_after: int | None
    fallback_before: float
    fallback_after: float
    validity_before: float
    validity_after: float
    fallback_z: float | None = None
    fallback_p: float | None = None
    validity_z: float | None = None
    validity_p: float | None = None
    decided: bool = False
    collapse: bool = False
    reason: str = ""

    @property
    def p(self) -> float | None:
        """The smaller of the two p-values (None when not decided)."""
        values = [v for v in (self.fallback_p, self.validity_p) if v is not None]
        return min(values) if values else None

    def to_dict(self) -> dict:
        """A JSON-ready dict (the ``collapse`` field of a metrics line; ``p`` included)."""
        return {**asdict(self), "p": self.p}


CollapseEvent = CollapseDecision
"""A decision with ``collapse`` true (the name the loop, the check and reports use)."""


def _test(before: float, after: float, n1: int, n2: int, effect: float, rule: CollapseRule):
    z, p = one_sided_z_test(before, n1, after, n2)
    return z, p, p <= rule.alpha and after - before >= effect - _EPS


def decide(before: Rollout, after: Rollout, rule: CollapseRule | None = None) -> CollapseDecision:
    """Whether the update between rollouts ``before`` and ``after`` made it collapse."""
    rule = rule or CollapseRule()
    base = (after.step, before.step, before.completions, after.completions)
    rates = (before.fallback, after.fallback, before.validity, after.validity)
    n1, n2 = before.completions, after.completions
    if n1 is None or n2 is None:
        why = "not decided: completion count not logged (num_completions)"
        return CollapseDecision(*base, *rates, reason=why)
    if min(n1, n2) < rule.min_completions:
        why = f"not decided: {min(n1, n2)} completions < min_completions {rule.min_completions}"
        return CollapseDecision(*base, *rates, reason=why)
    fz, fp, f_hit = _test(before.fallback, after.fallback, n1, n2, rule.fallback_jump, rule)
    vz, vp, v_hit = _test(1 - before.validity, 1 - after.validity, n1, n2, rule.validity_drop, rule)
    reasons = []
    if f_hit:
        reasons.append(
            f"fallback rate {before.fallback:.3f} -> {after.fallback:.3f} "
            f"(+{after.fallback - before.fallback:.3f}, z={fz:.2f}, p={fp:.2g})"
        )
    if v_hit:
        reasons.append(
            f"validity rate {before.validity:.3f} -> {after.validity:.3f} "
            f"(-{before.validity - after.validity:.3f}, z={vz:.2f}, p={vp:.2g})"
        )
    why = "; ".join(reasons) or f"no significant change (p={min(fp, vp):.2g})"
    collapse = bool(reasons)
    return CollapseDecision(*base, *rates, fz, fp, vz, vp, True, collapse, why)


def rates_of(line: Mapping) -> tuple[float, float] | None:
    """(fallback_rate, validity_rate) of a metrics line, or None when either is missing/NaN or
    outside [0, 1]."""
    values = []
    for key in ("fallback_rate", "validity_rate"):
        value = line.get(key)
        if not finite_number(value) or not 0 <= value <= 1:
            return None
        values.append(float(value))
    return values[0], values[1]


def _count(value) -> int | None:
    # a mean over processes can be fractional: round down (a smaller n is the cautious side)
    if not finite_number(value) or value < 1:
        return None
    return int(value)


def completions_of(line: Mapping) -> int | None:
    """Completions of a line's rollout: ``num_completions``, else ``group_size × problems``,
    else None. A fractional value (a mean over processes) is rounded down; < 1 is None."""
    n = _count(line.get("num_completions"))
    if n is not None:
        return n
    k, b = _count(line.get("group_size")), _count(line.get("problems"))
    return k * b if k is not None and b is not None else None


def _rollout_of(line: Mapping, index: int) -> Rollout | None:
    rates = rates_of(line)
    if rates is None:
        return None
    return Rollout(line.get("step", index), *rates, completions_of(line))


def baseline_index(history: Sequence[Mapping], end: int) -> int | None:
    """Index of the rollout that ``history[end]`` is compared with, or None (no baseline).

    That is the closest earlier line that has both rates and was not rolled back: after a
    rollback the weights are those that made the rollout before the rolled-back one. Gives the
    same pairs as :func:`replay`.
    """
    j = end - 1
    while j >= 0:
        line = history[j]
        if rates_of(line) is not None and not line.get("rollback"):
            return j
        j -= 1
    return None


def spans_update(history: Sequence[Mapping], index: int) -> bool:
    """Whether an optimizer update happened between ``history[index]``'s rollout and the one
    it is compared with: False when the previous line says ``skipped_update`` (the step trained
    on nothing, e.g. dynamic sampling skipped it, or it was rolled back and so trained on
    nothing), or for the first line."""
    return index > 0 and not history[index - 1].get("skipped_update")


def decision_at(
    history: Sequence[Mapping], index: int, rule: CollapseRule | float | None = None
) -> CollapseDecision | None:
    """The decision for ``history[index]``, or None when there is nothing to compare: the line
    has no rates, no baseline (:func:`baseline_index`) or no update since the baseline's
    weights (:func:`spans_update`)."""
    after = _rollout_of(history[index], index)
    j = baseline_index(history, index)
    if after is None or j is None or not spans_update(history, index):
        return None
    return decide(_rollout_of(history[j], j), after, CollapseRule.of(rule))


def collapse_at(
    history: Sequence[Mapping],
    index: int,
    rule: CollapseRule | float | None = None,
    validity_drop: float | None = None,
) -> CollapseDecision | None:
    """The update -> collapse event ``history[index]`` shows, or None.

    ``rule`` is a :class:`CollapseRule` (``HealthConfig.collapse_rule``); the old form
    ``collapse_at(history, index, fallback_jump, validity_drop)`` still works with the default
    ``alpha`` and ``min_completions``. Gives the same events as :func:`replay`; the loop calls
    it with ``[*history, metrics]`` before deciding on a rollback.
    """
    decision = decision_at(history, index, CollapseRule.of(rule, validity_drop))
    return decision if decision is not None and decision.collapse else None


@dataclass
class CollapseDetector:
    """Compares each rollout with the previous one and counts collapses per update.

    Call :meth:`observe` once per rollout, in order. Every rollout after the first counts as one
    update (pass ``after_update=False`` when no optimizer step happened in between, e.g. a step
    skipped by dynamic sampling). After rolling the weights back because of an event, call
    :meth:`restore_baseline` so the next rollout is compared with the one the restored weights
    made. Rollouts with a missing or NaN rate are ignored (no update counted, baseline kept).

    Attributes:
        rule: the :class:`CollapseRule`.
        log_events: log each event at WARNING (off when replaying a finished run).
        updates: compared pairs across an update; decided: those with enough completions;
        collapses: events. decisions: every compared pair; events: the collapses, in order.
    """

    rule: CollapseRule = field(default_factory=CollapseRule)
    log_events: bool = True
    updates: int = 0
    decided: int = 0
    collapses: int = 0
    decisions: list[CollapseDecision] = field(default_factory=list)
    events: list[CollapseDecision] = field(default_factory=list)
    _last: Rollout | None = field(default=None, repr=False)
    _before_last: Rollout | None = field(default=None, repr=False)
    _restorable: bool = field(default=False, repr=False)

    def __post_init__(self):
        self.rule = CollapseRule.of(self.rule)

    @property
    def collapse_rate(self) -> float:
        """collapses / decided updates; 0.0 before the first decided update."""
        return self.collapses / self.decided if self.decided else 0.0

    def observe(
        self,
        step: int,
        fallback_rate: float | None,
        validity_rate: float | None,
        *,
        completions: int | None = None,
        after_update: bool = True,
    ) -> CollapseDecision | None:
        """Record one rollout (rates in [0, 1], its completion count); the event, if any."""
        rates = rates_of({"fallback_rate": fallback_rate, "validity_rate": validity_rate})
        if rates is None:
            logger.debug("step %s: no fallback/validity rate; not compared", step)
            self._restorable = False
            return None
        rollout = Rollout(step, *rates, _count(completions))
        previous = self._last
        self._before_last, self._last, self._restorable = previous, rollout, True
        if previous is None or not after_update:
            return None
        decision = decide(previous, rollout, self.rule)
        self.updates += 1
        self.decided += decision.decided
        self.decisions.append(decision)
        if not decision.collapse:
            return None
        self.collapses += 1
        self.events.append(decision)
        if self.log_events:
            logger.warning("update -> collapse at step %s: %s", step, decision.reason)
        return decision

    def restore_baseline(self) -> None:
        """After a rollback: compare the next rollout with the one before the last observed.

        A no-op when the last observed rollout was ignored or already undone.
        """
        if self._restorable:
            self._last, self._before_last, self._restorable = self._before_last, None, False

    def summary(self) -> dict:
        """updates, decided, collapses and collapse_rate as a JSON-ready dict."""
        return {k: getattr(self, k) for k in ("updates", "decided", "collapses", "collapse_rate")}


def replay(
    history: Sequence[Mapping],
    rule: CollapseRule | float | None = None,
    validity_drop: float | None = None,
) -> CollapseDetector:
    """Run a detector over a metrics history (lines with ``step``, rates, ``num_completions``,
    ``rollback``, ``skipped_update``); pure: nothing is logged.

    A line with ``rollback: true`` means the weights were restored after that rollout, so the
    next line is compared with that line's own baseline. A line after one with
    ``skipped_update: true`` is not counted as an update (see :func:`spans_update`); it only
    becomes the new baseline. Every other compared pair counts as one update and is in
    ``.decisions`` with its z and p. ``rule`` as in :func:`collapse_at`.
    """
    detector = CollapseDetector(CollapseRule.of(rule, validity_drop), log_events=False)
    for index, line in enumerate(history):
        detector.observe(
            line.get("step", index),
            line.get("fallback_rate"),
            line.get("validity_rate"),
            completions=completions_of(line),
            after_update=index == 0 or spans_update(history, index),
        )
        if line.get("rollback"):
            detector.restore_baseline()
    return detector


def collapse_decisions(
    history: Sequence[Mapping], rule: CollapseRule | float | None = None
) -> list[CollapseDecision]:
    """Every collapse decision of a metrics history (e.g. a run's metrics.jsonl, read with
    ``reports.diagnose.read_jsonl``), in order, each with its z and p: the data to measure the
    rule's false-positive and detection rates on study runs."""
    return replay(history, rule).decisions
