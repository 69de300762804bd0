"""Experiment trackers (``logging.report_to``): TensorBoard, Weights & Biases, MLflow, through
accelerate's tracker integrations.

The run's :class:`~accelerate.Accelerator` is built with ``log_with`` from
:func:`accelerator_kwargs`; :func:`start_trackers` calls ``init_trackers`` (the resolved config
as flat hyperparameters) and returns a :class:`Trackers` that the metrics writer feeds with
``accelerator.log`` (flat scalar metrics, one call per step) and closes at the end.

Where the files go: TensorBoard event files under ``RUN_DIR/tensorboard/<project>``; W&B's run
files under ``RUN_DIR/wandb`` (``WANDB_MODE=offline`` for no network); MLflow writes to
``MLFLOW_TRACKING_URI``, which must be set (a server, ``sqlite:///...``, or ``file:///...``).
The W&B run id and the MLflow run id are kept in ``RUN_DIR/trackers.json``, so a resumed run
logs into the same tracker runs.

A tracker whose package is not installed is refused before anything is written, with the extra
that installs it (``pip install 'flowgrpo[wandb]'``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import re
from pathlib import Path

from flowgrpo.configuration import ConfigError

logger = logging.getLogger(__name__)

#: Tracker name -> (modules any one of which makes it usable, the flowgrpo extra to install).
TRACKERS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "mlflow": (("mlflow",), "mlflow"),
}
IDS_FILE = "trackers.json"
TENSORBOARD_DIR = "tensorboard"


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path; not imported)."""
    return importlib.util.find_spec(module) is not None


def check_trackers(names) -> None:
    """Raise :class:`ConfigError` for a tracker that is unknown or whose package is missing, and
    for MLflow without ``MLFLOW_TRACKING_URI``."""
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(
                f"logging.report_to: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}"
            )
        modules, extra = TRACKERS[name]
        if not any(is_installed(m) for m in modules):
            raise ConfigError(
                f"logging.report_to: {name} is not installed; pip install 'flowgrpo[{extra}]'"
            )
    if "mlflow" in names and not os.environ.get("MLFLOW_TRACKING_URI"):
        raise ConfigError(
            "logging.report_to: mlflow needs MLFLOW_TRACKING_URI (a server http://HOST:5000, "
            "sqlite:///mlflow.db, or file:///DIR with MLFLOW_ALLOW_FILE_STORE=true)"
        )


def accelerator_kwargs(logging_cfg, run_dir: str | Path) -> dict:
    """``Accelerator(**kwargs)`` for the run's trackers (checked first: see check_trackers)."""
    names = list(logging_cfg.report_to)
    check_trackers(names)
    if not names:
        return {}
    from accelerate.utils import ProjectConfiguration  # heavy: torch; the config reads TRACKERS

    run_dir = Path(run_dir)
    project = ProjectConfiguration(
        project_dir=str(run_dir), logging_dir=str(run_dir / TENSORBOARD_DIR)
    )
    return {"log_with": names, "project_config": project}


def start_trackers(accelerator, config, run_dir: str | Path, resume: bool) -> Trackers | None:
    """``init_trackers`` with the flat config; None when the run reports to no tracker.

    Resumed runs continue the W&B / MLflow runs whose ids ``RUN_DIR/trackers.json`` holds. A
    tracker that fails to start (no W&B login, an MLflow store refusing) raises ``ConfigError``
    with its message on one line.
    """
    names = list(config.logging.report_to)
    if not names:
        return None
    run_dir = Path(run_dir)
    ids = _read_ids(run_dir) if resume else {}
    run_name = config.logging.run_name or run_dir.resolve().name
    init = {
        "wandb": {"dir": str(run_dir), "name": run_name},
        "mlflow": {"run_name": run_name},
    }
    if ids.get("wandb"):
        init["wandb"].update(id=ids["wandb"], resume="allow")
    if ids.get("mlflow"):
        init["mlflow"]["run_id"] = ids["mlflow"]
    # Hyperparameters are logged when a tracker run starts; a continued run keeps them (MLflow
    # refuses changed values, and max_steps usually changes on resume).
    params = None if ids else flat_config(config.resolved())
    try:
        accelerator.init_trackers(config.logging.project, config=params, init_kwargs=init)
    except Exception as exc:  # a tracker's own failure: one line naming it, not a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"logging.report_to: a tracker failed to start: {first}") from exc
    trackers = Trackers(accelerator)
    _write_ids(run_dir, trackers.run_ids())
    logger.info("reporting to %s (project %r, run %r)", ", ".join(names), config.logging.project,
                run_name)  # fmt: skip
    return trackers


class Trackers:
    """The started trackers of a run: ``log`` one step's metrics, ``close`` at the end."""

    def __init__(self, accelerator):
        self.accelerator = accelerator

    def log(self, metrics: dict) -> None:
        """``accelerator.log`` of the flat scalars of one metrics line at its step."""
        self.accelerator.log(flat_scalars(metrics), step=int(metrics["step"]))

    def run_ids(self) -> dict:
        """The W&B and MLflow run ids (to continue the same runs on resume)."""
        ids = {}
        for tracker in self.accelerator.trackers:
            if tracker.name == "wandb" and getattr(tracker, "run", None) is not None:
                ids["wandb"] = tracker.run.id
            elif tracker.name == "mlflow" and getattr(tracker, "active_run", None) is not None:
                ids["mlflow"] = tracker.active_run.info.run_id
        return ids

    def close(self) -> None:
        """Finish every tracker (what ``accelerator.end_training`` does, without destroying the
        process group: the caller may still use it, or build another Trainer)."""
        for tracker in self.accelerator.trackers:
            tracker.finish()
        self.accelerator.trackers.clear()


_BAD_NAME = re.compile(r"[^A-Za-z0-9_\-./ ]")


def flat_scalars(metrics: dict) -> dict[str, float | int]:
    """The numbers of a metrics line, flat: nested mappings as ``key/sub`` (operators,
    structures), booleans as 0/1, lists as ``key/count``; None, NaN and text left out. Names
    keep only characters every tracker accepts; a name that other names sit below is logged as
    ``name/total`` (``loss`` beside ``loss/policy``)."""
    out: dict[str, float | int] = {}

    def put(key: str, value) -> None:
        key = _BAD_NAME.sub("_", key)
        if isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                out[key] = value
        elif isinstance(value, dict):
            for sub, inner in value.items():
                put(f"{key}/{sub}", inner)
        elif isinstance(value, (list, tuple)):
            out[f"{key}/count"] = len(value)

    for key, value in metrics.items():
        if key != "step":
            put(str(key), value)
    # A name that is also a folder of others (loss, loss/policy) cannot be both a file and a
    # folder in MLflow's file store: the leaf becomes <name>/total (loss/total, loss/policy).
    folders = {k.rsplit("/", 1)[0] for k in out if "/" in k}
    return {(f"{k}/total" if k in folders else k): v for k, v in out.items()}


def flat_config(data: dict, prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested config as ``section.key`` hyperparameters: numbers, booleans and strings kept,
    None as ``"null"``, lists as JSON text (what every tracker's hparams accept)."""
    out: dict[str, bool | int | float | str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, f"{name}."))
        elif value is None:
            out[name] = "null"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def _read_ids(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / IDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_ids(run_dir: Path, ids: dict) -> None:
    if ids:
        (run_dir / IDS_FILE).write_text(json.dumps(ids, indent=2) + "\n", encoding="utf-8")
