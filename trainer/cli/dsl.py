"""Bodies of ``flowgrpo validate`` (check workflows) and ``flowgrpo run`` (execute one)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import click
from tqdm import tqdm

from flowgrpo.dsl import extract, validate
from flowgrpo.dsl.render import format_report, report_to_dict
from flowgrpo.operators.interpreter import describe, run_workflows
from flowgrpo.trainer.cli.common import load_problems, make_executor


def validate_command(workflows, files, do_extract: bool, domain: str | None, as_json: bool):
    """Validate each input (arguments, then lines of ``files``); exit 0 all valid, 1 any not."""
    inputs = list(workflows)
    for handle in files:
        inputs += [line.rstrip("\n") for line in handle if line.strip()]
    if not inputs:
        raise click.UsageError("give at least one workflow, or --file FILE")
    all_ok = True
    for text in inputs:
        result = validate_one(text, do_extract, domain)
        all_ok &= result["ok"]
        human = result.pop("_human")
        click.echo(json.dumps(result) if as_json else human)
    sys.exit(0 if all_ok else 1)


def validate_one(text: str, do_extract: bool, domain: str | None) -> dict:
    """Validate one input; returns the JSON dict with a '_human' rendering added."""
    if do_extract:
        found = extract(text)
        if found.fallback:
            return {
                "input": text,
                "ok": False,
                "fallback": True,
                "errors": [],
                "_human": f"invalid  (fallback: no workflow found) {text[:60]!r}",
            }
        report = validate(found.dsl, domain=domain)
        result = {
            "input": text,
            "fallback": False,
            "source": found.source,
            **report_to_dict(report),
        }
    else:
        report = validate(text, domain=domain)
        result = {"input": text, **report_to_dict(report)}
    result["_human"] = format_report(report)
    return result


def run_workflow_command(
    workflow, task, n, split, seed, executor, model, base_url, trace, as_json
) -> None:
    """Validate ``workflow`` (also for the task's domain), run it on ``n`` problems, print."""
    report = validate(workflow)
    if not report.ok:
        click.echo(format_report(report), err=True)
        sys.exit(1)
    problems = load_problems(task, n, seed, split)
    domain_report = validate(workflow, domain=problems[0].domain)
    if not domain_report.ok:
        click.echo(format_report(domain_report), err=True)
        sys.exit(1)
    llm = make_executor(executor, model, base_url)
    start = time.time()
    with tqdm(desc="executing (batched rounds)", unit="round", file=sys.stderr) as bar:

        def on_round(round_: int, active: int) -> None:
            bar.update(1)
            bar.set_postfix(active_runs=active)

        results = run_workflows([(report.workflow, p) for p in problems], llm, on_round=on_round)
    for problem, result in zip(problems, results):
        _print_run(problem, result, trace, as_json)
    correct = sum(r.correct for r in results)
    unscorable = sum(r.unscorable for r in results)
    click.echo(
        f"\n{report.canonical}: {correct}/{len(results)} correct, {unscorable} unscorable, "
        f"{time.time() - start:.1f} s",
        err=as_json,
    )


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
