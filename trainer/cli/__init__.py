"""The ``flowgrpo`` command line: a thin click shell over the library.

Holds: ``app`` (the click group and every command's options; nothing else), the command bodies
``dsl`` (validate, run), ``train``, ``reports`` (diagnose, analyze) and ``evaluate`` (eval), which
turn options into library calls, print results and map errors to exit codes, and ``common``
(helpers they share). The CLI is the only place that prints or parses arguments. May import
every other part of flowgrpo; nothing imports it. ``flowgrpo validate`` starts without torch:
torch-importing modules are imported inside the command bodies that need them.
"""

from flowgrpo.trainer.cli.app import main

__all__ = ["main"]
