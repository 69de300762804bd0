"""The executor of a run: the ``executor:`` config section and the one builder.

:class:`ExecutorConfig` (``executor:`` in a run's YAML; ``TrainConfig.executor``; in
:mod:`.section`) says which LLM runs a workflow's operators and within which budgets;
:func:`build_executor` (:mod:`.build`) turns it into the executor backend and the interpreter's
``Limits``. Training, ``flowgrpo run``, ``flowgrpo eval`` and the scripts all build theirs with
it (``tests/test_one_builder.py``).

A folder of its own above ``operators/backends`` and ``operators/simulation`` (it imports both;
neither imports it), so no folder-level import loop runs through it.
"""

from flowgrpo.operators.executor.build import (
    BUILT_IN_KINDS,
    build_executor,
    check_executor,
    executor_limits,
    probe_executor,
)
from flowgrpo.operators.executor.section import ExecutorConfig

__all__ = [
    "BUILT_IN_KINDS",
    "ExecutorConfig",
    "build_executor",
    "check_executor",
    "executor_limits",
    "probe_executor",
]
