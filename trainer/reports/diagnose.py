"""``flowgrpo diagnose RUN_DIR``: a health report and plots from a run's metrics.jsonl.

Works on a finished run and on one still being written (a torn last line is skipped). The
checks of :mod:`trainer.monitoring.health` are re-run over the history with the run's own
thresholds (the ``health`` section of ``RUN_DIR/config.yaml`` when present, else the defaults),
and the update → collapse rate is recomputed from the fallback/validity series, so the report
does not depend on what the run itself logged. Library code: no printing; the CLI prints
:func:`format_diagnose`. The plots are drawn by :func:`.plots.plot_run` (re-exported here).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flowgrpo.configuration import load_yaml
from flowgrpo.files import read_text
from flowgrpo.trainer.monitoring.collapse import CollapseDecision, replay
from flowgrpo.trainer.monitoring.health import (
    Alert,
    HealthConfig,
    check_info,
    check_names,
    get_check,
)
from flowgrpo.trainer.reports.plots import PLOTS_DIR, plot_run

__all__ = [
    "CONFIG_FILE",
    "METRICS_FILE",
    "PLOTS_DIR",
    "SAMPLES_FILE",
    "CheckResult",
    "DiagnoseReport",
    "diagnose",
    "diagnose_to_json",
    "format_diagnose",
    "format_steps",
    "load_health_config",
    "plot_run",
    "read_jsonl",
]

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
CONFIG_FILE = "config.yaml"


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON objects of a JSONL file, one per non-blank line.

    A last line that is not valid JSON is skipped with a warning (a run still writing it); an
    invalid line anywhere else, or a line that is not a JSON object, raises ValueError with the
    file and line number. Not handled: files too large for memory (the whole file is read).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file. A flowgrpo run directory holds {METRICS_FILE} (one line per "
            f"step) and {SAMPLES_FILE}; pass the run directory or an existing JSONL file"
        )
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    numbered = [(n, text) for n, text in enumerate(lines, 1) if text.strip()]
    rows = []
    for position, (number, text) in enumerate(numbered):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            if position == len(numbered) - 1:
                logger.warning("%s: skipping the incomplete last line %d", path, number)
                break
            raise ValueError(
                f"{path}, line {number}: not valid JSON ({exc.msg}); only the last line of a "
                "file may be incomplete. Fix or remove that line"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(
                f"{path}, line {number}: expected a JSON object per line, got {type(row).__name__}"
            )
        rows.append(row)
    return rows


class _Prefix(Sequence):
    """``history[:end]`` without copying (the checks only index from the end)."""

    def __init__(self, history: Sequence[Mapping], end: int):
        self._history, self._end = history, end

    def __len__(self) -> int:
        return self._end

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._end))]
        if index < 0:
            index += self._end
        if not 0 <= index < self._end:
            raise IndexError(index)
        return self._history[index]


@dataclass(frozen=True)
class CheckResult:
    """One item of the checklist.

    Attributes:
        name / summary: the check and its condition.
        evaluated: False when none of the metrics keys it reads was ever logged.
        steps: the steps where it fired (re-computed), in order.
        first: the first alert, for its message and advice.
        logged: how many of the run's own metrics lines carry this alert.
    """

    name: str
    summary: str
    evaluated: bool
    steps: tuple[int, ...] = ()
    first: Alert | None = None
    logged: int = 0

    @property
    def status(self) -> str:
        """ALERT, PASS, or N/A (not logged)."""
        if self.steps:
            return "ALERT"
        return "PASS" if self.evaluated else "N/A"


@dataclass(frozen=True)
class DiagnoseReport:
    """What :func:`diagnose` found. ``history`` is the metrics read (for :func:`plot_run`).

    ``updates`` counts rollouts compared across an update, ``decided`` those with enough
    completions for the collapse rule, ``collapse_rate`` = collapses / decided;
    ``collapse_decisions`` holds every compared pair with its z and p (:mod:`.collapse`).
    """

    run_dir: str
    lines: int
    first_step: int | None
    last_step: int | None
    config: HealthConfig
    config_source: str
    checks: tuple[CheckResult, ...]
    updates: int
    decided: int
    collapses: int
    collapse_rate: float
    collapse_events: tuple[CollapseDecision, ...]
    collapse_decisions: tuple[CollapseDecision, ...]
    logged_collapses: int
    rollbacks: int
    rollback_steps: tuple[int, ...]
    first_deadlock_step: int | None
    samples: int | None
    history: tuple[dict, ...] = field(default=(), repr=False)

    @property
    def alerted(self) -> tuple[str, ...]:
        """Names of the checks that fired at least once."""
        return tuple(c.name for c in self.checks if c.steps)


def load_health_config(run_dir: str | Path) -> tuple[HealthConfig, str]:
    """(config, where it came from): the ``health`` section of config.yaml, else defaults."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return HealthConfig(), "defaults (no config.yaml)"
    data = load_yaml(read_text(path), f"{path} (fix or remove the file)") or {}
    section = data.get("health") if isinstance(data, Mapping) else None
    if section is None:
        return HealthConfig(), "defaults (config.yaml has no health section)"
    try:
        return HealthConfig.from_dict(section), f"{CONFIG_FILE} (health section)"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _steps_of(history: Sequence[Mapping], flag) -> tuple[int, ...]:
    return tuple(line.get("step", i) for i, line in enumerate(history) if flag(line))


