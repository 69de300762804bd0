"""Bodies of ``flowgrpo validate`` (check workflows) and ``flowgrpo run`` (execute one)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import click

from flowgrpo.dsl import OperatorTable, extract, validate
from flowgrpo.dsl.render import format_report, report_to_dict
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.interpreter import describe, run_workflows
from flowgrpo.plugins import import_plugins
from flowgrpo.trainer.cli.common import (
    build_cli_executor,
    device_option,
    fail,
    load_problems,
    progress,
    status,
)
from flowgrpo.trainer.cli.evaluate import run_config_of
from flowgrpo.trainer.reports.eval_run import override_executor
from flowgrpo.trainer.reports.evaluate import ModelSpec, load_base_model


def validate_command(
    workflows, files, do_extract: bool, domain: str | None, as_json: bool, operators_file=None
):
    """Validate each input (arguments, then lines of ``files``); exit 0 all valid, 1 any not.
    ``operators_file``: an operator table to validate against (exit 2 when it is bad)."""
    table = None
    if operators_file is not None:
        try:
            table = OperatorTable.load(operators_file)
        except ValueError as exc:
            fail(f"--operators: {exc}")
    inputs = list(workflows)
    for handle in files:
        try:
            inputs += [line.rstrip("\n") for line in handle if line.strip()]
        except UnicodeDecodeError as exc:
            fail(f"--file {handle.name}: not UTF-8 text (byte {exc.start}: {exc.reason}); "
                 "save it as UTF-8")  # fmt: skip
    if not inputs:
        raise click.UsageError("give at least one workflow, or --file FILE")
    all_ok = True
    for text in inputs:
        result = validate_one(text, do_extract, domain, table)
        all_ok &= result["ok"]
        human = result.pop("_human")
        click.echo(json.dumps(result) if as_json else human)
    sys.exit(0 if all_ok else 1)


def validate_one(text: str, do_extract: bool, domain: str | None, table=None) -> dict:
    """Validate one input (against ``table``, default the process's operator table) with the
    default run's static limits (its 12-call budget, votes and retries counted, as a run's
    reward validates); returns the JSON dict with a '_human' rendering added."""
    limits = executor_limits(ExecutorConfig()).static_limits()
    if do_extract:
        found = extract(text, operators=table)
        if found.fallback:
            return {
                "input": text,
                "ok": False,
                "fallback": True,
                "errors": [],
                "_human": f"invalid  (fallback: no workflow found) {text[:60]!r}",
            }
        report = validate(found.dsl, domain=domain, operators=table, limits=limits)
        result = {
            "input": text,
            "fallback": False,
            "source": found.source,
            **report_to_dict(report),
        }
    else:
        report = validate(text, domain=domain, operators=table, limits=limits)
        result = {"input": text, **report_to_dict(report)}
    result["_human"] = format_report(report)
    return result


def run_workflow_command(
    workflow,
    task,
    n,
    split,
    seed,
    executor,
    model,
    base_url,
    trace,
    as_json,
    checkpoint=None,
    device="cpu",
    dtype=None,
    executor_max_new_tokens=None,
    plugins=(),
) -> None:
    """Validate ``workflow`` (also for the task's domain), run it on ``n`` problems, print.
    With ``checkpoint``, the run's environment is built as training builds it (its plugins,
    its ``operators:``, its names checked) and the executor and its budgets are the run's unless
    given. ``plugins`` are imported first, so their operators and backends can be named."""
    run = run_config_of(checkpoint)
    try:
        import_plugins(plugins)
    except ValueError as exc:
        fail(f"--plugin: {exc}")
    table = run_operators(run)
    # the run's call budget, votes and retries counted (as its reward validates): a workflow
    # over it is refused here, not cut short by the executor
    limits = executor_limits(run.executor if run is not None else ExecutorConfig()).static_limits()
    report = validate(workflow, operators=table, limits=limits)
    if not report.ok:
        click.echo(format_report(report), err=True)
        sys.exit(1)
    problems = load_problems(task, n, seed, split)
    domain_report = validate(workflow, domain=problems[0].domain, operators=table, limits=limits)
    if not domain_report.ok:
        click.echo(format_report(domain_report), err=True)
        sys.exit(1)
    device = device_option(device)
    budget = executor_max_new_tokens
    llm, limits = executor_of(run, executor, model, base_url, device, dtype, budget)
    start = time.time()
    with progress(desc="executing (batched rounds)", unit="round") as bar:

        def on_round(round_: int, active: int) -> None:
            bar.update(1)
            bar.set_postfix(active_runs=active)

        pairs = [(report.workflow, p) for p in problems]
        results = run_workflows(pairs, llm, limits=limits, on_round=on_round, operators=table)
    for problem, result in zip(problems, results):
        _print_run(problem, result, trace, as_json)
    correct = sum(r.correct for r in results)
    unscorable = sum(r.unscorable for r in results)
    click.echo(
        f"\n{report.canonical}: {correct}/{len(results)} correct, {unscorable} unscorable, "
        f"{time.time() - start:.1f} s",
        err=as_json,
    )


def run_operators(run) -> OperatorTable | None:
    """The operator table of the run a checkpoint belongs to, from its environment built as
    training builds it (without problems or executor); None without a run (the process-wide
    table). A run whose config no longer checks: one line, exit 2."""
    if run is None:
        return None
    # heavy: torch (the loop package); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.environment import build_environment

    try:
        return build_environment(run, with_executor=False, with_problems=False).operators
    except ValueError as exc:
        fail(f"--checkpoint: the run's config: {exc}")


def executor_of(run, executor, model, base_url, device: str, dtype, budget):
    """(executor, Limits) for ``flowgrpo run``: the run's ``executor`` section (the defaults
    without ``--checkpoint``) with the options overriding its fields (``--executor`` its kind,
    ``--model``, ``--base-url``, ``--executor-max-new-tokens``), built by the one builder."""
    base = run.executor if run is not None else ExecutorConfig(kind="hf")
    if run is not None and executor == "hf" and model is None:
        model = run.model.name_or_path  # a separate copy of the run's base model
    try:  # the options over the section's fields; a bad value is one line
        section = override_executor(base, executor, model, base_url, budget)
    except ValueError as exc:
        fail(str(exc))
    dtype = dtype or (run.model.dtype if run is not None else "float32")
    if section.kind != "shared":
        return build_cli_executor(section, device=device, dtype=dtype)
    if run is None:
        fail("--executor shared runs a run's base model: give --checkpoint, or use hf")
    try:  # the run's base model, as in training (adapter disabled)
        spec = ModelSpec.of_run(run, model, dtype)
        status(f"loading the run's base model {spec.name_or_path!r} as executor ...")
        base_model, tokenizer = load_base_model(spec, device)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    return build_cli_executor(section, base_model, tokenizer)


def _print_run(problem, result, trace: bool, as_json: bool) -> None:
    if as_json:
        row = {"problem": problem.id, "reference": problem.answer, **dataclasses.asdict(result)}
        click.echo(json.dumps(row))
        return
    click.echo(f"\n== {problem.id}: {problem.question.strip()[:200]}")
    if trace:
        for t in result.trace:
            out = " ".join(t.output.split())[:160]
            click.echo(f"   [{t.op}/{t.kind} {t.seconds:.1f}s] -> {out}")
    click.echo(
        f"   answer: {(result.answer or '').strip()[:120]!r}  reference: "
        f"{(problem.answer or '')[:60]!r}"
    )
    click.echo(f"   {describe(result)}")
