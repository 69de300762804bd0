"""The ``executor:`` section of a config (:class:`ExecutorConfig`) and the old flat
``rollout.executor*`` keys it replaces (read for one release, with a deprecation message).

Data only: checking, no backend (:mod:`.build` builds one). Which kinds there are is looked up
when the run is built, not here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from flowgrpo.configuration import ConfigError, check
from flowgrpo.operators.simulation.settings import SimulationSettings

__all__ = ["ExecutorConfig", "move_deprecated_keys", "moved_overrides"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorConfig:
    """The executor: the LLM that runs a workflow's operators, and the budgets of one run.

    Attributes:
        kind: shared (the policy's base weights, adapter disabled), hf (a separate model,
            ``model``), openai (an OpenAI-compatible server at ``base_url``), or a backend kind
            in ``BACKENDS``: simulated (the SIMULATED executor of ``simulation``: accuracies
            come from a model of operators, not from an LLM), a kind a plugin registered, or a
            dotted path ``pkg.mod:make`` (see :mod:`.build` for how it is called).
        model: hf: the model loaded (name or path; ``default`` = SmolLM2-135M-Instruct);
            openai: the model name sent to the server (``default``: FLOWGRPO_EXECUTOR_MODEL);
            a plugin kind: passed as ``model=`` unless ``default``. Unused by shared.
        base_url: openai: the server root including the API prefix, e.g.
            ``http://localhost:8000/v1`` (null: FLOWGRPO_EXECUTOR_BASE_URL, then
            OPENAI_BASE_URL); a plugin kind: passed as ``base_url=`` when set.
        max_new_tokens: cap on the tokens one executor call generates (tokens).
        timeout_s: openai: read timeout of one attempt (seconds; connecting gets
            min(5, this)).
        max_retries: openai: extra attempts after a timeout, dropped connection, HTTP 429 or
            5xx (0 = one attempt). One call fails after at most about (max_retries + 1) x
            timeout_s plus the delays; its workflow is then unscorable (NaN reward,
            ``unscorable_rate``), never scored 0.
        backoff_s: openai: delay before the first retry (seconds), doubled per retry up to
            8 s and jittered; a 429's Retry-After is honoured up to 60 s.
        max_calls: executor calls one workflow run may make (calls; Programmer/Test retries
            count).
        max_seconds: wall-clock budget of one workflow run (seconds, across batched rounds).
        simulation: seed and parameters of the simulated executor
            (:class:`~flowgrpo.operators.simulation.settings.SimulationSettings`; read only
            when kind is simulated).
    """

    kind: str = "shared"
    model: str = "default"
    base_url: str | None = None
    max_new_tokens: int = 160
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 0.5
    max_calls: int = 12
    max_seconds: float = 120.0
    simulation: SimulationSettings = field(default_factory=SimulationSettings)

    #: The flat ``rollout`` keys of releases before 0.3 -> the field of this section that
    #: replaces each (read for one release, with a deprecation message; trainer.config).
    DEPRECATED_ROLLOUT_KEYS: ClassVar[dict[str, str]] = {
        "executor": "kind",
        "executor_model": "model",
        "executor_base_url": "base_url",
        "executor_max_new_tokens": "max_new_tokens",
        "executor_timeout_s": "timeout_s",
        "executor_max_retries": "max_retries",
        "executor_backoff_s": "backoff_s",
        "executor_max_calls": "max_calls",
        "executor_max_seconds": "max_seconds",
        "simulation": "simulation",
    }

    def __post_init__(self):
        check(  # a plugin's backend kind or dotted path is looked up when the run is built
            isinstance(self.kind, str) and bool(self.kind.strip()),
            "executor.kind",
            "name an executor: shared, hf, openai, a backend kind (a plugin's) or 'pkg.mod:make'",
        )
        check(bool(str(self.model).strip()), "executor.model", "name a model, or default")
        check(self.max_new_tokens >= 1, "executor.max_new_tokens", "must be >= 1 (tokens)")
        check(self.timeout_s > 0, "executor.timeout_s", "must be > 0 seconds")
        check(
            isinstance(self.max_retries, int) and self.max_retries >= 0,
            "executor.max_retries",
            "must be an integer >= 0 (0 = one attempt, no retry)",
        )
        check(self.backoff_s >= 0, "executor.backoff_s", "must be >= 0 seconds")
        check(self.max_calls >= 1, "executor.max_calls", "must be >= 1 (calls per workflow)")
        check(self.max_seconds > 0, "executor.max_seconds", "must be > 0 seconds")

    def check_task(self, task: str) -> None:
        """``ConfigError`` when this executor cannot run the problems of ``task`` (a task
        spec, ``rollout.task``); each backend's settings say which it cannot."""
        self.simulation.check_task(self.kind, task)