def _check_numbers(history: Sequence[Mapping], path: Path) -> None:
    """``ValueError`` naming the line and key where a value the checks read (or the step) is
    not a number: a check passes over what it cannot read, so a file of strings would pass."""
    keys = {"step"}.union(*(check_info(name)[0] for name in check_names()))
    for number, line in enumerate(history, 1):
        for key in sorted(keys & line.keys()):
            value = line[key]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                raise ValueError(
                    f"{path}, row {number}: {key} is {value!r} (a {type(value).__name__}), not a "
                    "number; the health checks read numbers: this file was not written by a run "
                    "as it is (fix or remove that row)"
                )


def _run_checks_over(history: Sequence[Mapping], config: HealthConfig) -> tuple[CheckResult, ...]:
    logged_keys = set().union(*(line.keys() for line in history)) if history else set()
    results = []
    for name in check_names():
        keys, summary = check_info(name)
        check = get_check(name)
        fired = []
        for end in range(1, len(history) + 1):
            alert = check(_Prefix(history, end), config)
            if alert is not None:
                fired.append(alert)
        logged = sum(
            1
            for line in history
            if any(isinstance(a, Mapping) and a.get("name") == name for a in _alerts(line))
        )
        results.append(
            CheckResult(
                name,
                summary,
                evaluated=not keys or bool(set(keys) & logged_keys),
                steps=tuple(a.step for a in fired),
                first=fired[0] if fired else None,
                logged=logged,
            )
        )
    return tuple(results)


def _alerts(line: Mapping) -> list:
    alerts = line.get("alerts")
    return alerts if isinstance(alerts, list) else []


def diagnose(run_dir: str | Path) -> DiagnoseReport:
    """Read RUN_DIR/metrics.jsonl (and count samples.jsonl) and check the run's health."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir}: no such directory; pass a run directory (it holds {METRICS_FILE})"
        )
    history = read_jsonl(run_dir / METRICS_FILE)
    _check_numbers(history, run_dir / METRICS_FILE)
    config, source = load_health_config(run_dir)
    checks = _run_checks_over(history, config)
    detector = replay(history, config.collapse_rule)
    deadlock = next(c for c in checks if c.name == "deadlock")
    first_deadlock = deadlock.first.values.get("since_step") if deadlock.first else None
    samples_path = run_dir / SAMPLES_FILE
    steps = [line.get("step", i) for i, line in enumerate(history)]
    rollback_steps = _steps_of(history, lambda line: bool(line.get("rollback")))
    return DiagnoseReport(
        run_dir=str(run_dir),
        lines=len(history),
        first_step=steps[0] if steps else None,
        last_step=steps[-1] if steps else None,
        config=config,
        config_source=source,
        checks=checks,
        updates=detector.updates,
        decided=detector.decided,
        collapses=detector.collapses,
        collapse_rate=detector.collapse_rate,
        collapse_events=tuple(detector.events),
        collapse_decisions=tuple(detector.decisions),
        logged_collapses=sum(1 for line in history if isinstance(line.get("collapse"), Mapping)),
        rollbacks=len(rollback_steps),
        rollback_steps=rollback_steps,
        first_deadlock_step=first_deadlock,
        samples=len(read_jsonl(samples_path)) if samples_path.is_file() else None,
        history=tuple(history),
    )


# --------------------------------------------------------------------------- rendering


def format_steps(steps: Sequence[int], limit: int = 12) -> str:
    """``1-3, 7, 9-12``: runs of consecutive steps joined; more than ``limit`` runs cut."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and isinstance(step, int) and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(parts) > limit:
        parts = [*parts[:limit], f"... ({len(parts) - limit} more)"]
    return ", ".join(parts)


