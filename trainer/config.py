"""The training configuration: one dataclass per concern, combined in :class:`TrainConfig`.

Loaded from YAML (:func:`load_config`) with ``--set section.key=value`` overrides; unknown keys
and bad values raise :class:`ConfigError` naming the field and the fix. The resolved config is
saved in the run directory (:func:`save_config`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from flowgrpo.configuration import (
    ConfigError,
    check,
    finite_number,
    from_dict,
    load_yaml,
    to_dict,
)
from flowgrpo.dsl.fewshot import PromptSpec
from flowgrpo.operators.custom import check_records
from flowgrpo.operators.executor import ExecutorConfig, move_deprecated_keys, moved_overrides
from flowgrpo.plugins import check_plugins
from flowgrpo.rewards import RewardSpec
from flowgrpo.trainer.algorithms.entropy_control import EntropyControl
from flowgrpo.trainer.algorithms.losses import LossConfig
from flowgrpo.trainer.model_config import LoraSettings, ModelConfig
from flowgrpo.trainer.monitoring.health import HealthConfig
from flowgrpo.trainer.monitoring.trackers import TRACKERS
from flowgrpo.trainer.sft_config import SFTConfig

logger = logging.getLogger(__name__)

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "ExecutorConfig",
    "LoggingConfig",
    "LoraSettings",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "SFTConfig",
    "TrainConfig",
    "apply_override",
    "from_dict",
    "load_config",
    "save_config",
    "to_dict",
]

K_WARNING = (
    "num_generations (K) = {k} is below 8. With K=2 and std-normalised advantages, any two "
    "different rewards give advantages of equal magnitude (±1 with the population std, ±0.707 "
    "with the unbiased one) however small the gap: a valid workflow scoring 0.2 next to one "
    "scoring 1.0 is pushed away as hard as prose. A real run collapsed into prose after 37 of 38 "
    "updates this way. Use K >= 8, or set rollout.allow_small_groups: true to reproduce it."
)


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling and execution of workflows.

    Attributes:
        task: problems to train on: arithmetic[:easy|medium|hard], gsm8k:PATH, mbpp:PATH,
            humaneval (see operators.tasks).
        train_size: problems in the training pool (generated tasks); eval uses the test split.
        problems_per_step: B, problems per optimizer step.
        num_generations: K, completions per problem (the group). K >= 8 unless
            allow_small_groups (see K_WARNING); K >= 2 always.
        allow_small_groups: permit K < 8: to reproduce the K=2 collapse, or for K = 4 under an
            advantage without std division (dr_grpo), whose groups have no K=2 +-1 failure
            (configs/known-optimum.yaml: 4 problems x 4, issue 20 in RESULTS.md).
        temperature / top_p: sampling of the policy (temperature > 0: a group needs variety).
        max_new_tokens: completion budget in tokens (also Dr. GRPO's constant normaliser).
        generate_merged: sample on merged LoRA weights (faster; base weights restored exactly).
        logprob_mode: shared_prompt (prompt computed once per group) or full.
        constrained: off or grammar (sample and score only grammar-valid text; CONSTRAINED.md).
        execute: run valid workflows with the executor (the ``executor`` section; accuracy/cost
            rewards); off = validity and diversity only.
        executions: runs of each valid sampled workflow (>= 1); accuracy and cost are their
            means, a lower-variance reward (MetaAgent-X, arXiv 2605.14212, uses 4). Each costs
            a full run of executor calls; greedy model executors repeat one answer (warned).
        cache_path: JSONL file for the execution cache (relative to the run dir), or null.
        cache_max_entries: results the execution cache keeps in memory (oldest evicted first;
            each is one workflow's answer on one problem, about 1 KB).
        dynamic_sampling: drop zero-variance groups from the update and replace them with fresh
            problems (DAPO, arXiv 2503.14476), std-based.
        max_resample_rounds: bound on replacement rounds per step.
        tie_temperature: the sampling temperature of the replacement rounds of a step whose
            every group tied (no informative group: a collapsed policy writes one workflow K
            times, and resampling it at its own temperature draws the same again). The groups
            those rounds keep are trained with log-probs at this temperature (Polaris-style
            exploration, An et al. 2025). The trainer's response to ``deadlock``; None = the
            rounds sample at the step's temperature. Needs dynamic sampling.
        tie_temperature_step: added to the tie temperature after a tied step whose hot rounds
            kept no group either (the policy sharpens further while it stays tied), up to
            ``max_tie_temperature``; back to ``tie_temperature`` once a first rollout has an
            informative group. 0: a fixed tie temperature.
        max_tie_temperature: the tie temperature's upper bound (>= ``tie_temperature``).
        seed: problems and sampling seed (rank-offset under multiple processes).
    """

    task: str = "arithmetic"
    train_size: int = 2000
    problems_per_step: int = 2
    num_generations: int = 8
    allow_small_groups: bool = False
    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 40
    generate_merged: bool = True
    logprob_mode: Literal["shared_prompt", "full"] = "shared_prompt"
    constrained: Literal["off", "grammar"] = "off"
    execute: bool = True
    executions: int = 1
    cache_path: str | None = "execution_cache.jsonl"
    cache_max_entries: int = 200_000
    dynamic_sampling: bool = True
    max_resample_rounds: int = 1
    tie_temperature: float | None = None
    tie_temperature_step: float = 0.0
    max_tie_temperature: float = 4.0
    seed: int = 0

    def __post_init__(self):
        k = self.num_generations
        check(
            k >= 2,
            "rollout.num_generations",
            f"K = {k}: a group needs at least 2 samples to have a baseline; use K >= 8",
        )
        if k < 8 and not self.allow_small_groups:
            raise ConfigError("rollout.num_generations: " + K_WARNING.format(k=k))
        check(self.problems_per_step >= 1, "rollout.problems_per_step", "must be >= 1")
        check(
            self.temperature > 0,
            "rollout.temperature",
            "must be > 0: greedy sampling makes every group identical (zero variance)",
        )
        check(0 < self.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
        check(self.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
        for name, ok in (
            ("logprob_mode", ("shared_prompt", "full")),
            ("constrained", ("off", "grammar")),
        ):
            check(getattr(self, name) in ok, f"rollout.{name}", "use " + " or ".join(ok))
        check(self.max_resample_rounds >= 0, "rollout.max_resample_rounds", "must be >= 0")
        self._check_tie_temperature()
        check(
            isinstance(self.executions, int) and self.executions >= 1,
            "rollout.executions",
            "must be an integer >= 1 (runs of each sampled workflow; 1 = run once)",
        )
        check(
            isinstance(self.cache_max_entries, int) and self.cache_max_entries >= 1,
            "rollout.cache_max_entries",
            "must be an integer >= 1 (results kept in memory; set cache_path: null for no cache)",
        )

    def _check_tie_temperature(self) -> None:
        hot = self.tie_temperature
        if hot is None:
            return
        check(
            finite_number(hot) and hot >= self.temperature,
            "rollout.tie_temperature",
            f"must be a number >= rollout.temperature ({self.temperature}), got {hot!r}; "
            "null turns it off",
        )
        step, top = self.tie_temperature_step, self.max_tie_temperature
        check(
            finite_number(step) and step >= 0,
            "rollout.tie_temperature_step",
            f"must be a number >= 0 (0: a fixed tie temperature), got {step!r}",
        )
        check(
            finite_number(top) and top >= hot,
            "rollout.max_tie_temperature",
            f"must be a number >= rollout.tie_temperature ({hot}), got {top!r}",
        )
        check(
            self.dynamic_sampling and self.max_resample_rounds >= 1,
            "rollout.tie_temperature",
            "is the temperature of dynamic sampling's replacement rounds: set "
            "rollout.dynamic_sampling: true and max_resample_rounds >= 1, or tie_temperature: null",
        )


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantage estimator, policy loss and update schedule.

    Attributes:
        advantage: grpo, dr_grpo, rloo, global or gdpo (trainer.algorithms.advantages; looked
            up when the run is built). Default dr_grpo: no std division, so a small reward gap
            gives a small advantage (Dr. GRPO, arXiv 2503.20783): no K=2 ±1 failure.
        loss: policy loss, aggregation, clipping, KL, entropy terms
            (trainer.algorithms.losses.LossConfig).
        num_iterations: μ, updates per rollout (old log-probs stored when μ > 1).
        entropy_control: the entropy coefficient and/or the sampling temperature steered toward
            a target entropy (trainer.algorithms.entropy_control.EntropyControl); off by default.
    """

    advantage: str = "dr_grpo"
    loss: LossConfig = field(default_factory=LossConfig)
    num_iterations: int = 1
    entropy_control: EntropyControl = field(default_factory=EntropyControl)

    def __post_init__(self):
        check(isinstance(self.advantage, str), "algorithm.advantage", "name an estimator")
        check(self.num_iterations >= 1, "algorithm.num_iterations", "must be >= 1")


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation.

    Attributes:
        lr: AdamW learning rate of the LoRA weights. warmup_steps: linear warmup.
        scheduler: constant or cosine (after warmup). weight_decay: AdamW decay.
        max_steps: optimizer steps. max_grad_norm: clipping threshold (0 = off).
        seed: initialisation seed (identical on every rank).
    """

    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    scheduler: Literal["constant", "cosine"] = "constant"
    max_steps: int = 30
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check(self.lr > 0 and math.isfinite(self.lr), "optim.lr", "must be a positive number")
        check(self.scheduler in ("constant", "cosine"), "optim.scheduler", "use constant or cosine")
        check(self.max_steps >= 1, "optim.max_steps", "must be >= 1")
        check(self.max_grad_norm >= 0, "optim.max_grad_norm", "must be >= 0 (0 disables)")


@dataclass(frozen=True)
class LoggingConfig:
    """Where and how often to write, and which experiment trackers get the metrics.

    Attributes:
        output_dir: run directory (metrics.jsonl, samples.jsonl, config.yaml, checkpoints).
        save_every: checkpoint every N steps (and at the end); 0 = only at the end.
        keep_checkpoints: how many recent checkpoints to keep (0: all); each older one is
            deleted when a new one is saved, and the deletion logged.
        samples_per_step: completions written to samples.jsonl per step (-1 = all).
        report_to: experiment trackers that also get every step's scalar metrics, through
            accelerate's integrations: any of tensorboard (event files in RUN_DIR/tensorboard),
            wandb (files in RUN_DIR/wandb; WANDB_MODE=offline for no network) and mlflow (to
            MLFLOW_TRACKING_URI, which must be set). Each needs its package: pip install
            'flowgrpo[wandb]' (or [tensorboard], [mlflow]). [] = metrics.jsonl only.
            ``tensorboard: true`` (the older key) is read as report_to including tensorboard.
        project: the tracker project (W&B project, MLflow experiment, TensorBoard subfolder).
        run_name: the run's name in the trackers (default: the run directory's name).
    """

    output_dir: str = "runs/default"
    save_every: int = 10
    keep_checkpoints: int = 2
    samples_per_step: int = -1
    report_to: tuple[str, ...] = ()
    project: str = "flowgrpo"
    run_name: str | None = None

    def __post_init__(self):
        for name in self.report_to:
            check(
                name in TRACKERS,
                "logging.report_to",
                f"unknown tracker {name!r}; choose from {', '.join(TRACKERS)}",
            )
        object.__setattr__(self, "report_to", tuple(dict.fromkeys(self.report_to)))
        check(bool(self.project.strip()), "logging.project", "give a project name, e.g. flowgrpo")

    @classmethod
    def _from_raw(cls, value, path: str) -> LoggingConfig:
        """From YAML data: ``report_to`` may be one name; ``tensorboard: true|false`` (the
        older key) adds tensorboard to report_to (false adds nothing)."""
        if not isinstance(value, dict):
            return from_dict(cls, value, path)
        data = dict(value)
        report = data.get("report_to")
        if isinstance(report, str):
            report = [report]
        if "tensorboard" in data:
            on = data.pop("tensorboard")
            check(isinstance(on, bool), f"{path}tensorboard", "expected true or false (or use "
                  "report_to: [tensorboard])")  # fmt: skip
            if on:
                report = [*(report or []), "tensorboard"]
        if report is not None:
            data["report_to"] = report
        return from_dict(cls, data, path)


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
        Data only: plugins and registry names wait for ``loop.environment.build_environment``."""
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
        self.executor.check_task(self.rollout.task)  # e.g. an executor for math problems only
        self.algorithm.entropy_control.check_temperature(self.rollout.temperature)
        check(
            loss.reference == "base" or bool(self.model.init_adapter),
            "algorithm.loss.reference",
            "init_adapter anchors the KL to the adapter the run starts from: set "
            "model.init_adapter, or use reference: base",
        )

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
    move_deprecated_keys(data, str(path) if path is not None else "config")
    for assignment in moved_overrides(overrides):  # old rollout.executor* keys: executor.*
        apply_override(data, assignment)
    return from_dict(TrainConfig, data)  # data only: plugins are imported by the environment


def save_config(config: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")
