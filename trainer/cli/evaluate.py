"""Body of ``flowgrpo eval``: evaluate a checkpoint or the base model, or compare two results.

A checkpoint is evaluated as trained: its run's config.yaml gives the defaults of the base
model, the workflow budget and sampling, and the ``executor`` section (the executor with its
budgets, limits, timeouts and retries; options given override its fields; see
``flowgrpo eval --help``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from flowgrpo.trainer.cli.common import (
    build_cli_executor,
    executor_section,
    fail,
    progress,
    resolve_device,
    status,
)
from flowgrpo.trainer.reports.evaluate import (
    ModelSpec,
    evaluate,
    format_eval,
    load_for_eval,
    settings_of_run,
)
from flowgrpo.trainer.reports.evaluate import compare as compare_results


def run_config_of(checkpoint: str | None):
    """The TrainConfig of the run a checkpoint belongs to (None without a checkpoint), or a
    one-line error when its config.yaml is missing or no longer loads."""
    if not checkpoint:
        return None
    # heavy: torch (trainer.config imports the losses); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.loop.rundir import load_run_config

    try:
        return load_run_config(checkpoint)
    except (ValueError, FileNotFoundError) as exc:
        fail(f"the run's config.yaml: {exc}")


def run_prompt(run):
    """The prompt (with its operator table) a run was trained with: its environment, built
    without executor or training problems (imports the run's plugins, implements its
    ``operators:``); the built-in prompt without a run. A bad config is a one-line error."""
    # heavy: torch (the loop package); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.loop.environment import build_environment
    from flowgrpo.trainer.loop.prompt import PolicyPrompt

    if run is None:
        return PolicyPrompt()
    try:
        return build_environment(run, with_executor=False, with_problems=False).prompt
    except ValueError as exc:
        fail(f"the run's config.yaml: {exc}")


def eval_command(*, adapter, base, compare: tuple[str, str] | None, **options) -> None:
    """Evaluate and print (``--json FILE`` also writes the result), or print a comparison."""
    if compare:
        a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in compare)
        click.echo(compare_results(a, b))
        return
    if bool(adapter) == bool(base):
        fail("give exactly one of --adapter RUN_DIR/checkpoint-N or --base")
    run = run_config_of(adapter)
    prompt = run_prompt(run)  # the checkpoint sees the prompt and operators it was trained with
    o = options
    device = resolve_device(o["device"])
    spec = ModelSpec.of_run(run, o["model"], o["dtype"])
    try:
        settings = settings_of_run(
            run, o["max_new_tokens"], o["temperature"],
            task=o["task"], n=o["n"], k=o["k"], execute=not o["no_execute"],
        )  # fmt: skip
        status(f"loading {spec.name_or_path!r} ({spec.dtype}, {device}) ...")
        policy, tokenizer, described = load_for_eval(adapter, spec, device)
        config = eval_config(run, o)  # the run's executor section, with the options
        llm, limits = eval_executor(config, policy, tokenizer, settings.execute, device)
        hooks = eval_hooks(config)  # plugins' metrics hooks, as in training
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    with progress(total=o["n"], desc="eval", unit="problem") as bar:
        try:
            result = evaluate(
                policy, tokenizer, settings, llm, limits, progress=bar.update,
                hooks=hooks, prompt=prompt,
            )  # fmt: skip
        except (ValueError, FileNotFoundError) as exc:
            fail(str(exc))
    result["model"] = described
    result["settings"] = {  # what it ran with (the run's defaults or the options)
        **dataclasses.asdict(settings),
        "device": device,
        "dtype": spec.dtype,
        "executor": getattr(llm, "settings_key", None) if llm is not None else None,
        "executor_limits": dataclasses.asdict(limits) if limits is not None else None,
    }
    json_out = o["json_out"]
    if json_out and json_out != "-":
        Path(json_out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    click.echo(json.dumps(result, indent=2) if json_out == "-" else format_eval(result))


def eval_config(run, o: dict):
    """The run's TrainConfig (or the defaults) with its ``executor`` section as the options
    override it (``--executor`` sets the kind; hf: the policy's base weights in-process)."""
    # heavy: torch (trainer.config imports the losses); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.config import TrainConfig

    run = run if run is not None else TrainConfig()
    kind = "shared" if o["executor"] == "hf" else o["executor"]
    section = executor_section(
        run.executor, kind, o["executor_model"], o["base_url"], o["executor_max_new_tokens"]
    )
    return dataclasses.replace(run, executor=section)


def eval_hooks(config):
    """The plugins' metrics hooks on for ``config`` (e.g. the analytic numbers an executor
    plugin knows), started as a training run starts them."""
    # heavy: torch (the loop package); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.loop.metric_hooks import start_hooks

    return start_hooks(config)


def eval_executor(config, policy, tokenizer, execute: bool, device: str = "cpu"):
    """(executor backend or None, Limits or None) of ``config``'s executor section (kind
    shared: ``policy`` with its adapter disabled); (None, None) when not executing."""
    if not execute:
        return None, None
    return build_cli_executor(config.executor, policy, tokenizer, device=device)
