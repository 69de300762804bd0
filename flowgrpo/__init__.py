"""flowgrpo: train language models to write AFlow-style workflow programs with GRPO-family RL.

The installed packages live under this one namespace (see docs/ARCHITECTURE.md)::

    flowgrpo.dsl        the workflow language: grammar, parser, validator (no torch)
    flowgrpo.operators  executor LLM backends, sandbox, operators, interpreter, tasks
    flowgrpo.rewards    reward components and their combination
    flowgrpo.trainer    the LoRA GRPO trainer, monitoring, reports and the ``flowgrpo`` CLI

``flowgrpo.registry`` is the one registry helper every package uses.

From Python, :func:`train` and :func:`evaluate` (``flowgrpo.api``) do what ``flowgrpo train`` and
``flowgrpo eval`` do. Importing ``flowgrpo`` imports only them (the standard library and
``flowgrpo.configuration``); the trainer, torch and transformers load when they are called.
"""

from flowgrpo.api import RunResult, evaluate, train

__version__ = "0.2.0"

__all__ = ["RunResult", "__version__", "evaluate", "train"]
