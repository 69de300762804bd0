"""Run directories that never surprise: what a run directory holds, and the checks made before
a run writes anything into one. Reading a run folder imports no torch: its checkpoints are
listed here (:func:`list_checkpoints`, :func:`latest_checkpoint`; ``checkpoint`` saves and
loads them).

* ``resume`` with no checkpoint in the directory is an error naming it (not a silent fresh start);
* resuming with a config that changes the model or the adapter's shape (:data:`SHAPE_KEYS`) is an
  error naming the differing keys;
* training into a directory that already holds a run (``metrics.jsonl`` with rows, or a
  ``checkpoint-*``) is refused unless ``overwrite``, which deletes that run's files first;
* a run deletes and overwrites only what it wrote itself: its marker :data:`RUN_MARKER` lists
  the names of :data:`RUN_FILES`, :data:`RUN_DIRS` and the execution cache that did not exist
  when it started (its checkpoints are its own too), and in those folders and checkpoints
  deletes only the files its writers write (a file of the user's there stays, with its
  folder); ``overwrite`` of a directory without a
  marker is refused, and so is a fresh run into a directory whose ``config.yaml``, ``plots/``...
  a run would overwrite but did not write;
* ``rollout.cache_path``, when relative, must stay inside the run directory; an absolute one
  is never deleted;
* ``config.yaml`` (and the marker) are written only after all of that passed and the run's
  model, adapter and executor are built (:func:`start_run_dir`); on ``resume`` only once the
  checkpoint has loaded (:func:`finish_resume`): a run that fails to start writes nothing.

Every refusal is a :class:`RunDirError` (a ``ValueError``): the CLI prints it on one line and
exits 2.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import yaml

from flowgrpo.configuration import to_dict
from flowgrpo.files import png_marked, read_text, remove
from flowgrpo.trainer.config import TrainConfig, load_config, save_config

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
#: The marker of a flowgrpo run directory: the names the run owns (it may delete them).
RUN_MARKER = "flowgrpo-run.json"
METRICS_FILE = "metrics.jsonl"
#: Files a run writes at the top of its directory (besides checkpoints and the execution cache).
RUN_FILES = (METRICS_FILE, "samples.jsonl", CONFIG_FILE, "trackers.json")
#: Folders a run (or its reports) writes: tracker files and plots.
RUN_DIRS = ("tensorboard", "wandb", "plots")
#: Names a cache file may not take (they are the run's own files or folders).
_RESERVED = frozenset((*RUN_FILES, *RUN_DIRS, RUN_MARKER))
#: A checkpoint's folder, ``checkpoint-N`` (its step), and what it holds: the trainer state and
#: the adapter (``PeftModel.from_pretrained`` loads ``checkpoint-N/adapter``).
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: A save in progress (``tempfile.mkdtemp(prefix=".checkpoint-N.")``: eight random characters),
#: renamed when complete, or a checkpoint renamed aside while its step is saved again.
CHECKPOINT_TEMP = re.compile(r"^\.checkpoint-\d+\.(?:[a-z0-9_]{8}|old-\d+)$")
#: What each writer writes in the folder it owns, as paths relative to that folder: a save in
#: a checkpoint (peft's ``save_pretrained`` the adapter's files), the reports in plots/,
#: TensorBoard's event files (under ``tensorboard/<project>``), W&B's run folders and logs.
_SAVED = re.compile(
    r"^(?:trainer_state\.pt|adapter/(?:adapter_config\.json|adapter_model\.safetensors|README\.md))$"
)
_WRITTEN_IN = {
    "plots": re.compile(r"^[\w-]+\.png$"),
    "tensorboard": re.compile(r"^(?:[^/]+/)?events\.out\.tfevents\.[^/]*$"),
    "wandb": re.compile(r"^(?:run-|offline-run-|latest-run$|debug)[^/]*$"),
}
#: What tells a written file from a user's of the same name where the name alone cannot: a
#: report's plot carries flowgrpo's PNG mark (a user's ``plots/reward.png`` does not).
_OURS_IN = {"plots": png_marked}
#: Config keys that decide the model and the adapter's shape: a checkpoint only fits these.
SHAPE_KEYS = (
    "model.name_or_path",
    "model.gguf_file",
    "lora.r",
    "lora.alpha",
    "lora.target_modules",
)
#: The same keys as named in a checkpoint's adapter/adapter_config.json (peft).
_ADAPTER_KEYS = {"lora.r": "r", "lora.alpha": "lora_alpha", "lora.target_modules": "target_modules"}


class RunDirError(ValueError):
    """A run directory that does not fit the request (the message says what to do)."""


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (renamed into place), oldest first; temporary dirs are ignored, and
    so is a folder that lost its state or its adapter weights (a delete cut short), so a
    resume takes the last whole checkpoint before it."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for child in run_dir.iterdir():
        match = CHECKPOINT_NAME.match(child.name)
        if match is None:  # the run's own files: no need to look inside them
            continue
        if (child / STATE_FILE).is_file() and (child / ADAPTER_DIR / ADAPTER_WEIGHTS).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def checkpoint_folders(run_dir: str | Path) -> list[Path]:
    """Every folder a save wrote in ``run_dir``: ``checkpoint-N`` (complete or not) and the
    temporary ``.checkpoint-N.*`` of a killed save; never a name of the user's such as
    ``checkpoint-notes.txt`` or ``checkpoint-1-backup``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(
        child
        for child in run_dir.iterdir()
        if (CHECKPOINT_NAME.match(child.name) or CHECKPOINT_TEMP.match(child.name))
        and child.is_dir()
        and not child.is_symlink()
    )


