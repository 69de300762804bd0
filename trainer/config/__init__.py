"""The training configuration as data: plain dataclasses, one module per section.

``TrainConfig`` (:mod:`.train`) combines the sections: ``model`` and ``lora`` (:mod:`.model`),
``rollout`` (:mod:`.rollout`), ``algorithm`` with its ``loss`` and ``entropy_control``
(:mod:`.algorithm`), ``optim`` (:mod:`.optim`), ``sft`` (:mod:`.sft`), ``logging``
(:mod:`.logs`), and the sections of the packages below the trainer: ``executor``
(``flowgrpo.operators.executor.section``), ``rewards`` (``flowgrpo.rewards.spec``), ``prompt``
(``flowgrpo.dsl.fewshot``) and ``health`` (``flowgrpo.trainer.monitoring.health_config``).

Loading a config imports neither torch nor the simulation (``tests/trainer/config``): names
that live in registries (advantage, losses, rewards, an executor plugin and its ``options``) are
looked up and checked when the run environment is built (``trainer.loop.environment``).

May import: ``flowgrpo.configuration``, every package below the trainer (their sections and
names, never torch) and ``.monitoring`` (the health section's check names, the trackers' names).
Nothing else of the trainer: every other part reads the config, never the other way round.
"""

from flowgrpo.configuration import ConfigError, from_dict, to_dict
from flowgrpo.operators.executor.section import ExecutorConfig
from flowgrpo.trainer.config.algorithm import AlgorithmConfig, EntropyControl, LossConfig
from flowgrpo.trainer.config.logs import LoggingConfig
from flowgrpo.trainer.config.model import LoraSettings, ModelConfig
from flowgrpo.trainer.config.optim import OptimConfig
from flowgrpo.trainer.config.rollout import K_WARNING, RolloutConfig
from flowgrpo.trainer.config.sft import SFTConfig
from flowgrpo.trainer.config.train import TrainConfig, apply_override, load_config, save_config

__all__ = [
    "K_WARNING",
    "AlgorithmConfig",
    "ConfigError",
    "EntropyControl",
    "ExecutorConfig",
    "LoggingConfig",
    "LoraSettings",
    "LossConfig",
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
