"""Helpers shared by the command bodies: errors to exit codes, console output (``--quiet``,
``--log-level``), task problems and executor backends built from command-line options."""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import click
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from flowgrpo.operators import models
from flowgrpo.operators.executor import ExecutorConfig, build_executor
from flowgrpo.operators.tasks import load_task

EXIT_USAGE = 2
"""Exit status for usage errors: a bad option, a missing file, a bad config."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_OUTPUT = {"quiet": False, "level": logging.INFO}


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def config_options(config_help: str, set_example: str):
    """``--config`` and ``--set`` of the commands that read a training config."""

    def apply(fn):
        fn = click.option(
            "--set", "overrides", multiple=True, metavar="KEY=VALUE",
            help=f"Override a config value, e.g. {set_example}. Repeatable.",
        )(fn)  # fmt: skip
        return file_option("--config", "config_path", config_help)(fn)

    return apply


def file_option(flag: str, dest: str | None, help: str):
    """A click option naming a file (a folder there is refused by click); ``dest``: the
    parameter's name (None: click's from the flag)."""
    names = (flag,) if dest is None else (flag, dest)
    return click.option(*names, type=click.Path(dir_okay=False), help=help)


def output_file_option(flag: str, dest: str | None, help: str):
    """A :func:`file_option` for a file the command writes: its folder must exist and be
    writable, checked when the command line is read, before any work that the file would hold
    ('-' passes: stdout)."""

    def check(ctx, param, value):
        if value is None or value == "-":
            return value
        folder = Path(value).parent
        if not folder.is_dir():
            raise click.BadParameter(f"no folder {folder} to write {value} in; create it first")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise click.BadParameter(f"cannot write in {folder}; choose another path")
        return value

    names = (flag,) if dest is None else (flag, dest)
    return click.option(*names, type=click.Path(dir_okay=False), callback=check, help=help)


def count_option(flag: str, help: str, default: int | None = None, **kwargs):
    """A click option that takes a whole number >= 1 (click says what is wrong otherwise);
    its default, when it has one, is shown in --help."""
    return click.option(
        flag,
        default=default,
        show_default=default is not None,
        type=click.IntRange(min=1),
        help=help,
        **kwargs,
    )


def output_options(command):
    """``--quiet`` and ``--log-level`` for a command (every flowgrpo command has both)."""

    @click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default=None,
        help="Level of flowgrpo's log lines on stderr [default: INFO, WARNING with --quiet].",
    )
    @click.option(
        "--quiet",
        "-q",
        is_flag=True,
        help="No progress bars, per-step lines or INFO messages; warnings, errors and results "
        "still print.",
    )
    @functools.wraps(command)
    def wrapper(*args, quiet: bool, log_level: str | None, **kwargs):
        # a command run in a caller's process (``main([...])`` from Python, the tests) leaves
        # its log level and quietness behind it as it found them
        before, saved = logging.getLogger("flowgrpo").level, dict(_OUTPUT)
        configure_output(quiet, log_level)
        try:
            with logging_redirect_tqdm():  # log lines above the progress bars, on this stderr
                return command(*args, **kwargs)
        finally:
            logging.getLogger("flowgrpo").setLevel(before)
            _OUTPUT.update(saved)

    return wrapper


def configure_output(quiet: bool = False, log_level: str | None = None) -> None:
    """Set the console output of this command: log level of the ``flowgrpo`` loggers and whether
    progress bars and status lines show (``--quiet``)."""
    level = getattr(logging, log_level.upper()) if log_level else None
    _OUTPUT.update(quiet=quiet, level=level or (logging.WARNING if quiet else logging.INFO))
    if quiet:  # read by these libraries when they are imported (after this, in a CLI process)
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if quiet or not sys.stderr.isatty():  # no bars, and no carriage-return redraws in a log
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        library = sys.modules.get("transformers")
        if library is not None:  # imported before the option was read: it read the variable
            library.utils.logging.disable_progress_bar()
    console_logging()


def is_quiet() -> bool:
    return bool(_OUTPUT["quiet"])


def status(message: str) -> None:
    """A status line on stderr (what is being loaded, where the run goes); silent with --quiet."""
    if not is_quiet():
        click.echo(message, err=True)


def progress(**kwargs) -> tqdm:
    """A tqdm progress bar on stderr, disabled with --quiet or tqdm's own ``TQDM_DISABLE=1``
    (an explicit ``disable=`` would override the variable), and when stderr is not a terminal
    (a log file gets no carriage-return redraws)."""
    off = is_quiet() or os.environ.get("TQDM_DISABLE", "").strip() not in ("", "0")
    return tqdm(file=sys.stderr, disable=True if off else None, **kwargs)


def console_logging() -> None:
    """Log lines of flowgrpo's packages at the level of ``--log-level``/``--quiet``.

    They reach the console through the handler ``output_options`` installs for the command with
    tqdm's ``logging_redirect_tqdm`` (above the progress bars, on the command's stderr, the
    message alone); it is removed when the command ends.
    """
    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation chatter
    logging.getLogger("flowgrpo").setLevel(_OUTPUT["level"])


DEVICE_HELP = models.DEVICES + "."
DTYPES = ("float32", "bfloat16", "float16")


def device_option(device: str) -> str:
    """``--device`` as a torch device string (``operators.models.resolve_device``), or a
    one-line error, exit 2."""
    try:
        return models.resolve_device(device)
    except ValueError as exc:
        fail(f"--device {exc}")


def load_problems(task: str, n: int, seed: int, split: str):
    """Problems of a task spec, or a clear CLI error."""
    try:
        return load_task(task, n=n, seed=seed, split=split)
    except (ValueError, FileNotFoundError, OSError) as exc:
        fail(str(exc))


def build_cli_executor(section: ExecutorConfig, model=None, tokenizer=None, **where):
    """:func:`~flowgrpo.operators.executor.build_executor` (``where``: device, dtype of an hf
    model), its errors turned into one-line messages; loading an hf model says so first."""
    try:
        if section.kind == "hf":
            where.setdefault("dtype", "float32")
            status(f"loading executor model {section.model!r} ({where['dtype']}, "
                   f"{where.get('device', 'cpu')}) ...")  # fmt: skip
        return build_executor(section, model, tokenizer, **where)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