def remove_checkpoint(folder: Path) -> bool:
    """Delete what a save wrote in a checkpoint folder (:func:`remove_written`): a file of the
    user's in it (``checkpoint-99/notes.txt``, an eval's output) stays, with its folder."""
    return remove_written(folder, _SAVED)


def remove_written(
    folder: Path, written: re.Pattern, ours: Callable[[Path], bool] | None = None, inside: str = ""
) -> bool:
    """Delete what a writer put in ``folder``: the entries whose path relative to it
    ``written`` matches (a folder matched goes whole) and, where ``ours`` is given, that it
    accepts, then the folders left empty. A file of the user's stays, and so does the folder
    holding it (logged); a link is left alone (what it points to is not the run's). Returns
    whether ``folder`` is gone."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for child in sorted(folder.iterdir()):
        path = f"{inside}{child.name}"
        if written.match(path) and (ours is None or ours(child)):
            remove(child)
        elif child.is_dir() and not child.is_symlink():
            remove_written(child, written, ours, f"{path}/")
    if any(folder.iterdir()):
        if not inside:
            kept = ", ".join(sorted(p.name for p in folder.iterdir()))
            logger.warning("kept %s: it holds files the run does not write (%s)", folder, kept)
        return False
    folder.rmdir()
    return True


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def adapter_folder(path: str | Path) -> Path | None:
    """The folder holding a LoRA adapter's ``adapter_config.json``: ``path`` itself (an adapter
    folder, as ``flowgrpo sft`` writes one) or ``path/adapter`` (a checkpoint); None when
    neither holds one."""
    path = Path(path)
    for candidate in (path, path / ADAPTER_DIR):
        if (candidate / "adapter_config.json").is_file():
            return candidate
    return None


def existing_run(run_dir: str | Path) -> list[str]:
    """What makes ``run_dir`` hold a run (``["metrics.jsonl with 3 steps", "checkpoint-2"]``)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    metrics = run_dir / METRICS_FILE
    if metrics.is_file():
        rows = sum(1 for line in read_text(metrics).splitlines() if line.strip())
        if rows:
            found.append(f"{METRICS_FILE} with {rows} step{'s' if rows != 1 else ''}")
    found += [p.name for p in checkpoint_folders(run_dir) if not p.name.startswith(".")]
    return found


def shape_changes(config: TrainConfig, run_dir: str | Path, checkpoint: Path | None) -> list[str]:
    """``"lora.r: 4 -> 8"`` for each :data:`SHAPE_KEYS` value that differs between ``config`` and
    the run (its config.yaml, and the checkpoint's adapter_config.json for the LoRA shape)."""
    new = _flat(to_dict(config))
    old: dict = {}
    saved = Path(run_dir) / CONFIG_FILE
    if saved.is_file():
        old.update(_flat(_saved_mapping(saved, yaml.safe_load)))
    adapter = checkpoint / ADAPTER_DIR / "adapter_config.json" if checkpoint else None
    if adapter is not None and adapter.is_file():
        peft = _saved_mapping(adapter, json.loads)
        old.update({key: peft[name] for key, name in _ADAPTER_KEYS.items() if name in peft})
    changes = []
    for key in SHAPE_KEYS:
        if key in old and _norm(old[key]) != _norm(new.get(key)):
            changes.append(f"{key}: {old[key]!r} -> {new.get(key)!r}")
    return changes


