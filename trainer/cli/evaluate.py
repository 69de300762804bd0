"""Body of ``flowgrpo eval``: evaluate a checkpoint or the base model, or compare two results.

A checkpoint is evaluated as trained: its run's config.yaml gives the defaults of the base
model, the workflow budget and sampling, and the executor with its budgets and limits
(options given override them; see ``flowgrpo eval --help``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from flowgrpo.operators.backends import make_backend
from flowgrpo.operators.backends.hf import HFBackend
from flowgrpo.operators.interpreter import Limits
from flowgrpo.trainer.cli.common import fail, progress, resolve_device, status
from flowgrpo.trainer.reports.evaluate import (
    ModelSpec,
    evaluate,
    format_eval,
    load_for_eval,
    settings_of_run,
)
from flowgrpo.trainer.reports.evaluate import compare as compare_results

#: The executor's token budget without a run to take it from.
DEFAULT_EXECUTOR_TOKENS = 160


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
        llm, limits = eval_executor(run, policy, tokenizer, settings.execute, o)
        simulation = eval_simulation(run, o)  # SIMULATED executor: analytic numbers too
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    with progress(total=o["n"], desc="eval", unit="problem") as bar:
        try:
            result = evaluate(
                policy, tokenizer, settings, llm, limits, progress=bar.update,
                simulation=simulation, prompt=prompt,
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


def simulated_config(run):
    """The run's TrainConfig (or the defaults) with ``rollout.executor: simulated``: its
    ``rollout.simulation`` section, call budget and reward trade-off are what eval uses."""
    # heavy: torch (trainer.config imports the losses); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.config import TrainConfig

    run = run if run is not None else TrainConfig()
    return dataclasses.replace(run, rollout=dataclasses.replace(run.rollout, executor="simulated"))


def eval_simulation(run, o: dict):
    """RegretSettings when the executor is the SIMULATED one (``--executor simulated``, or a
    run that used it and no ``--executor``), else None."""
    chosen = o["executor"] or (run.rollout.executor if run is not None else None)
    if chosen != "simulated":
        return None
    # heavy: torch (the loop package); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.loop.simulation_metrics import regret_settings

    return regret_settings(simulated_config(run))


def eval_executor(run, policy, tokenizer, execute: bool, o: dict):
    """(executor backend or None, Limits or None): the run's executor unless ``--executor``."""
    if not execute:
        return None, None
    if o["executor"] == "simulated":  # the run's simulation section and budget, else defaults
        # heavy: torch (the training setup builds the executor); eval --compare skips it
        from flowgrpo.trainer.loop.setup import executor as run_executor

        return run_executor(simulated_config(run), policy, tokenizer)
    budget = o["executor_max_new_tokens"]
    if run is not None:
        rollout = dataclasses.replace(
            run.rollout,
            execute=True,
            executor_max_new_tokens=budget or run.rollout.executor_max_new_tokens,
        )  # execute: eval's --no-execute decides, not the run's rollout.execute
        run = dataclasses.replace(run, rollout=rollout)
        budget = run.rollout.executor_max_new_tokens
        limits = Limits(
            max_llm_calls=run.rollout.executor_max_calls,
            max_seconds=run.rollout.executor_max_seconds,
        )
        if o["executor"] is None:
            # heavy: torch (the training setup builds the executor); eval --compare skips it
            from flowgrpo.trainer.loop.setup import executor as run_executor

            return run_executor(run, policy, tokenizer)
    else:
        budget, limits = budget or DEFAULT_EXECUTOR_TOKENS, None
    if o["executor"] == "openai":
        kwargs = {"base_url": o["base_url"], "max_new_tokens": budget}
        if o["executor_model"]:
            kwargs["model"] = o["executor_model"]
        return make_backend("openai", **kwargs), limits
    name = getattr(policy.config, "name_or_path", "policy")
    shared = HFBackend(
        policy, tokenizer, max_new_tokens=budget, disable_adapter=True, name=f"shared:{name}"
    )
    return shared, limits