def format_diagnose(report: DiagnoseReport) -> str:
    """The health report as console text: the checklist (PASS / ALERT / N/A) and the totals."""
    span = f"steps {report.first_step}..{report.last_step}" if report.lines else "no steps logged"
    out = [
        f"Health report for {report.run_dir}",
        f"  {report.lines} metrics lines, {span}; thresholds: {report.config_source}",
        "",
        "Checklist:",
        *_format_checks(report),
        "",
        *_format_collapse(report),
    ]
    rollbacks = f"Rollbacks: {report.rollbacks}"
    if report.rollback_steps:
        rollbacks += f" at steps {format_steps(report.rollback_steps)}"
    out.append(rollbacks)
    deadlock = report.first_deadlock_step
    out.append(f"First deadlock: {'none' if deadlock is None else f'step {deadlock}'}")
    if report.samples is not None:
        out.append(f"{SAMPLES_FILE}: {report.samples} rows (flowgrpo analyze for the details)")
    verdict = ", ".join(report.alerted) if report.alerted else "no alerts"
    out.append(f"Verdict: {verdict}")
    return "\n".join(out)


def _format_checks(report: DiagnoseReport) -> list[str]:
    width = max(len(c.name) for c in report.checks)
    run_logged_alerts = any(c.logged for c in report.checks)
    pad = " " * 9
    out = []
    for check in report.checks:
        head = f"  {check.status:<5}  {check.name:<{width}}  {check.summary}"
        if check.status == "N/A":
            keys, _ = check_info(check.name)
            out.append(f"{head}  (not logged: {', '.join(keys)})")
            continue
        out.append(head)
        if check.steps:
            out.append(f"{pad}fired at {len(check.steps)} step(s): {format_steps(check.steps)}")
            out.append(f"{pad}first: {check.first.message}")
            out.append(f"{pad}try: {check.first.advice}")
        if run_logged_alerts and check.logged != len(check.steps):
            out.append(f"{pad}(the run itself logged it at {check.logged} step(s))")
    return out


def _format_collapse(report: DiagnoseReport) -> list[str]:
    rule = report.config.collapse_rule
    out = [
        f"Update -> collapse: {report.collapses} of {report.decided} decided updates "
        f"({report.collapse_rate:.1%}); rule: one-sided z-test p <= {rule.alpha:g} and fallback "
        f"+{rule.fallback_jump:g} / validity -{rule.validity_drop:g}, >= "
        f"{rule.min_completions} completions per rollout; guard: {report.config.guard}"
    ]
    undecided = report.updates - report.decided
    if undecided:
        out.append(
            f"  {undecided} of {report.updates} updates not decided (completion count not "
            "logged, or below health.collapse_min_completions)"
        )
    if report.collapse_events:
        steps = [e.step for e in report.collapse_events]
        out.append(f"  events at steps: {format_steps(steps)}")
    if report.logged_collapses != report.collapses and any(
        "collapse" in line for line in report.history
    ):
        out.append(f"  (the run itself logged {report.logged_collapses} collapse event(s))")
    return out


def diagnose_to_json(report: DiagnoseReport) -> dict:
    """The report as a JSON-ready dict (the history itself is left out)."""
    return {
        "run_dir": report.run_dir,
        "lines": report.lines,
        "first_step": report.first_step,
        "last_step": report.last_step,
        "config": report.config.to_dict(),
        "config_source": report.config_source,
        "checks": [
            {
                "name": c.name,
                "status": c.status,
                "summary": c.summary,
                "steps": list(c.steps),
                "first": c.first.to_dict() if c.first else None,
                "logged": c.logged,
            }
            for c in report.checks
        ],
        "updates": report.updates,
        "decided": report.decided,
        "collapses": report.collapses,
        "collapse_rate": report.collapse_rate,
        "collapse_events": [e.to_dict() for e in report.collapse_events],
        "collapse_decisions": [d.to_dict() for d in report.collapse_decisions],
        "logged_collapses": report.logged_collapses,
        "rollbacks": report.rollbacks,
        "rollback_steps": list(report.rollback_steps),
        "first_deadlock_step": report.first_deadlock_step,
        "samples": report.samples,
    }