def _saved_mapping(path: Path, load) -> dict:
    """The mapping a run saved in ``path`` (read by ``load``); a :class:`RunDirError` naming
    the file when it does not read as one (empty: nothing saved)."""
    try:
        data = load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunDirError(
            f"{path} does not load ({why}): the run's files are damaged; restore it, or start "
            "the run again with --overwrite"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunDirError(
            f"{path} holds a {type(data).__name__}, not the mapping a run saves: the run's files "
            "are damaged; restore it, or start the run again with --overwrite"
        )
    return data


def check_run_dir(
    config: TrainConfig, run_dir: str | Path, resume: bool, overwrite: bool
) -> Path | None:
    """Raise :class:`RunDirError` unless a run may start (or resume) in ``run_dir``; returns the
    checkpoint to resume from (None for a fresh run). Writes nothing."""
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise RunDirError(
            f"--resume and --overwrite exclude each other: --resume continues the run in "
            f"{run_dir}, --overwrite deletes it"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir} is a file, not a run directory: choose another --output-dir "
            "(logging.output_dir)"
        )
    check_cache_path(config, run_dir)
    found = existing_run(run_dir)
    if not resume:
        if found and not overwrite:
            raise RunDirError(
                f"{run_dir} already holds a run ({', '.join(found)}): continue it with --resume, "
                "delete its run files and start again with --overwrite, or choose another "
                "--output-dir"
            )
        _check_foreign_files(config, run_dir, found, overwrite)
        return None
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        start = "with --overwrite" if found else "without --resume"
        raise RunDirError(
            f"--resume: no checkpoint in {run_dir} (a checkpoint-N folder with adapter/ and "
            f"trainer_state.pt); start a new run there {start}"
        )
    changes = shape_changes(config, run_dir, checkpoint)
    if changes:
        raise RunDirError(
            f"--resume: the config changes the model or the adapter of the run in {run_dir} "
            f"({'; '.join(changes)}); its checkpoints only fit the old values: resume with "
            f"--config {run_dir / CONFIG_FILE}, or train into another --output-dir"
        )
    reached = int(CHECKPOINT_NAME.match(checkpoint.name).group(1))
    if config.optim.max_steps < reached:
        raise RunDirError(
            f"--resume: the run in {run_dir} has reached step {reached} ({checkpoint.name}), past "
            f"optim.max_steps {config.optim.max_steps}: nothing to train; give --max-steps "
            f"{reached} or more"
        )
    return checkpoint


def check_cache_path(config: TrainConfig, run_dir: Path) -> None:
    """A relative ``rollout.cache_path`` must name a file inside ``run_dir`` (a run deletes it
    on ``--overwrite``); an absolute one is the user's and is never deleted."""
    path = config.rollout.cache_path
    if not path or Path(path).is_absolute():
        return
    inside = Path(run_dir).resolve()
    target = (inside / path).resolve()
    if target == inside or not target.is_relative_to(inside) or Path(path).name in _RESERVED:
        raise RunDirError(
            f"rollout.cache_path {path!r} is not a file inside the run directory {run_dir}: "
            "give a file name such as execution_cache.jsonl, or an absolute path (never deleted)"
        )


def _owned_names(config: TrainConfig) -> list[str]:
    names = [*RUN_FILES, *RUN_DIRS]
    path = config.rollout.cache_path
    if path and not Path(path).is_absolute():
        names.append(path)
    return names


def _check_foreign_files(config, run_dir: Path, found: list[str], overwrite: bool) -> None:
    """Refuse to overwrite or delete what no flowgrpo run in ``run_dir`` wrote."""
    if _read_marker(run_dir) is not None:
        return
    present = [n for n in _owned_names(config) if (run_dir / n).exists()]
    if overwrite and (found or present):
        raise RunDirError(
            f"--overwrite: {run_dir} has no {RUN_MARKER}, so nothing shows which of its files "
            f"({', '.join(found + present)}) a flowgrpo run wrote; delete them yourself or "
            "choose another --output-dir"
        )
    if present:
        raise RunDirError(
            f"{run_dir} holds {', '.join(present)}, which a run would overwrite, and no flowgrpo "
            "run: move them or choose another --output-dir"
        )


