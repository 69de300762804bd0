"""Bodies of the heavier CLI commands (imported lazily so `flowgrpo validate` stays light).

They print (they are the CLI); library packages below them only log.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import click

from flowgrpo.dsl import validate
from flowgrpo.dsl.render import format_report


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def load_problems(task: str, n: int, seed: int, split: str):
    """Problems of a task spec, or a clear CLI error."""
    from flowgrpo.operators.tasks import load_task

    try:
        return load_task(task, n=n, seed=seed, split=split)
    except (ValueError, FileNotFoundError, OSError) as exc:
        _fail(str(exc))


def make_executor(executor: str, model: str, base_url: str | None):
    """The executor backend for the CLI, with errors turned into messages."""
    from flowgrpo.operators.backends import make_backend

    try:
        if executor == "openai":
            kwargs = {"base_url": base_url}
            if model != "default":
                kwargs["model"] = model
            return make_backend("openai", **kwargs)
        click.echo(f"loading executor model {model!r} ...", err=True)
        return make_backend("hf", name_or_path=model)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        _fail(str(exc))


def run_workflow_command(
    workflow, task, n, split, seed, executor, model, base_url, trace, as_json
) -> None:
    from flowgrpo.operators.interpreter import describe, run_workflows

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
    from tqdm import tqdm

    with tqdm(desc="executing (batched rounds)", unit="round", file=sys.stderr) as bar:

        def on_round(round_: int, active: int) -> None:
            bar.update(1)
            bar.set_postfix(active_runs=active)

        results = run_workflows([(report.workflow, p) for p in problems], llm, on_round=on_round)
    for problem, result in zip(problems, results):
        if as_json:
            row = {"problem": problem.id, "reference": problem.answer, **dataclasses.asdict(result)}
            click.echo(json.dumps(row))
            continue
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
    correct = sum(r.correct for r in results)
    unscorable = sum(r.unscorable for r in results)
    click.echo(
        f"\n{report.canonical}: {correct}/{len(results)} correct, {unscorable} unscorable, "
        f"{time.time() - start:.1f} s",
        err=as_json,
    )


def _resolve_config(config_path, overrides, max_steps, output_dir):
    from flowgrpo.trainer.config import ConfigError, load_config

    extra = list(overrides)
    if max_steps:
        extra.append(f"optim.max_steps={max_steps}")
    if output_dir:
        extra.append(f"logging.output_dir={output_dir}")
    try:
        return load_config(config_path, tuple(extra))
    except ConfigError as exc:
        _fail(f"bad config: {exc}")


def _console_logging() -> None:
    """INFO lines of flowgrpo's packages on the console, above the progress bar (once)."""
    import logging
    import warnings

    from tqdm.contrib.logging import _TqdmLoggingHandler

    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation chatter
    root = logging.getLogger()
    if not any(isinstance(h, _TqdmLoggingHandler) for h in root.handlers):
        handler = _TqdmLoggingHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    for name in ("flowgrpo",):
        logging.getLogger(name).setLevel(logging.INFO)


