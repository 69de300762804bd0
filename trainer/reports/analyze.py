"""``flowgrpo analyze``: the DSL diversity report over model outputs in any JSONL file.

Each row's text field (``completion`` by default) is run through :func:`dsl.extract` and
:func:`dsl.validate` again: precomputed fields such as ``canonical`` are ignored, so the report
is the same for flowgrpo's samples.jsonl and for logs of other systems. A run's samples are
validated as its reward validated them (:func:`run_validation`: its ``operators:`` and plugins,
its executor's call budget with votes and retries counted); other files with the defaults.
Every per-workflow number (top workflows, operators, structures) is a share of the *valid*
workflows; the valid / invalid / fallback counts are shares of all outputs.

Torch-free. Not handled: workflows nested in other fields, or several workflows in one text (the
one :func:`dsl.extract` prefers is used).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from flowgrpo.configuration import whole_number
from flowgrpo.dsl import (
    DEFAULT_STATIC_LIMITS,
    STRUCTURES,
    OperatorTable,
    StaticLimits,
    default_table,
    extract,
    validate,
)
from flowgrpo.trainer.reports import plots
from flowgrpo.trainer.reports.diagnose import CONFIG_FILE

DEFAULTS = "the default operators and call count (no run config)"

OCCURRENCE_KINDS = ("chain", "conditional", "loop", "parallel", "instruction")
AUTO_WINDOWS = 10  # rows without steps and no window given: this many windows


@dataclass(frozen=True)
class Validation:
    """What outputs are validated against: an operator table, static limits, and where they
    came from (printed with the report)."""

    operators: OperatorTable | None = None
    limits: StaticLimits = DEFAULT_STATIC_LIMITS
    source: str = DEFAULTS


def run_validation(run_dir: str | Path) -> Validation:
    """How the run in ``run_dir`` validated its samples: from its ``config.yaml``, the
    operator table of its ``plugins:`` and ``operators:`` (its plugins imported, its records
    declared in the table: validating needs no implementation) and its executor's static call
    count; the defaults when there is no config.yaml.
    A config that does not load raises ``ValueError`` naming the file."""
    # heavy: the config schema and the run's plugins, only for a run's own samples
    from flowgrpo.operators.custom import load_extensions
    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.trainer.config import load_config

    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return Validation()
    try:
        cfg = load_config(path)
        table = load_extensions(cfg.plugins, cfg.operators, implement=False)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc} (fix it, or analyze with --samples FILE)") from None
    limits = executor_limits(cfg.executor).static_limits()
    source = f"{CONFIG_FILE} (the run's operators, {limits.max_calls} executor calls)"
    return Validation(table, limits, source)


@dataclass(frozen=True)
class Count:
    """A name with how often it occurred and its share (0..1) of the stated whole."""

    name: str
    count: int
    share: float


@dataclass(frozen=True)
class TrendPoint:
    """Counts for one step or one window of rows (``label``: the step, or ``rows a-b``)."""

    label: str
    total: int
    valid: int
    fallback: int
    distinct: int

    @property
    def valid_share(self) -> float:
        return self.valid / self.total if self.total else 0.0

    @property
    def fallback_share(self) -> float:
        return self.fallback / self.total if self.total else 0.0


@dataclass(frozen=True)
class AnalyzeReport:
    """What :func:`analyze_samples` found.

    Attributes:
        field: the text field read.
        total: outputs analysed (rows with a text in ``field``); skipped: rows without one.
        valid / invalid / fallback: outputs whose workflow validates / was found but has
            errors (``syntax_errors`` of them do not parse) / holds no workflow at all.
        distinct: distinct canonical forms among the valid workflows.
        top: the most frequent valid workflows (canonical form), share of valid.
        operators: every operator with the number of valid workflows using it, share of valid.
        structures: the structure class of each valid workflow (kinds), share of valid.
        occurrences: valid workflows containing each construct (a loop workflow may also
            contain a conditional), share of valid.
        trend_by: ``step``, ``window of N rows``, or empty (no rows).
        trends: per step or window, in order.
        validated_with: the operators and call count the outputs were validated against
            (:attr:`Validation.source`).
    """

    field: str
    total: int
    skipped: int
    valid: int
    invalid: int
    syntax_errors: int
    fallback: int
    distinct: int
    top: tuple[Count, ...]
    operators: tuple[Count, ...]
    structures: tuple[Count, ...]
    occurrences: tuple[Count, ...]
    trend_by: str
    trends: tuple[TrendPoint, ...]
    validated_with: str = DEFAULTS

    def share(self, count: int) -> float:
        """``count`` as a share of all outputs."""
        return count / self.total if self.total else 0.0


@dataclass(frozen=True)
class _Row:
    step: int | None
    fallback: bool
    valid: bool
    syntax_ok: bool
    canonical: str | None
    structure: str | None
    operators: frozenset[str]
    features: frozenset[str]


def _text_of(value) -> str | None:
    """A string, or the joined ``content`` of a list of chat messages; else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        parts = [m.get("content") for m in value]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    return None