def _read_marker(run_dir: Path) -> list[str] | None:
    """The names the run in ``run_dir`` owns, or None without a (readable) marker."""
    try:
        data = json.loads((Path(run_dir) / RUN_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    owned = data.get("owned") if isinstance(data, dict) else None
    return [str(n) for n in owned] if isinstance(owned, list) else None


def _write_marker(config: TrainConfig, run_dir: Path, owned: list[str] | None = None) -> None:
    """Mark ``run_dir`` as a run owning ``owned`` (default: the run names absent right now)."""
    if owned is None:
        owned = [n for n in _owned_names(config) if not (run_dir / n).exists()]
    text = json.dumps({"flowgrpo_run": 1, "owned": sorted(set(owned))}, indent=1)
    (run_dir / RUN_MARKER).write_text(text + "\n", encoding="utf-8")


def clear_run(run_dir: str | Path) -> list[str]:
    """Delete what the run in ``run_dir`` wrote (its marker's names, checkpoints, the marker);
    returns their names. Names outside the directory are never followed."""
    run_dir = Path(run_dir)
    inside = run_dir.resolve()
    owned = _read_marker(run_dir) or []
    paths = [run_dir / name for name in owned if (run_dir / name).resolve().is_relative_to(inside)]
    checkpoints = checkpoint_folders(run_dir)
    paths += checkpoints
    removed = []
    for path in [*paths, run_dir / RUN_MARKER]:
        if path.resolve() == inside:
            continue
        written = _WRITTEN_IN.get(path.name) if path.parent == run_dir else None
        if written is not None and not path.is_symlink():  # a link: only the link goes
            gone = remove_written(path, written, _OURS_IN.get(path.name))
        elif path in checkpoints:
            gone = remove_checkpoint(path)
        else:
            gone = remove(path)
        if gone:
            removed.append(path.name)
    if removed:
        logger.warning("--overwrite: deleted the old run's %s in %s", ", ".join(removed), run_dir)
    return removed


def start_run_dir(
    config: TrainConfig, run_dir: str | Path, overwrite: bool = False, main_process: bool = True
) -> None:
    """A fresh run, once :func:`check_run_dir` passed and everything that can refuse bad input
    (model, adapter, executor) is built: on the main process clear the old run when
    ``overwrite``, create the directory, write the marker and config.yaml."""
    if main_process:
        run_dir = Path(run_dir)
        if overwrite:
            clear_run(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_marker(config, run_dir)
        save_config(config, run_dir / CONFIG_FILE)


def finish_resume(config: TrainConfig, run_dir: str | Path) -> None:
    """After a resumed run's checkpoint loaded: write its config.yaml (the new values), and a
    marker for a run written before markers existed (it owns the run names it holds)."""
    run_dir = Path(run_dir)
    if _read_marker(run_dir) is None:
        present = [n for n in _owned_names(config) if (run_dir / n).exists()]
        _write_marker(config, run_dir, [*present, CONFIG_FILE])
    save_config(config, run_dir / CONFIG_FILE)


def run_config_path(path: str | Path) -> Path | None:
    """The config.yaml of a run, given its directory or one of its checkpoints (or None)."""
    path = Path(path).resolve()
    for folder in (path, *path.parents[:2]):
        if (folder / CONFIG_FILE).is_file():
            return folder / CONFIG_FILE
    return None


def load_run_config(path: str | Path) -> TrainConfig:
    """The TrainConfig a run was trained with (its config.yaml), from its directory or a
    checkpoint; ``FileNotFoundError`` when there is none, ``ConfigError`` when it does not load."""
    found = run_config_path(path)
    if found is None:
        raise FileNotFoundError(
            f"{path}: no config.yaml here or in the folders above; give RUN_DIR/checkpoint-N "
            "of a flowgrpo run"
        )
    return load_config(found)


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _norm(value):
    """Lists compare as sets (target_modules order does not matter to peft)."""
    if isinstance(value, (list, tuple, set)):
        return sorted(map(str, value))
    return value
