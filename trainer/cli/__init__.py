"""The ``flowgrpo`` command line: a thin click shell over the library.

Holds: ``app`` (the click group and every command's options) and ``commands`` (the bodies:
turn options into library calls, print results, map errors to exit codes). The CLI is the only
place that prints or parses arguments. May import every other part of flowgrpo; nothing
imports it.
"""

from flowgrpo.trainer.cli.app import main

__all__ = ["main"]