def _deprecated(old: str, new: str, where: str) -> None:
    logger.warning(
        "%s: rollout.%s is deprecated and will be removed in the next release; it is read as "
        "executor.%s (write that instead)", where, old, new,
    )  # fmt: skip


def move_deprecated_keys(data: dict, where: str = "config") -> dict:
    """Move the old flat ``rollout.executor*`` / ``rollout.simulation`` keys of raw config
    ``data`` to the ``executor`` section, with a deprecation message naming both keys.

    Setting an old key and its new key to different values is a ``ConfigError``. ``where``
    (a file name, or ``config``) begins each message. Returns ``data``, changed in place."""
    old_to_new = ExecutorConfig.DEPRECATED_ROLLOUT_KEYS
    rollout = data.get("rollout")
    old_keys = [key for key in rollout if key in old_to_new] if isinstance(rollout, dict) else []
    if not old_keys:
        return data
    section = data.get("executor")
    if section is None:
        section = data["executor"] = {}
    if not isinstance(section, dict):
        raise ConfigError(f"executor: expected a mapping, got {section!r}")
    for old in old_keys:
        new, value = old_to_new[old], rollout.pop(old)
        if new in section and section[new] != value:
            raise ConfigError(
                f"rollout.{old} (deprecated) = {value!r} and executor.{new} = {section[new]!r} "
                f"are both set: keep executor.{new} only"
            )
        section[new] = value
        _deprecated(old, new, where)
    return data


def _new_key(assignment: str) -> str:
    """``rollout.<old key>...=v`` as ``executor.<new field>...=v`` (with the message)."""
    old_to_new = ExecutorConfig.DEPRECATED_ROLLOUT_KEYS
    dotted, sep, raw = assignment.partition("=")
    keys = dotted.strip().split(".")
    old = keys[1].rstrip(":") if len(keys) > 1 else ""
    if keys[0] != "rollout" or old not in old_to_new:
        return assignment
    _deprecated(old, old_to_new[old], "--set")
    keys[:2] = ["executor", old_to_new[old] + keys[1][len(old) :]]
    return ".".join(keys) + sep + raw


def _value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:  # reported when the override is applied
        return raw


def moved_overrides(overrides: Sequence[str]) -> tuple[str, ...]:
    """The ``--set`` assignments with each old ``rollout.<key>`` rewritten as
    ``executor.<field>`` (with a deprecation message naming both keys). An old and a new key
    given different values in the same command is a ``ConfigError``."""
    moved, given = [], {}  # target key -> (value, assignment as written, written with old key)
    for assignment in overrides:
        new = _new_key(assignment)
        dotted, _, raw = new.partition("=")
        target, value, old = dotted.rstrip(":").strip(), _value(raw), new != assignment
        earlier = given.get(target)
        if earlier is not None and earlier[2] != old and earlier[0] != value:
            first, second = (earlier[1], assignment) if earlier[2] else (assignment, earlier[1])
            raise ConfigError(
                f"--set {first} (deprecated) and --set {second} give {target} different "
                f"values: keep --set {second} only"
            )
        given[target] = (value, assignment, old)
        moved.append(new)
    return tuple(moved)