def train_command(config_path, overrides, max_steps, output_dir, resume, dry_run) -> None:
    import yaml

    from flowgrpo.trainer.config import to_dict

    cfg = _resolve_config(config_path, overrides, max_steps, output_dir)
    if dry_run:
        from flowgrpo.trainer.reports.estimate import estimate

        click.echo(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        click.echo("memory estimate (not a measurement):")
        click.echo(yaml.safe_dump(estimate(cfg), sort_keys=False))
        return
    _console_logging()
    from tqdm import tqdm

    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.monitoring.metrics import console_line

    click.echo(f"run directory: {cfg.logging.output_dir}")
    click.echo(f"loading model {cfg.model.name_or_path!r} ...")
    try:
        trainer = Trainer(cfg, resume=resume)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        _fail(str(exc))
    bar = tqdm(total=cfg.optim.max_steps, initial=trainer.step, desc="train", unit="step")

    def on_step(metrics: dict) -> None:
        bar.update(1)
        tqdm.write(console_line(metrics))

    trainer.on_step = on_step
    result = trainer.train()
    bar.close()
    click.echo(
        f"done: {result.steps} steps; run directory {result.run_dir}; last checkpoint "
        f"{result.checkpoint}"
    )
    click.echo(f"next: flowgrpo diagnose {result.run_dir}  |  flowgrpo analyze {result.run_dir}")
    if result.stop_reason:
        click.echo(result.stop_reason, err=True)
    sys.exit(result.exit_code)


def diagnose_command(run_dir, as_json: bool, plots: bool) -> None:
    from flowgrpo.trainer.reports.diagnose import diagnose, diagnose_to_json, format_diagnose, plot_run

    try:
        report = diagnose(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    click.echo(
        json.dumps(diagnose_to_json(report), indent=2) if as_json else format_diagnose(report)
    )
    if plots:
        try:
            written = plot_run(
                run_dir,
                report.history,
                entropy_min=report.config.entropy_min,
                collapse_steps=[e.step for e in report.collapse_events],
            )
        except ImportError as exc:
            _fail(f"{exc} (plots need matplotlib: pip install matplotlib; or use --no-plots)")
        click.echo(f"plots: {len(written)} PNG files in {Path(run_dir) / 'plots'}", err=as_json)


def analyze_command(run_dir, samples_file, field, top, window, as_json, plots_dir) -> None:
    from flowgrpo.trainer.reports.analyze import analyze_samples, format_analyze, plot_analyze, report_to_json
    from flowgrpo.trainer.reports.diagnose import read_jsonl

    if (run_dir is None) == (samples_file is None):
        _fail("give either RUN_DIR or --samples FILE")
    path = Path(samples_file) if samples_file else Path(run_dir) / "samples.jsonl"
    try:
        report = analyze_samples(read_jsonl(path), field=field, top=top, window=window)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    click.echo(json.dumps(report_to_json(report), indent=2) if as_json else format_analyze(report))
    out = plots_dir or (Path(run_dir) / "plots" if run_dir else None)
    if out is not None:
        written = plot_analyze(report, out)
        click.echo(f"plots: {len(written)} PNG files in {out}", err=as_json)


def _model_of_run(adapter: str | None) -> str:
    """The base model named in the run's config.yaml (checkpoint's parent), else 'default'."""
    import yaml

    if adapter:
        for parent in Path(adapter).resolve().parents[:2]:
            config = parent / "config.yaml"
            if config.is_file():
                data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
                return (data.get("model") or {}).get("name_or_path", "default")
    return "default"


def eval_command(
    *,
    adapter,
    base,
    model,
    task,
    n,
    k,
    executor,
    base_url,
    executor_model,
    no_execute,
    json_out,
    compare,
) -> None:
    from flowgrpo.trainer.reports.evaluate import EvalSettings, format_eval
    from flowgrpo.trainer.reports.evaluate import compare as compare_fn

    if compare:
        a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in compare)
        click.echo(compare_fn(a, b))
        return
    if bool(adapter) == bool(base):
        _fail("give exactly one of --adapter RUN_DIR/checkpoint-N or --base")
    _console_logging()
    from tqdm import tqdm

    from flowgrpo.trainer.reports.evaluate import evaluate, load_for_eval

    name = model or _model_of_run(adapter)
    try:
        settings = EvalSettings(task=task, n=n, k=k, execute=not no_execute)
        click.echo(f"loading {name!r} ...", err=True)
        policy, tokenizer, described = load_for_eval(adapter, name)
        llm = _eval_executor(executor, policy, tokenizer, base_url, executor_model)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        _fail(str(exc))
    with tqdm(total=n, desc="eval", unit="problem") as bar:
        try:
            result = evaluate(policy, tokenizer, settings, llm, progress=bar.update)
        except (ValueError, FileNotFoundError) as exc:
            _fail(str(exc))
    result["model"] = described
    if json_out and json_out != "-":
        Path(json_out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    click.echo(json.dumps(result, indent=2) if json_out == "-" else format_eval(result))


def _eval_executor(executor, policy, tokenizer, base_url, executor_model):
    if executor == "openai":
        from flowgrpo.operators.backends import make_backend

        kwargs = {"base_url": base_url}
        if executor_model:
            kwargs["model"] = executor_model
        return make_backend("openai", **kwargs)
    from flowgrpo.operators.backends.hf import HFBackend

    return HFBackend(
        policy,
        tokenizer,
        max_new_tokens=160,
        disable_adapter=True,
        name=f"shared:{getattr(policy.config, 'name_or_path', 'policy')}",
    )
