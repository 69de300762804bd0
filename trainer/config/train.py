"""The training configuration :class:`TrainConfig`: one section per concern, each a dataclass
of its own module in this package; loading (:func:`load_config`, ``--set`` overrides) and saving.

Unknown keys and bad values raise :class:`ConfigError` naming the field and the fix. The config
is saved in the run directory (:func:`save_config`), the derived values written null while they
follow their budget (:meth:`TrainConfig.to_dict`; :meth:`TrainConfig.resolved` has them).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowgrpo.configuration import ConfigError, check, check_types, from_dict, load_yaml, to_dict
from flowgrpo.dsl.fewshot import PromptSpec
from flowgrpo.files import replace_text
from flowgrpo.operators.custom import check_records
from flowgrpo.operators.executor.section import ExecutorConfig
from flowgrpo.plugins import check_plugins
from flowgrpo.rewards.spec import RewardSpec
from flowgrpo.trainer.config.algorithm import AlgorithmConfig
from flowgrpo.trainer.config.logs import LoggingConfig
from flowgrpo.trainer.config.model import LoraSettings, ModelConfig
from flowgrpo.trainer.config.optim import OptimConfig
from flowgrpo.trainer.config.rollout import RolloutConfig
from flowgrpo.trainer.config.sft import SFTConfig
from flowgrpo.trainer.monitoring.health_config import HealthConfig

__all__ = ["TrainConfig", "apply_override", "load_config", "save_config"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs; see each section's docstring (``executor``: the executor and its
    budgets, :class:`~flowgrpo.operators.executor.ExecutorConfig`). Your own extensions
    (docs/USAGE.md):

    ``plugins``: modules or .py files imported when the run environment is built, before any
    name is looked up. ``operators``: your operators ``{name, role, domains?, description?,
    prompt | function}`` (operators.custom), in the run's operator table. ``prompt``: the
    policy's prompt ``{system, examples, file}`` (dsl.fewshot.PromptSpec; null: built-ins).
    """

    plugins: tuple[str, ...] = ()
    operators: tuple[dict, ...] = ()
    prompt: PromptSpec = field(default_factory=PromptSpec)

    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    rewards: RewardSpec = field(default_factory=RewardSpec)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    health: HealthConfig = field(default_factory=lambda: HealthConfig(guard="rollback"))

    def __post_init__(self):
        """Cross-field rules, checked at load; derived values are derived here and only here.
        Data only: plugins, registry names and an executor plugin's ``executor.options`` wait for
        ``loop.environment.build_environment``."""
        check_types(self, "")
        try:  # as data: nothing is imported or registered here
            check_plugins(self.plugins)
            check_records(self.operators, "operators")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        loss, budget = self.algorithm.loss, self.rollout.max_new_tokens
        if loss.max_new_tokens is None:  # Dr. GRPO's constant normaliser = the generation budget
            loss = dataclasses.replace(loss, max_new_tokens=budget)
            algorithm = dataclasses.replace(self.algorithm, loss=loss)
            object.__setattr__(self, "algorithm", algorithm)
        check(
            loss.max_new_tokens == budget,
            "algorithm.loss.max_new_tokens",
            f"{loss.max_new_tokens} differs from rollout.max_new_tokens={budget}: Dr. GRPO's "
            "normaliser must be the generation budget; leave it unset (derived) or make them equal",
        )
        check(
            self.algorithm.reference != "start" or bool(self.model.init_adapter),
            "algorithm.reference",
            "start is the adapter model.init_adapter loads: set model.init_adapter, or use "
            "reference: base",
        )
        self._derive_cost_budget()

    def _derive_cost_budget(self) -> None:
        """One call budget: the cost reward's normaliser is ``executor.max_calls`` unless the
        config sets another scale (``rewards.options.cost_max_calls``)."""
        options = self.rewards.options
        if options.cost_max_calls is None:
            options = dataclasses.replace(options, cost_max_calls=self.executor.max_calls)
            object.__setattr__(self, "rewards", dataclasses.replace(self.rewards, options=options))

    def resolved(self) -> dict[str, Any]:
        """Plain data of every value as the run uses it, the derived ones included (what the
        trackers log as hyperparameters and ``--dry-run`` prints)."""
        return {f.name: to_dict(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``config.yaml``, ``flowgrpo.train``'s overrides) in which the derived
        values are written unset (null) where they equal what they derive from, so a config
        read back with another budget (``--set executor.max_calls=4`` on a run's config.yaml)
        derives them afresh instead of keeping the old budget's."""
        data = self.resolved()
        data["algorithm"]["loss"]["max_new_tokens"] = None  # always the rollout budget (checked)
        options = data["rewards"]["options"]
        if options["cost_max_calls"] == self.executor.max_calls:
            options["cost_max_calls"] = None
        return data

    @property
    def logprob_mode(self) -> str:
        """How the update scores completions: ``full`` under gradient checkpointing (it
        disables the KV cache the shared-prompt forward needs), else ``rollout.logprob_mode``."""
        return "full" if self.model.gradient_checkpointing else self.rollout.logprob_mode


# --------------------------------------------------------------------------- loading


def _default_at(keys: list[str]) -> Any:
    """The default value at a dotted path of TrainConfig (None when there is none)."""
    obj: Any = TrainConfig()
    for key in keys:
        if dataclasses.is_dataclass(obj):
            obj = getattr(obj, key, None)
        elif isinstance(obj, dict):
            obj = obj.get(key)
        else:
            return None
    return obj


def _free_mapping(keys: list[str]) -> dict | None:
    """A copy of the default at ``keys`` when it is a free-form mapping (reward weights), else
    None (sections are dataclasses: their defaults come from the dataclass, not from here)."""
    default = _default_at(keys)
    if isinstance(default, dict) or (
        default is not None and not dataclasses.is_dataclass(default) and hasattr(default, "keys")
    ):
        return copy.deepcopy(dict(default))
    return None


def apply_override(data: dict, assignment: str) -> None:
    """Apply ``section.key=value`` (value parsed as YAML) to the raw config dict.

    A mapping is MERGED into the mapping already there (from the YAML file, or the defaults
    when the file does not set it): ``--set rewards.weights.format=0.5`` keeps the other
    weights. Write ``section.key:=value`` to REPLACE the whole value instead, e.g.
    ``--set 'rewards.weights:={validity: 1.0}'``.
    """
    if "=" not in assignment:
        raise ConfigError(
            f"--set {assignment!r}: write section.key=value, e.g. --set rollout.num_generations=16"
        )
    dotted, raw = assignment.split("=", 1)
    replace = dotted.endswith(":")
    value = load_yaml(raw, f"--set {assignment!r}: the value") if raw.strip() else ""
    keys = dotted.rstrip(":").strip().split(".")
    node = data
    for depth, key in enumerate(keys[:-1]):
        if key not in node:
            node[key] = _free_mapping(keys[: depth + 1]) or {}
        node = node[key]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment!r}: {key} is not a section")
    old = node.get(keys[-1])
    if old is None and isinstance(value, dict):
        old = _free_mapping(keys)
    if not replace and isinstance(value, dict) and isinstance(old, dict):
        value = {**old, **value}
    node[keys[-1]] = value


def load_config(path: str | Path | None = None, overrides: tuple[str, ...] = ()) -> TrainConfig:
    """The config from a YAML file (or the defaults) with ``--set`` overrides applied."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist; see configs/ for examples")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: cannot be read as UTF-8 text ({exc})") from None
        data = load_yaml(text, str(p)) or {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{p}: a config is a mapping of sections (model:, rollout:, ...); this file "
                f"holds a YAML {type(data).__name__}: see configs/ for examples"
            )
    for assignment in overrides:
        apply_override(data, assignment)
    return from_dict(TrainConfig, data)  # data only: plugins are imported by the environment


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write ``config`` as YAML to ``path``, replacing the file whole (a kill while a resumed
    run rewrites its config.yaml left it empty)."""
    replace_text(path, yaml.safe_dump(to_dict(config), sort_keys=False))
