"""The update → collapse detector: did an optimizer update turn DSL output into prose?

Each rollout is compared with the rollout before it, i.e. across the update between them. A rise
of the fallback rate by at least ``fallback_jump`` (absolute) or a fall of the validity rate by
at least ``validity_drop`` is one "update → collapse" event. ``collapse_rate`` = collapses /
updates is the number the original Qwen2.5-7B run only found by parsing logs (37 of 38 updates,
97.4%, with group size K=2).

Torch-free. The rollback itself (restoring weights) is in :mod:`trainer.guard`; this module only
decides and counts. NOT handled here: noise. With a rollout of 8 completions the rates move in
steps of 1/8, so a 0.3 jump is 3 outputs; small rollouts give false events.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

logger = logging.getLogger(__name__)

_EPS = 1e-9  # 0.6 - 0.3 == 0.29999999999999993: compare thresholds with this slack


@dataclass(frozen=True)
class CollapseEvent:
    """One update after which the fallback rate jumped or the validity rate dropped.

    Attributes:
        step: the step of the rollout that shows the collapse (made after the update).
        fallback_before / fallback_after: fallback rates (0..1) of the rollouts before/after.
        validity_before / validity_after: validity rates (0..1) of the same rollouts.
        reason: the crossed threshold(s), in words with the numbers.
        before_step: the step of the rollout before the update (the baseline), when known.
    """

    step: int
    fallback_before: float
    fallback_after: float
    validity_before: float
    validity_after: float
    reason: str
    before_step: int | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict (the ``collapse`` field of a metrics line)."""
        return asdict(self)


def compare_rollouts(
    fallback_before: float,
    validity_before: float,
    fallback_after: float,
    validity_after: float,
    fallback_jump: float = 0.3,
    validity_drop: float = 0.3,
) -> str | None:
    """Why the second rollout is a collapse relative to the first, or None when it is not.

    Rates are shares in [0, 1]; thresholds are absolute differences (0.3 = 30 points).
    """
    reasons = []
    rise = fallback_after - fallback_before
    if rise >= fallback_jump - _EPS:
        reasons.append(
            f"fallback rate {fallback_before:.3f} -> {fallback_after:.3f} "
            f"(+{rise:.3f} >= {fallback_jump:g})"
        )
    drop = validity_before - validity_after
    if drop >= validity_drop - _EPS:
        reasons.append(
            f"validity rate {validity_before:.3f} -> {validity_after:.3f} "
            f"(-{drop:.3f} >= {validity_drop:g})"
        )
    return "; ".join(reasons) or None


def rates_of(line: Mapping) -> tuple[float, float] | None:
    """(fallback_rate, validity_rate) of a metrics line, or None when either is missing/NaN."""
    values = []
    for key in ("fallback_rate", "validity_rate"):
        value = line.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return None
        values.append(float(value))
    return values[0], values[1]


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


