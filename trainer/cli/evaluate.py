"""Body of ``flowgrpo eval``: evaluate a checkpoint or the base model, or compare two results."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml
from tqdm import tqdm

from flowgrpo.operators.backends import make_backend
from flowgrpo.operators.backends.hf import HFBackend
from flowgrpo.trainer.cli.common import console_logging, fail
from flowgrpo.trainer.reports.evaluate import (
    EvalSettings,
    evaluate,
    format_eval,
    load_for_eval,
)
from flowgrpo.trainer.reports.evaluate import compare as compare_results


def model_of_run(adapter: str | None) -> str:
    """The base model named in the run's config.yaml (checkpoint's parent), else 'default'."""
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
    compare: tuple[str, str] | None,
) -> None:
    """Evaluate and print (``--json FILE`` also writes the result), or print a comparison."""
    if compare:
        a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in compare)
        click.echo(compare_results(a, b))
        return
    if bool(adapter) == bool(base):
        fail("give exactly one of --adapter RUN_DIR/checkpoint-N or --base")
    console_logging()
    name = model or model_of_run(adapter)
    try:
        settings = EvalSettings(task=task, n=n, k=k, execute=not no_execute)
        click.echo(f"loading {name!r} ...", err=True)
        policy, tokenizer, described = load_for_eval(adapter, name)
        llm = _executor(executor, policy, tokenizer, base_url, executor_model)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    with tqdm(total=n, desc="eval", unit="problem") as bar:
        try:
            result = evaluate(policy, tokenizer, settings, llm, progress=bar.update)
        except (ValueError, FileNotFoundError) as exc:
            fail(str(exc))
    result["model"] = described
    if json_out and json_out != "-":
        Path(json_out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    click.echo(json.dumps(result, indent=2) if json_out == "-" else format_eval(result))


def _executor(executor, policy, tokenizer, base_url, executor_model):
    if executor == "openai":
        kwargs = {"base_url": base_url}
        if executor_model:
            kwargs["model"] = executor_model
        return make_backend("openai", **kwargs)
    return HFBackend(
        policy,
        tokenizer,
        max_new_tokens=160,
        disable_adapter=True,
        name=f"shared:{getattr(policy.config, 'name_or_path', 'policy')}",
    )
