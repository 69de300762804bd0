"""Body of ``flowgrpo train``: resolve the config, then a dry run or the training loop."""

from __future__ import annotations

import sys

import click
import yaml
from tqdm import tqdm

from flowgrpo.configuration import to_dict
from flowgrpo.trainer.cli.common import console_logging, fail, is_quiet, progress, status
from flowgrpo.trainer.reports.estimate import estimate


def resolve_config(config_path, overrides, max_steps, output_dir):
    """The TrainConfig of the options (``--max-steps``/``--output-dir`` as overrides)."""
    # heavy: torch (trainer.config imports the loss module); `flowgrpo validate` starts without it
    from flowgrpo.trainer.config import ConfigError, load_config

    extra = list(overrides)
    if max_steps:
        extra.append(f"optim.max_steps={max_steps}")
    if output_dir:
        extra.append(f"logging.output_dir={output_dir}")
    try:
        return load_config(config_path, tuple(extra))
    except ConfigError as exc:
        fail(f"bad config: {exc}")


def train_command(
    config_path, overrides, max_steps, output_dir, resume, dry_run, overwrite=False
) -> None:
    """Train (or, with ``dry_run``, print the resolved config and a memory estimate);
    ``resume``/``overwrite``: what to do with a run already in the run dir (``loop.rundir``)."""
    cfg = resolve_config(config_path, overrides, max_steps, output_dir)
    if dry_run:
        click.echo(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        click.echo("memory estimate (not a measurement):")
        click.echo(yaml.safe_dump(estimate(cfg), sort_keys=False))
        return
    console_logging()
    # heavy: torch (the loop and the metrics of its tensors); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.monitoring.metrics import console_line

    status(f"run directory: {cfg.logging.output_dir}")
    status(f"loading model {cfg.model.name_or_path!r} ...")
    try:
        trainer = Trainer(cfg, resume=resume, overwrite=overwrite)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    bar = progress(total=cfg.optim.max_steps, initial=trainer.step, desc="train", unit="step")

    def on_step(metrics: dict) -> None:
        bar.update(1)
        if not is_quiet():
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
