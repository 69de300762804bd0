"""The report of ``flowgrpo eval RUN_DIR --all``: every checkpoint's evaluation (from
:func:`~flowgrpo.trainer.reports.eval_run.evaluate_run`) as a console table, a JSON file and a
plot of the metrics over training steps.

Files, by default next to the run's checkpoints: ``RUN_DIR/eval_all.json`` (the whole report:
each checkpoint's result is what ``flowgrpo eval --adapter`` of it writes, plus ``step`` and
``checkpoint``) and ``RUN_DIR/eval_all.png``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from flowgrpo.files import replace_text, unwritable
from flowgrpo.trainer.reports.evaluate import compare_keys, headline_keys
from flowgrpo.trainer.reports.plots import check_replaceable, new_figure, save, series

JSON_FILE = "eval_all.json"
PLOT_FILE = "eval_all.png"
#: The rates drawn over the steps (those a result has), with the metrics hooks' headline rates.
PLOT_KEYS = ("validity_rate", "fallback_rate", "pass@1")


def table_keys(report: dict) -> list[str]:
    """The metrics the table shows (``evaluate.compare_keys`` of the checkpoints' results) that
    a checkpoint has."""
    rows = report["checkpoints"]
    return [key for key in compare_keys(*rows) if any(_number(r.get(key)) for r in rows)]


def format_table(report: dict) -> str:
    """The report as an aligned console table: one row per checkpoint, oldest first."""
    rows, keys = report["checkpoints"], table_keys(report)
    first = rows[0] if rows else {}
    head = (
        f"evaluation of every checkpoint of {report['run_dir']} on {first.get('task')}: "
        f"{first.get('problems')} problems x {first.get('k')} workflows"
    )
    widths = [max(len(key), 8) for key in keys]
    lines = [head, "  step " + " ".join(f"{k:>{w}s}" for k, w in zip(keys, widths, strict=True))]
    for row in rows:
        cells = [_cell(row.get(key), w) for key, w in zip(keys, widths, strict=True)]
        lines.append(f"{row['step']:>6d} " + " ".join(cells))
    return "\n".join(lines)


def check_report_paths(json_file: str | Path, plot: bool) -> None:
    """Checked before an evaluation, so its result is not lost at the end: ``ValueError`` when
    the JSON report cannot be written to ``json_file`` (a folder stands there, or a file where
    a folder of its path should be) or, with ``plot``, a file of the user's stands where the
    plot goes beside it (:func:`~.plots.check_replaceable`)."""
    path = Path(json_file)
    if (why := unwritable(path)) is not None:
        raise ValueError(f"{why} for the JSON report")
    if plot:
        try:
            check_replaceable(path.with_suffix(".png"))
        except FileExistsError as exc:
            raise ValueError(f"{exc} (the plot goes beside the JSON report)") from None


def write_json(report: dict, path: str | Path) -> Path:
    """Write the whole report as indented JSON to ``path`` (parent folders created), replacing
    the file whole (:func:`flowgrpo.files.replace_text`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, json.dumps(report, indent=2))
    return path


def plot_over_steps(report: dict, path: str | Path) -> Path:
    """Draw :data:`PLOT_KEYS` (those present) against the checkpoints' steps; write a PNG."""
    rows = report["checkpoints"]
    figure, axes = new_figure()  # a clear error when matplotlib is missing
    from matplotlib.ticker import MaxNLocator  # optional: matplotlib, there once new_figure is

    for key in dict.fromkeys([*PLOT_KEYS, *headline_keys()]):
        steps, values = series(rows, key)
        if values:
            axes.plot(steps, values, marker="o", label=key)
    first = rows[0] if rows else {}
    axes.set_title(
        f"{Path(report['run_dir']).name}: {first.get('task')}, n={first.get('problems')}, "
        f"k={first.get('k')}"
    )
    axes.set_xlabel("training step (checkpoint)")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("rate")
    axes.set_ylim(-0.02, 1.02)
    axes.legend(loc="best", fontsize=8)
    return save(figure, Path(path))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value, width: int) -> str:
    if not _number(value) or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}s}"
    return f"{value:>{width}.3f}" if isinstance(value, float) else f"{value:>{width}d}"
