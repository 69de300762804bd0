"""Body of ``flowgrpo train``: resolve the config, then a dry run or the training loop."""

from __future__ import annotations

import shlex
import sys
from typing import NoReturn

import click
import yaml

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.cli.common import console_logging, fail, is_quiet, progress, status
from flowgrpo.trainer.reports.estimate import estimate


def resolve_config(config_path, overrides, max_steps, output_dir):
    """The TrainConfig of the options (``--max-steps``/``--output-dir`` as overrides)."""
    # heavy: the config schema (yaml, the sections); `flowgrpo validate` starts without it
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


def check_environment(cfg):
    """The run's checks before any model loads (``loop.environment.check_run``, the same the
    Python API makes): the run environment, or a one-line error, exit 2. Run by ``--dry-run``
    and before a real run."""
    # heavy: torch (the loop package); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.environment import ExecutorUnavailable, check_run

    try:
        return check_run(cfg)
    except ConfigError as exc:
        fail(f"bad config: {exc}")
    except (ExecutorUnavailable, FileNotFoundError, UnicodeDecodeError) as exc:
        fail(str(exc))  # the executor, a problems or prompt file: the message names it


def train_command(
    config_path, overrides, max_steps, output_dir, resume, dry_run, overwrite=False
) -> None:
    """Train (or, with ``dry_run``, print the resolved config and a memory estimate);
    ``resume``/``overwrite``: what to do with a run already in the run dir (``loop.rundir``)."""
    cfg = resolve_config(config_path, overrides, max_steps, output_dir)
    if dry_run:
        check_environment(cfg)
        click.echo(yaml.safe_dump(cfg.resolved(), sort_keys=False))
        click.echo("memory estimate (not a measurement):")
        click.echo(yaml.safe_dump(estimate(cfg), sort_keys=False))
        return
    console_logging()
    environment = check_environment(cfg)  # before the model loads; the Trainer uses it
    # heavy: torch (the loop and the metrics of its tensors); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.setup import end_process_group

    try:
        _train(cfg, environment, config_path, overrides, max_steps, resume, overwrite)
    finally:  # the process ends here: under accelerate launch, its process group first
        end_process_group()


def _train(cfg, environment, config_path, overrides, max_steps, resume, overwrite) -> NoReturn:
    """Build the Trainer, train with the console's step lines, report and exit."""
    # heavy: torch (the loop and the metrics of its tensors)
    from flowgrpo.trainer.loop.checkpoint import CheckpointError
    from flowgrpo.trainer.loop.interrupt import AbortOnSignal, RunAbandoned
    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.monitoring.metrics import RunFileError, StepPrinter

    status(f"run directory: {cfg.logging.output_dir}")
    status(f"loading model {cfg.model.name_or_path!r} ...")
    try:
        with AbortOnSignal():  # SIGTERM while the model loads: a message, not a silent exit
            trainer = Trainer(cfg, environment, resume=resume, overwrite=overwrite)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
    except (KeyboardInterrupt, RunAbandoned) as exc:
        code = exc.exit_code if isinstance(exc, RunAbandoned) else 130
        name = "SIGTERM" if code == 143 else "SIGINT (Ctrl-C)"
        fail(f"stopped by {name} while setting up (loading the model): nothing trained or "
             "saved", code)  # fmt: skip
    bar = progress(total=cfg.optim.max_steps, initial=trainer.step, desc="train", unit="step")
    resume_cmd = resume_command(config_path, overrides, max_steps, trainer.run_dir)
    try:
        with StepPrinter(bar, lines=not is_quiet()) as trainer.on_step:
            result = trainer.train()
    except (CheckpointError, RunFileError) as exc:  # disk full: the message names the file
        fail(f"{exc}\nresume with: {resume_cmd}", 1)
    report_result(result, resume_cmd)


def resume_command(config_path, overrides, max_steps, run_dir) -> str:
    """The ``flowgrpo train`` command that continues this run from its last checkpoint."""
    parts = ["flowgrpo", "train"]
    if config_path:
        parts += ["--config", str(config_path)]
    for assignment in overrides:
        parts += ["--set", assignment]
    if max_steps:
        parts += ["--max-steps", str(max_steps)]
    return shlex.join([*parts, "--output-dir", str(run_dir), "--resume"])


def report_result(result, resume: str) -> NoReturn:
    """The end of a run on the console, then exit with its code: 0 done, 3 stopped on an
    alert, 130 / 143 stopped by SIGINT (Ctrl-C) / SIGTERM (``loop.interrupt``); after a stop,
    the command that resumes it."""
    verb = "stopped after" if result.exit_code else "done:"
    click.echo(
        f"{verb} {result.steps} steps; run directory {result.run_dir}; last checkpoint "
        f"{result.checkpoint}"
    )
    click.echo(f"next: flowgrpo diagnose {result.run_dir}  |  flowgrpo analyze {result.run_dir}")
    if result.stop_reason:
        click.echo(result.stop_reason, err=True)
    if result.exit_code and result.checkpoint is not None:
        click.echo(f"resume with: {resume}", err=True)
    elif result.exit_code:
        click.echo("no checkpoint was saved, so there is nothing to resume: start again", err=True)
    sys.exit(result.exit_code)
