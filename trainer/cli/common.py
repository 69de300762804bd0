"""Helpers shared by the command bodies: errors to exit codes, console logging, task problems
and executor backends built from command-line options."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import NoReturn

import click
from tqdm.contrib.logging import _TqdmLoggingHandler

from flowgrpo.operators.backends import make_backend
from flowgrpo.operators.tasks import load_task

EXIT_USAGE = 2
"""Exit status for usage errors: a bad option, a missing file, a bad config."""


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def console_logging() -> None:
    """INFO lines of flowgrpo's packages on the console, above the progress bar (once)."""
    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation chatter
    root = logging.getLogger()
    if not any(isinstance(h, _TqdmLoggingHandler) for h in root.handlers):
        handler = _TqdmLoggingHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    logging.getLogger("flowgrpo").setLevel(logging.INFO)


def load_problems(task: str, n: int, seed: int, split: str):
    """Problems of a task spec, or a clear CLI error."""
    try:
        return load_task(task, n=n, seed=seed, split=split)
    except (ValueError, FileNotFoundError, OSError) as exc:
        fail(str(exc))


def make_executor(executor: str, model: str, base_url: str | None):
    """The executor backend for ``--executor/--model/--base-url``, errors turned into messages."""
    try:
        if executor == "openai":
            kwargs = {"base_url": base_url}
            if model != "default":
                kwargs["model"] = model
            return make_backend("openai", **kwargs)
        click.echo(f"loading executor model {model!r} ...", err=True)
        return make_backend("hf", name_or_path=model)
    except (ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))
