"""Bodies of ``flowgrpo diagnose`` (health report of a run) and ``flowgrpo analyze`` (DSL
diversity of model outputs): read files, call :mod:`flowgrpo.trainer.reports`, print."""

from __future__ import annotations

import json
from pathlib import Path

import click

from flowgrpo.trainer.cli.common import fail
from flowgrpo.trainer.reports.analyze import (
    Validation,
    analyze_samples,
    format_analyze,
    plot_analyze,
    report_to_json,
    run_validation,
)
from flowgrpo.trainer.reports.diagnose import (
    SAMPLES_FILE,
    diagnose,
    diagnose_to_json,
    format_diagnose,
    plot_run,
    read_jsonl,
)


def diagnose_command(run_dir, as_json: bool, plots: bool) -> None:
    """Print the health report of ``run_dir`` (text or JSON) and write its plots."""
    try:
        report = diagnose(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    click.echo(
        json.dumps(diagnose_to_json(report), indent=2) if as_json else format_diagnose(report)
    )
    if not plots:
        return
    try:
        written = plot_run(
            run_dir,
            report.history,
            entropy_min=report.config.entropy_min,
            collapse_steps=[e.step for e in report.collapse_events],
        )
    except ImportError as exc:
        fail(f"{exc} (plots need matplotlib: pip install matplotlib; or use --no-plots)")
    except OSError as exc:  # a user's file under a plot's name is refused, never replaced
        fail(f"could not write the plots: {exc} (or use --no-plots)")
    click.echo(f"plots: {len(written)} PNG files in {Path(run_dir) / 'plots'}", err=as_json)


def analyze_command(run_dir, samples_file, field, top, window, as_json, plots_dir) -> None:
    """Print the DSL diversity report of RUN_DIR/samples.jsonl or ``samples_file``."""
    if (run_dir is None) == (samples_file is None):
        fail("give either RUN_DIR or --samples FILE")
    path = Path(samples_file) if samples_file else Path(run_dir) / SAMPLES_FILE
    try:  # a run's samples as its reward validated them (its operators, its call budget)
        validation = run_validation(run_dir) if run_dir else Validation()
        report = analyze_samples(
            read_jsonl(path), field=field, top=top, window=window, validation=validation
        )
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    click.echo(json.dumps(report_to_json(report), indent=2) if as_json else format_analyze(report))
    out = plots_dir or (Path(run_dir) / "plots" if run_dir else None)
    if out is not None:
        try:
            written = plot_analyze(report, out)
        except (ImportError, OSError) as exc:  # a user's file under a plot's name is refused
            fail(f"could not write the plots: {exc} (or give --plots another folder)")
        click.echo(f"plots: {len(written)} PNG files in {out}", err=as_json)
