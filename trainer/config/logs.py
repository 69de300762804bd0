"""The ``logging`` section: where and how often a run writes, and its experiment trackers
(:class:`LoggingConfig`). Data only: a tracker's package is imported when the run starts."""

from __future__ import annotations

from dataclasses import dataclass

from flowgrpo.configuration import check, check_types, from_dict
from flowgrpo.trainer.monitoring.trackers import TRACKERS

__all__ = ["LoggingConfig"]


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
        check_types(self, "logging.")
        for name in self.report_to:
            check(
                name in TRACKERS,
                "logging.report_to",
                f"unknown tracker {name!r}; choose from {', '.join(TRACKERS)}",
            )
        object.__setattr__(self, "report_to", tuple(dict.fromkeys(self.report_to)))
        check(bool(self.project.strip()), "logging.project", "give a project name, e.g. flowgrpo")
        check(self.save_every >= 0, "logging.save_every",
              f"got {self.save_every}; give a step count, or 0 for only at the end")  # fmt: skip
        check(self.keep_checkpoints >= 0, "logging.keep_checkpoints",
              f"got {self.keep_checkpoints}; give a count, or 0 to keep all")  # fmt: skip
        check(self.samples_per_step >= -1, "logging.samples_per_step",
              f"got {self.samples_per_step}; give a count, or -1 for all")  # fmt: skip

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
