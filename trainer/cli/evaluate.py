"""Body of ``flowgrpo eval``: evaluate a checkpoint, the base model or every checkpoint of a run
(``--all``), or compare two results.

A checkpoint is evaluated as trained: its run's config.yaml gives the defaults of the base
model, the workflow budget and sampling, and the ``executor`` section (the executor with its
budgets, limits, timeouts and retries; options given override its fields; see
``flowgrpo eval --help``). The work is :mod:`flowgrpo.trainer.reports.eval_run`'s; this module
turns options into its :class:`~flowgrpo.trainer.reports.eval_run.EvalOptions`, shows progress,
prints and maps errors to exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from flowgrpo.trainer.cli.common import device_option, fail, progress, status
from flowgrpo.trainer.reports.eval_all import (
    JSON_FILE,
    check_report_paths,
    format_table,
    plot_over_steps,
    write_json,
)
from flowgrpo.trainer.reports.eval_run import (
    EvalOptions,
    EvalSession,
    evaluate_run,
    load_run,
    no_checkpoints,
)
from flowgrpo.trainer.reports.evaluate import checkpoint_adapter, format_eval
from flowgrpo.trainer.reports.evaluate import compare as compare_results
from flowgrpo.trainer.reports.plots import check_replaceable

#: What the library raises for bad input (a file, a config, a plugin): one line, exit 2.
INPUT_ERRORS = (ValueError, FileNotFoundError, OSError, ImportError)


def run_config_of(checkpoint: str | None):
    """The TrainConfig of the run a checkpoint belongs to (None without a checkpoint), or a
    one-line error when its config.yaml is missing or no longer loads."""
    try:
        return load_run(checkpoint or None)
    except ValueError as exc:
        fail(str(exc))


def eval_command(
    *, adapter, base, compare: tuple[str, str] | None, run_dir=None, all_checkpoints=False,
    search=None, **o,
) -> None:  # fmt: skip
    """Evaluate and print (``--json FILE`` also writes the result), print a comparison, or with
    ``all_checkpoints`` evaluate every checkpoint of ``run_dir``; with ``search`` the search's
    pick in the setting of the checkpoint given (or the options')."""
    if compare:
        click.echo(compare_results(*map(_eval_result, compare)))
        return
    if all_checkpoints:
        if adapter or base or search or not run_dir:
            fail("--all evaluates every checkpoint of a run: flowgrpo eval RUN_DIR --all "
                 "(without --adapter, --base or --search)")  # fmt: skip
        eval_all_command(run_dir, eval_options(o), o["json_out"])
        return
    adapter = _target(adapter, base, run_dir, search)
    options = eval_options(o)
    json_out = o["json_out"]  # its folder checked by the option itself, before evaluating
    try:
        pick, picked = _search_pick(search, adapter)
        session = EvalSession(run_config_of(adapter), options)
        status(f"task: {session.task} ({session.task_source})")
        session.load(adapter)  # logs what it loads
    except INPUT_ERRORS as exc:
        fail(str(exc))
    try:  # the bar closed first, so the error gets its own line
        with progress(total=options.n, desc="eval", unit="problem") as bar:
            result = session.evaluate(bar.update, pick, picked)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    click.echo(json.dumps(result, indent=2) if json_out == "-" else format_eval(result))
    if json_out and json_out != "-":  # after the printing: a failed write loses nothing
        try:
            write_json(result, json_out)  # whole, and a link there replaced, not written through
        except OSError as exc:
            fail(f"--json {json_out}: could not write the result ({exc}); it is printed above")


def _eval_result(path: str) -> dict:
    """A ``flowgrpo eval --json`` result read from ``path``, or a one-line error."""
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail(f"--compare {path}: cannot be read as JSON ({type(exc).__name__}: {exc})")
    if not isinstance(result, dict) or "validity_rate" not in result:
        fail(f"--compare {path}: not an evaluation result (no validity_rate); give two files "
             "written by flowgrpo eval --json")  # fmt: skip
    rate = result["validity_rate"]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        fail(f"--compare {path}: validity_rate is {rate!r}, not a number: not a result "
             "flowgrpo eval --json wrote")  # fmt: skip
    return result


def _target(adapter, base, run_dir, search):
    """The checkpoint to load (None: the base model), after the arguments are checked."""
    if run_dir and adapter:
        fail("give the checkpoint once: flowgrpo eval RUN_DIR/checkpoint-N, or --adapter")
    if run_dir:
        try:
            checkpoint_adapter(run_dir)
        except FileNotFoundError as exc:
            fail(f"{exc}; or every checkpoint of a run: flowgrpo eval {run_dir} --all")
        except ValueError as exc:  # a damaged adapter: the file, said on one line
            fail(str(exc))
    adapter = adapter or run_dir
    if search:
        if base:
            fail("--search scores the search's pick, not a model: drop --base (a checkpoint "
                 "given with it only sets the run's task, executor and limits)")  # fmt: skip
        return adapter
    if bool(adapter) == bool(base):
        fail("give exactly one of RUN_DIR/checkpoint-N (or --adapter), --base, RUN_DIR --all, "
             "or --search FILE")  # fmt: skip
    return adapter


def _search_pick(search, adapter):
    """(``problem -> workflow``, what to call it) of ``--search FILE``; (None, "") without."""
    if not search:
        return None, ""
    # heavy: the search package imports the trainer loop (torch)
    from flowgrpo.trainer.search.table import load_search_pick

    where = f" in the setting of {adapter}" if adapter else ""
    return load_search_pick(search), f"the pick of {search}{where}"


def eval_all_command(run_dir: str, options: EvalOptions, json_out: str | None) -> None:
    """Evaluate every checkpoint of ``run_dir`` (the model loaded once); print the table (the
    JSON with ``--json -``), write the JSON (``--json FILE``, default RUN_DIR/eval_all.json)
    and the plot beside it (RUN_DIR/eval_all.png with ``--json -``)."""
    # heavy: the config schema (the run folder's layout); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.rundir import list_checkpoints

    count = len(list_checkpoints(run_dir))
    if not count:
        fail(no_checkpoints(run_dir))
    if not json_out or json_out == "-":
        _check_default_outputs(Path(run_dir), plot_only=json_out == "-")
    else:
        try:
            check_report_paths(json_out, plot=True)
        except ValueError as exc:
            fail(f"--json {json_out}: {exc}")
    try:  # the bar closed first, so the error gets its own line
        with progress(total=options.n * (count + 1), desc=f"eval the start + {count} checkpoints",
                      unit="problem") as bar:  # fmt: skip
            report = evaluate_run(run_dir, options, progress=bar.update)
    except INPUT_ERRORS as exc:
        fail(str(exc))
    out = Path(json_out) if json_out and json_out != "-" else Path(run_dir) / JSON_FILE
    try:
        written = [] if json_out == "-" else [write_json(report, out)]
        written.append(plot_over_steps(report, out.with_suffix(".png")))
    except (OSError, ImportError) as exc:
        fail(f"could not write the report: {exc}")
    click.echo(json.dumps(report, indent=2) if json_out == "-" else format_table(report))
    status("wrote " + " and ".join(str(p) for p in written))


def _check_default_outputs(run_dir: Path, plot_only: bool) -> None:
    """Before any evaluation: the default report files in ``run_dir`` are replaced only when
    an earlier ``eval --all`` wrote them (the JSON report is one, the plot carries flowgrpo's
    PNG mark); a file of the user's under either name is refused, never overwritten."""
    report = run_dir / JSON_FILE
    try:  # as the report's plot is written beside it
        check_replaceable(report.with_suffix(".png"))
    except FileExistsError as exc:
        fail(f"{exc} (or the report with --json FILE)")
    try:
        data = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else None
    except (OSError, ValueError):
        data = "unreadable"
    ours = isinstance(data, dict) and {"run_dir", "checkpoints"} <= data.keys()
    if not plot_only and report.exists() and not ours:
        fail(f"{report} exists and is not a report eval --all wrote, so it is not replaced: "
             "move it, or write the report elsewhere with --json FILE")  # fmt: skip


def eval_options(o: dict) -> EvalOptions:
    """The :class:`EvalOptions` of the command's options (``--device`` checked here)."""
    return EvalOptions(
        task=o["task"], n=o["n"], k=o["k"], model=o["model"], dtype=o["dtype"],
        device=device_option(o["device"]), max_new_tokens=o["max_new_tokens"],
        temperature=o["temperature"], execute=not o["no_execute"], executor=o["executor"],
        base_url=o["base_url"], executor_model=o["executor_model"],
        executor_max_new_tokens=o["executor_max_new_tokens"], constrained=o["constrained"],
        batch=o["batch"],
    )  # fmt: skip