def _classify(text: str, step, domain: str | None, validation: Validation) -> _Row:
    step = step if whole_number(step) else None
    table = validation.operators
    found = extract(text, operators=table)
    if found.fallback:
        return _Row(step, True, False, False, None, None, frozenset(), frozenset())
    report = validate(found.dsl, domain=domain, limits=validation.limits, operators=table)
    if not report.ok:
        return _Row(step, False, False, report.syntax_ok, None, None, frozenset(), frozenset())
    return _Row(
        step,
        False,
        True,
        True,
        report.canonical,
        report.structure,
        frozenset(report.operators),
        report.features,
    )


def analyze_samples(
    rows: Iterable[Mapping],
    field: str = "completion",
    top: int = 10,
    window: int | None = None,
    domain: str | None = None,
    validation: Validation = Validation(),  # frozen: one shared default is safe
) -> AnalyzeReport:
    """The diversity report of the outputs in ``rows[field]``.

    Args:
        rows: JSON objects (e.g. from :func:`trainer.reports.diagnose.read_jsonl`).
        field: the name of the text field (a string, or a list of chat messages whose
            ``content`` strings are joined). Rows without it are counted as skipped.
        top: how many of the most frequent workflows to list.
        window: trend per window of this many rows; None: per step when every analysed row
            has an integer ``step``, else ``AUTO_WINDOWS`` windows.
        domain: validate operators against this domain (math, code, qa); None allows all.
        validation: the operators and static limits to validate with (a run's:
            :func:`run_validation`); default the process-wide table and the default count.
    """
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be an integer >= 1, got {top!r}")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be an integer >= 1 (rows per window), got {window!r}")
    parsed, skipped, seen_keys = [], 0, set()
    for number, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise ValueError(f"row {number}: expected a JSON object, got {type(row).__name__}")
        seen_keys.update(row.keys())
        text = _text_of(row.get(field))
        if text is None:
            skipped += 1
            continue
        parsed.append(_classify(text, row.get("step"), domain, validation))
    if skipped and not parsed:
        if field in seen_keys:
            raise ValueError(
                f"no row has text in field {field!r} (its values are not strings); name the "
                "field that holds the model output as text (--field NAME)"
            )
        raise ValueError(
            f"no row has a text field {field!r}; fields seen: {', '.join(sorted(seen_keys))}. "
            "Name the field that holds the model output (--field NAME)"
        )
    return _report(parsed, field, skipped, top, window, validation)


def _counts(counter: Counter, names: Iterable[str], whole: int) -> tuple[Count, ...]:
    return tuple(Count(n, counter[n], counter[n] / whole if whole else 0.0) for n in names)


