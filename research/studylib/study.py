"""Statistics of multi-seed studies (issue 13): intervals over seeds, when a run collapsed, and
the collapse rule's false-positive and detection rates measured on study runs.

Used by ``research/reproduce_collapse.py`` and ``research/learn_known_optimum.py``; torch-free.

* :func:`wilson_interval` — the 95% Wilson score interval of a proportion (Wilson 1927,
  doi:10.1080/01621459.1927.10502953): unlike the normal ("Wald") interval it stays inside
  [0, 1] and is not empty at 0 or n successes, which matters for collapse rates near 0 or 1.
* :func:`mean_interval` — mean and Student-t 95% half-width over seeds (runs are independent).
* :func:`collapse_onset` — whether a run collapsed, judged from where it *ended*, not from the
  rule under test: the fallback rate over the last ``width`` rollouts is at least ``rise``
  above that of the first rollout, drawn before any update (or the validity rate that much
  below). This ground truth is what the guard's detection and false-positive rates are
  measured against.
* :func:`guard_rates` — for a :class:`CollapseRule`, on runs with that truth: how often it
  fires on runs (and updates) that did not collapse, and how many collapsed runs it flags.
* :func:`alert_steps` — the steps at which each health alert fired in a run's metrics lines.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flowgrpo.trainer.monitoring.collapse import CollapseRule, collapse_decisions

__all__ = [
    "ALERTS",
    "OLD_RULE",
    "GuardRates",
    "alert_steps",
    "collapse_onset",
    "guard_rates",
    "mean_interval",
    "series",
    "wilson_interval",
]

# Student t quantiles t(0.975, df), df = 1..30 (any statistics table); beyond 30, the normal 1.96.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

OLD_RULE = CollapseRule(fallback_jump=0.3, validity_drop=1.0, alpha=0.5, min_completions=2)
"""The round-1 guard as a CollapseRule: a fallback rise of 0.3 between two rollouts, whatever
their size. ``alpha = 0.5`` accepts every rise (a positive z has p < 0.5) and a validity drop
of 1.0 never happens in practice, so only the fixed jump decides."""


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% for z = 1.96) of ``successes`` out of ``n``; (0, 1) when
    ``n`` is 0 (nothing is known)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, 95% half-width) of independent values, Student t; NaNs are dropped. The half-width
    is NaN with fewer than two values (no spread to estimate); the mean is NaN with none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return float("nan"), float("nan")
    if len(kept) < 2:
        return kept[0], float("nan")
    df = len(kept) - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    return statistics.mean(kept), t * statistics.stdev(kept) / math.sqrt(len(kept))


def series(history: Sequence[Mapping], key: str) -> list[float]:
    """The values of ``key`` over a metrics history, NaN where a line lacks it."""
    out = []
    for line in history:
        value = line.get(key)
        out.append(float(value) if isinstance(value, (int, float)) else float("nan"))
    return out


def collapse_onset(history: Sequence[Mapping], rise: float = 0.3, width: int = 3) -> int | None:
    """The step at which a run collapsed, or None when it did not.

    Collapsed: the mean fallback rate of the last ``width`` rollouts is at least ``rise`` above
    the first rollout's, or the mean validity rate that much below. The start is the first
    rollout alone because it is the only one drawn before any update: a run that collapses at
    step 2 would otherwise carry its collapse into its own baseline. The onset is the first
    step whose fallback rate or validity rate has moved that far from the start (a run that
    first writes broken DSL and only later prose collapsed when its validity fell).
    """
    if len(history) < width + 1:
        return None
    fallback, validity = series(history, "fallback_rate"), series(history, "validity_rate")
    steps = [int(line.get("step", i + 1)) for i, line in enumerate(history)]
    start_f, start_v = fallback[0], validity[0]
    rose = statistics.mean(fallback[-width:]) - start_f >= rise
    fell = start_v - statistics.mean(validity[-width:]) >= rise
    if not (rose or fell):
        return None
    moved = [f - start_f >= rise or start_v - v >= rise for f, v in zip(fallback, validity)]
    return steps[moved.index(True)]


@dataclass
class GuardRates:
    """A rule's record on study runs (counts; the rates are properties).

    Attributes:
        ok_runs / ok_runs_flagged: runs that did not collapse, and those the rule fired on.
        ok_updates / ok_updates_flagged: decided updates of those runs, and those it fired on.
        collapsed_runs / collapsed_detected: runs that collapsed, and those it fired on.
        delays: for each detected run, first firing step minus the collapse onset (steps).
    """

    ok_runs: int = 0
    ok_runs_flagged: int = 0
    ok_updates: int = 0
    ok_updates_flagged: int = 0
    collapsed_runs: int = 0
    collapsed_detected: int = 0
    delays: list[int] = field(default_factory=list)

    @property
    def run_false_positive_rate(self) -> float:
        return self.ok_runs_flagged / self.ok_runs if self.ok_runs else float("nan")

    @property
    def update_false_positive_rate(self) -> float:
        return self.ok_updates_flagged / self.ok_updates if self.ok_updates else float("nan")

    @property
    def detection_rate(self) -> float:
        return (
            self.collapsed_detected / self.collapsed_runs if self.collapsed_runs else float("nan")
        )


def guard_rates(
    histories: Sequence[Sequence[Mapping]], rule: CollapseRule, rise: float = 0.3, width: int = 3
) -> GuardRates:
    """Replay ``rule`` over each run's metrics history (``collapse_decisions``) and count its
    firings against the :func:`collapse_onset` truth (``rise``, ``width``)."""
    rates = GuardRates()
    for history in histories:
        decisions = [d for d in collapse_decisions(history, rule) if d.decided]
        fired = [d.step for d in decisions if d.collapse]
        onset = collapse_onset(history, rise, width)
        if onset is None:
            rates.ok_runs += 1
            rates.ok_runs_flagged += bool(fired)
            rates.ok_updates += len(decisions)
            rates.ok_updates_flagged += len(fired)
        else:
            rates.collapsed_runs += 1
            if fired:
                rates.collapsed_detected += 1
                rates.delays.append(fired[0] - onset)
    return rates


ALERTS = ("deadlock", "entropy_low", "zero_grad", "collapse", "step_time_collapse")
# "collapse" is the seed system's failure: the policy writing prose (the z-test after an update,
# or a fallback rate held high); a step that got faster (step_time_collapse) is kept apart
ALERT_OF = {
    "deadlock": "deadlock",
    "entropy_low": "entropy_low",
    "zero_grad": "zero_grad",
    "update_collapse": "collapse",
    "fallback_high": "collapse",
    "step_time_collapse": "step_time_collapse",
}


def alert_steps(history: list[dict]) -> dict:
    """Per alert name of :data:`ALERTS`, the steps at which it fired; and rollbacks."""
    fired: dict = {name: [] for name in ALERTS}
    for line in history:
        for alert in line.get("alerts") or []:
            name = alert.get("check") or alert.get("name") if isinstance(alert, dict) else alert
            key = ALERT_OF.get(str(name))
            if key is not None and line.get("step") not in fired[key]:
                fired[key].append(line.get("step"))
    fired["rollback"] = [line.get("step") for line in history if line.get("rollback")]
    return fired