def _check_threshold(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(
            f"CollapseDetector {name} must be a number in (0, 1] (an absolute change of a "
            f"rate), got {value!r}; the default is 0.3"
        )


@dataclass
class CollapseDetector:
    """Compares each rollout with the previous one and counts collapses per update.

    Call :meth:`observe` once per rollout, in order. Every rollout after the first counts as one
    update (pass ``after_update=False`` when no optimizer step happened in between, e.g. a step
    skipped by dynamic sampling). After rolling the weights back because of an event, call
    :meth:`restore_baseline` so the next rollout is compared with the one the restored weights
    made. Rollouts with a missing or NaN rate are ignored (no update counted, baseline kept).

    Attributes:
        fallback_jump: absolute rise of the fallback rate that counts as a collapse.
        validity_drop: absolute fall of the validity rate that counts as a collapse.
        log_events: log each event at WARNING (off when replaying a finished run).
        updates / collapses: counts so far; events: every event, in order.
    """

    fallback_jump: float = 0.3
    validity_drop: float = 0.3
    log_events: bool = True
    updates: int = 0
    collapses: int = 0
    events: list[CollapseEvent] = field(default_factory=list)
    _last: tuple[int, float, float] | None = field(default=None, repr=False)
    _before_last: tuple[int, float, float] | None = field(default=None, repr=False)
    _restorable: bool = field(default=False, repr=False)

    def __post_init__(self):
        _check_threshold("fallback_jump", self.fallback_jump)
        _check_threshold("validity_drop", self.validity_drop)

    @property
    def collapse_rate(self) -> float:
        """collapses / updates; 0.0 before the first update."""
        return self.collapses / self.updates if self.updates else 0.0

    def observe(
        self,
        step: int,
        fallback_rate: float | None,
        validity_rate: float | None,
        *,
        after_update: bool = True,
    ) -> CollapseEvent | None:
        """Record one rollout's rates (shares in [0, 1]); the event when it shows a collapse."""
        rates = rates_of({"fallback_rate": fallback_rate, "validity_rate": validity_rate})
        if rates is None:
            logger.debug("step %s: no fallback/validity rate; not compared", step)
            self._restorable = False
            return None
        previous = self._last
        self._before_last, self._last, self._restorable = previous, (step, *rates), True
        if previous is None or not after_update:
            return None
        self.updates += 1
        before_step, fallback_before, validity_before = previous
        reason = compare_rollouts(
            fallback_before, validity_before, *rates, self.fallback_jump, self.validity_drop
        )
        if reason is None:
            return None
        event = CollapseEvent(
            step, fallback_before, rates[0], validity_before, rates[1], reason, before_step
        )
        self.collapses += 1
        self.events.append(event)
        if self.log_events:
            logger.warning("update -> collapse at step %s: %s", step, reason)
        return event

    def restore_baseline(self) -> None:
        """After a rollback: compare the next rollout with the one before the last observed.

        A no-op when the last observed rollout was ignored or already undone.
        """
        if self._restorable:
            self._last, self._before_last, self._restorable = self._before_last, None, False

    def summary(self) -> dict:
        """updates, collapses and collapse_rate as a JSON-ready dict."""
        return {
            "updates": self.updates,
            "collapses": self.collapses,
            "collapse_rate": self.collapse_rate,
        }


def spans_update(history: Sequence[Mapping], index: int) -> bool:
    """Whether an optimizer update happened between ``history[index]``'s rollout and the one
    it is compared with: False when the previous line says ``skipped_update`` (the step trained
    on nothing, e.g. dynamic sampling skipped it, or it was rolled back and so trained on
    nothing), or for the first line."""
    return index > 0 and not history[index - 1].get("skipped_update")


def collapse_at(
    history: Sequence[Mapping], index: int, fallback_jump: float = 0.3, validity_drop: float = 0.3
) -> CollapseEvent | None:
    """The update -> collapse event ``history[index]`` shows, or None.

    None when the line has no rates, has no baseline (:func:`baseline_index`), no update
    happened since the baseline's weights (:func:`spans_update`), or the rates did not move
    past the thresholds. Gives the same events as :func:`replay`; the loop can call it with
    ``[*history, metrics]`` before deciding on a rollback.
    """
    after = rates_of(history[index])
    j = baseline_index(history, index)
    if after is None or j is None or not spans_update(history, index):
        return None
    before = rates_of(history[j])
    reason = compare_rollouts(*before, *after, fallback_jump, validity_drop)
    if reason is None:
        return None
    step = history[index].get("step", index)
    return CollapseEvent(
        step, before[0], after[0], before[1], after[1], reason, history[j].get("step", j)
    )


def replay(
    history: Sequence[Mapping], fallback_jump: float = 0.3, validity_drop: float = 0.3
) -> CollapseDetector:
    """Run a detector over a metrics history (lines with ``step``, rates, ``rollback``,
    ``skipped_update``).

    A line with ``rollback: true`` means the weights were restored after that rollout, so the
    next line is compared with that line's own baseline. A line after one with
    ``skipped_update: true`` is not counted as an update (see :func:`spans_update`); it only
    becomes the new baseline. Every other compared pair counts as one update.
    """
    detector = CollapseDetector(fallback_jump, validity_drop, log_events=False)
    for index, line in enumerate(history):
        step = line.get("step", index)
        rates = (line.get("fallback_rate"), line.get("validity_rate"))
        detector.observe(step, *rates, after_update=index == 0 or spans_update(history, index))
        if line.get("rollback"):
            detector.restore_baseline()
    return detector