def _report(
    parsed: list[_Row], field: str, skipped: int, top: int, window, validation
) -> AnalyzeReport:
    valid = [r for r in parsed if r.valid]
    n_valid = len(valid)
    workflows = Counter(r.canonical for r in valid)
    ranked = sorted(workflows.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    operators = Counter(name for r in valid for name in r.operators)
    names = list(validation.operators if validation.operators is not None else default_table())
    operator_order = sorted(names, key=lambda n: -operators[n])  # stable: ties keep table order
    invalid = [r for r in parsed if not r.valid and not r.fallback]
    trend_by, trends = _trends(parsed, window)
    return AnalyzeReport(
        field=field,
        total=len(parsed),
        skipped=skipped,
        valid=n_valid,
        invalid=len(invalid),
        syntax_errors=sum(1 for r in invalid if not r.syntax_ok),
        fallback=sum(1 for r in parsed if r.fallback),
        distinct=len(workflows),
        top=tuple(Count(w, c, c / n_valid) for w, c in ranked),
        operators=_counts(operators, operator_order, n_valid),
        structures=_counts(Counter(r.structure for r in valid), STRUCTURES, n_valid),
        occurrences=_counts(
            Counter(f for r in valid for f in r.features), OCCURRENCE_KINDS, n_valid
        ),
        trend_by=trend_by,
        trends=trends,
        validated_with=validation.source,
    )


def _point(label: str, rows: list[_Row]) -> TrendPoint:
    valid = [r for r in rows if r.valid]
    return TrendPoint(
        label,
        len(rows),
        len(valid),
        sum(1 for r in rows if r.fallback),
        len({r.canonical for r in valid}),
    )


def _trends(parsed: list[_Row], window: int | None) -> tuple[str, tuple[TrendPoint, ...]]:
    if not parsed:
        return "", ()
    if window is None and all(r.step is not None for r in parsed):
        by_step: dict[int, list[_Row]] = {}
        for row in parsed:
            by_step.setdefault(row.step, []).append(row)
        return "step", tuple(_point(str(s), by_step[s]) for s in sorted(by_step))
    if window is None:
        window = max(1, math.ceil(len(parsed) / AUTO_WINDOWS))
    points = []
    for start in range(0, len(parsed), window):
        chunk = parsed[start : start + window]
        points.append(_point(f"rows {start + 1}-{start + len(chunk)}", chunk))
    return f"window of {window} rows", tuple(points)


# --------------------------------------------------------------------------- rendering


def report_to_json(report: AnalyzeReport) -> dict:
    """The report as a JSON-ready dict (shares included, trends with their shares)."""
    out = asdict(report)
    out["valid_share"] = report.share(report.valid)
    out["invalid_share"] = report.share(report.invalid)
    out["fallback_share"] = report.share(report.fallback)
    for point, item in zip(report.trends, out["trends"]):
        item["valid_share"] = point.valid_share
        item["fallback_share"] = point.fallback_share
    return out


_NUMERIC = re.compile(r"^[\d.,%() -]*$")


def _table(rows: list[tuple], header: tuple) -> list[str]:
    """Aligned columns: numeric columns right-aligned, text columns left-aligned."""
    columns = range(len(header))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in columns]
    numeric = [all(_NUMERIC.match(str(r[i])) for r in rows) for i in columns]
    lines = []
    for row in [header, *rows]:
        cells = [
            str(c).rjust(w) if num else str(c).ljust(w) for c, w, num in zip(row, widths, numeric)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def format_analyze(report: AnalyzeReport, max_trend_rows: int = 20) -> str:
    """The report as console tables (at most ``max_trend_rows`` trend rows, evenly spaced)."""
    pct = report.share
    head = f"DSL diversity report: {report.total} outputs (field {report.field!r})"
    if report.skipped:
        head += f"; {report.skipped} row(s) without that field skipped"
    out = [head, f"  validated with {report.validated_with}"]
    out += _table(
        [
            ("valid", report.valid, f"{pct(report.valid):.1%}", "workflow found and valid"),
            (
                "invalid",
                report.invalid,
                f"{pct(report.invalid):.1%}",
                f"workflow found with errors ({report.syntax_errors} do not parse)",
            ),
            ("fallback", report.fallback, f"{pct(report.fallback):.1%}", "no workflow (prose)"),
        ],
        ("", "count", "share", ""),
    )
    out.append(f"  distinct canonical workflows among the valid: {report.distinct}")
    if report.top:
        out += ["", f"Top {len(report.top)} workflows (share of valid):"]
        out += _table(
            [(c.count, f"{c.share:.1%}", c.name) for c in report.top], ("count", "share", "")
        )
    if report.valid:
        out += ["", "Operators (valid workflows using each):"]
        out += _table(
            [(c.name, c.count, f"{c.share:.1%}") for c in report.operators],
            ("operator", "workflows", "share"),
        )
        out += ["", "Structure classes (kind: one per workflow; occurrences: constructs present):"]
        out += _structure_table(report)
    out += _format_trends(report, max_trend_rows)
    return "\n".join(out)


def _structure_table(report: AnalyzeReport) -> list[str]:
    kinds = {c.name: c for c in report.structures}
    occurrences = {c.name: c for c in report.occurrences}
    rows = []
    for name in dict.fromkeys([*kinds, *occurrences]):
        cells = [name]
        for table in (kinds, occurrences):
            item = table.get(name)
            cells.append(f"{item.count} ({item.share:.1%})" if item else "-")
        rows.append(tuple(cells))
    return _table(rows, ("class", "kind", "occurrences"))


def _format_trends(report: AnalyzeReport, max_rows: int) -> list[str]:
    points = list(report.trends)
    if not points:
        return []
    note = ""
    if len(points) > max_rows:
        picks = sorted({round(i * (len(points) - 1) / (max_rows - 1)) for i in range(max_rows)})
        note = f" ({len(picks)} of {len(points)} shown; --json has all)"
        points = [points[i] for i in picks]
    out = ["", f"Trend per {report.trend_by}{note}:"]
    out += _table(
        [
            (p.label, p.total, f"{p.valid_share:.1%}", f"{p.fallback_share:.1%}", p.distinct)
            for p in points
        ],
        (report.trend_by.split(" ")[0], "outputs", "valid", "fallback", "distinct"),
    )
    return out


def plot_analyze(report: AnalyzeReport, out_dir: str | Path) -> list[Path]:
    """Write bar charts (top_workflows.png, operators.png, structures.png) and trends.png into
    ``out_dir``; charts with nothing to show are skipped. Returns the files written."""
    out_dir = Path(out_dir)
    charts = [
        ("top_workflows.png", report.top, "most frequent valid workflows", "count"),
        (
            "operators.png",
            [c for c in report.operators if c.count],
            "operators (share of valid workflows using each)",
            "share",
        ),
        (
            "structures.png",
            [c for c in report.structures if c.count],
            "structure classes (share of valid workflows)",
            "share",
        ),
    ]
    written = []
    for name, items, title, measure in charts:
        values = [c.count if measure == "count" else c.share for c in items]
        path = plots.bar_chart([c.name for c in items], values, title, measure, out_dir / name)
        if path:
            written.append(path)
    if len(report.trends) > 1:
        written.append(_plot_trends(report, out_dir / "trends.png"))
    return written


def _plot_trends(report: AnalyzeReport, path: Path) -> Path:
    figure, axes = plots.new_figure()
    xs = list(range(len(report.trends)))
    axes.plot(xs, [p.valid_share for p in report.trends], label="valid share")
    axes.plot(xs, [p.fallback_share for p in report.trends], label="fallback share")
    axes.set_ylim(-0.02, 1.02)
    axes.set_xlabel(report.trend_by if report.trend_by == "step" else report.trend_by + " (index)")
    if report.trend_by == "step":
        ticks = xs[:: max(1, len(xs) // 10)]
        axes.set_xticks(ticks)
        axes.set_xticklabels([report.trends[i].label for i in ticks])
    second = axes.twinx()
    second.plot(
        xs,
        [p.distinct for p in report.trends],
        color="tab:green",
        linestyle="--",
        label="distinct workflows",
    )
    second.set_ylabel("distinct workflows")
    second.set_ylim(bottom=0)
    axes.legend(loc="upper left", fontsize=8)
    second.legend(loc="upper right", fontsize=8)
    axes.set_title(f"trend per {report.trend_by}")
    return plots.save(figure, path)
