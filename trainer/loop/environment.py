"""The run environment: everything a run reads that is not config data, built ONCE at setup.

A :class:`~flowgrpo.trainer.config.TrainConfig` is data: loading or constructing one imports
no plugin, registers nothing and looks no name up in a registry. :func:`build_environment` is the
one place where that happens, in this order:

1. the config's ``plugins`` are imported (their registrations run) and its ``operators:``
   records implemented: the run's :class:`~flowgrpo.dsl.OperatorTable` is the process-wide table
   (AFlow's set plus operators plugins declared) extended with the records, which are declared
   in that table only, never process-wide (``operators.custom.load_extensions``);
2. every name the config gives a registry is looked up (estimator, policy loss, aggregation,
   reward components, health checks; a dotted path is imported and registered here), with the
   error naming the field as before;
3. the prompt's examples are validated against the run's table, and the prompt and the table
   become the run's :class:`~.prompt.PolicyPrompt`;
4. the task's training problems are loaded, the plugins' metrics hooks that are on for the run
   are started and, unless told not to, the executor is built.

The Trainer passes the result down (rollout rendering, validation, execution); nothing in it is
process-wide, so two Trainers in one process each use their own prompt and operator table.
Registries of *code* (reward components, operator implementations, ...) stay process-wide, as
a plugin's registrations are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import OperatorTable
from flowgrpo.operators.custom import load_extensions
from flowgrpo.operators.executor import check_executor, executor_limits, probe_executor
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.llm import LLM
from flowgrpo.operators.models import check_model_source
from flowgrpo.operators.tasks import load_task
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.algorithms.advantages import ESTIMATORS
from flowgrpo.trainer.algorithms.losses import check_loss_names
from flowgrpo.trainer.config import TrainConfig
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.metric_hooks import ActiveHook, start_hooks
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.monitoring.health import check_stop_on

__all__ = [
    "ExecutorUnavailable",
    "RunEnvironment",
    "build_environment",
    "check_names",
    "check_run",
]


@dataclass(frozen=True)
class RunEnvironment:
    """What one run uses besides its config, built by :func:`build_environment`.

    Attributes:
        plugins: the config's plugins, imported (module names or file paths, as given).
        operators: the run's operator table (built-ins, plugins' operators, ``operators:``).
        prompt: the policy's prompt with that table (what the rollout renders).
        problems: the training problems of ``rollout.task`` (train split; empty when not
            loaded).
        executor: the executor backend (None when not built, or ``rollout.execute`` is off).
        limits: the interpreter's per-workflow limits (None when the executor was not built).
        registries: registry kind -> the names this run looks up there, all resolved.
        hooks: the plugins' metrics hooks that are on for this run, started (``metric_hooks``).
    """

    plugins: tuple[str, ...]
    operators: OperatorTable
    prompt: PolicyPrompt
    problems: tuple[Problem, ...]
    executor: LLM | None
    limits: Limits | None
    registries: Mapping[str, tuple[str, ...]]
    hooks: tuple[ActiveHook, ...] = ()

    def with_executor(self, executor: LLM | None, limits: Limits) -> RunEnvironment:
        """This environment with its executor (built once the policy is loaded: the shared
        executor runs on the policy's base weights)."""
        return dataclasses.replace(self, executor=executor, limits=limits)


def check_names(config: TrainConfig) -> Mapping[str, tuple[str, ...]]:
    """Look every name ``config`` gives a registry up (dotted paths are imported and registered
    here); ``ConfigError`` naming the field and listing the choices. Returns kind -> names.
    Call it after the config's plugins are imported (:func:`build_environment` does)."""
    try:
        ESTIMATORS.get(config.algorithm.advantage)
    except ValueError as exc:
        raise ConfigError(f"algorithm.advantage: {exc}") from None
    check_loss_names(config.algorithm.loss)
    try:
        config.rewards.check_names()
    except ValueError as exc:
        raise ConfigError(f"rewards: {exc}") from None
    check_stop_on(config.health)  # with the built-in checks registered
    try:  # a kind of BACKENDS (a plugin's, a built-in plugin's, 'pkg.mod:make') is imported
        backends = check_executor(config.executor, config.rollout.task)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    loss = config.algorithm.loss
    return MappingProxyType(
        {
            "advantage estimator": (config.algorithm.advantage,),
            "policy loss": (loss.policy_loss,),
            "loss aggregation": (loss.loss_agg,),
            "reward component": tuple(config.rewards.weights),
            "health check": tuple(config.health.stop_on),
            "executor backend": backends,
        }
    )


def _problems(config: TrainConfig) -> tuple[Problem, ...]:
    r = config.rollout
    try:
        return tuple(load_task(r.task, n=r.train_size, seed=r.seed, split="train"))
    except ValueError as exc:
        message = str(exc)
        where = "" if message.startswith("rollout.task") else "rollout.task: "
        raise ConfigError(f"{where}{message}") from None


def build_environment(
    config: TrainConfig,
    model=None,
    tokenizer=None,
    executor: LLM | None = None,
    *,
    with_executor: bool = True,
    with_problems: bool = True,
) -> RunEnvironment:
    """The run environment of ``config`` (see the module docstring).

    ``model``/``tokenizer``: the policy (the ``shared`` executor runs on its base weights).
    ``executor``: use this backend instead of building the configured one. ``with_executor``
    False: no executor (``--dry-run``, evaluation, checks); ``with_problems`` False: no training
    problems (evaluation, which has its own). Errors are :class:`ConfigError` naming the field.
    """
    table = load_extensions(config.plugins, config.operators)
    registries = check_names(config)
    static = executor_limits(config.executor).static_limits()  # the count the reward uses
    prompt = PolicyPrompt(config.prompt.check(table, static), table)
    problems = _problems(config) if with_problems else ()
    for problem in problems:  # a label missing from one problem fails here, not at its step
        prompt.spec.meta_lines(problem.id, problem.meta)
    llm, limits = None, None
    if with_executor:
        llm, limits = setup.executor(config, model, tokenizer, executor)
    hooks = start_hooks(config)
    return RunEnvironment(
        tuple(config.plugins), table, prompt, problems, llm, limits, registries, hooks
    )


def check_run(config: TrainConfig) -> RunEnvironment:
    """Every check a run makes before any model loads, the same for ``flowgrpo train``, its
    ``--dry-run`` and ``flowgrpo.train``: the run environment without its executor (plugins,
    registry names, operators, prompt, problems, metrics hooks), the policy model's local path
    (:func:`~flowgrpo.operators.models.check_model_source`) and, for a server executor, its
    model list asked (``probe_executor``). Returns the environment, which the Trainer then
    completes with the executor (:meth:`RunEnvironment.with_executor`).

    Raises :class:`ConfigError` naming the field for bad config, ``FileNotFoundError`` /
    ``UnicodeDecodeError`` for a problems or prompt file, and ``ValueError`` starting with
    ``executor:`` when the executor cannot answer."""
    environment = build_environment(config, with_executor=False)
    try:
        check_model_source(config.model.name_or_path, config.model.gguf_file)
    except ValueError as exc:
        field = "model." if str(exc).startswith("gguf_file") else "model.name_or_path: "
        raise ConfigError(f"{field}{exc}") from None
    try:
        probe_executor(config.executor)
    except (ValueError, ImportError) as exc:
        raise ExecutorUnavailable(f"executor: {exc}") from None
    return environment


class ExecutorUnavailable(ValueError):
    """The run's executor cannot answer (a server down, a model it does not serve, a missing
    package): the message starts with ``executor:`` and says what to do."""
