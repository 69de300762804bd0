"""The Python API: :func:`train` and :func:`evaluate`, what ``flowgrpo train`` and
``flowgrpo eval`` do, from a notebook or a script (both are ``flowgrpo.train`` and
``flowgrpo.evaluate``)::

    import flowgrpo

    run = flowgrpo.train("configs/tiny.yaml", optim__max_steps=2, logging__output_dir="runs/nb")
    run.steps, run.metrics["validity_rate"], run.checkpoint
    flowgrpo.evaluate(run.checkpoint, n=20)                    # one checkpoint, as trained
    flowgrpo.evaluate(run.run_dir, all_checkpoints=True, n=20)  # every checkpoint of the run

Bad input (an unknown config key, a bad value, a missing file, a run directory that already
holds a run) raises :class:`~flowgrpo.configuration.ConfigError` with the one-line message the
CLI prints.

Importing this module imports nothing but the standard library and
``flowgrpo.configuration``: the trainer (torch, transformers, peft) is imported when a function
is called. It is the one module of the ``flowgrpo`` core that reaches the trainer: like the CLI,
it is a front end over the whole library, and ``tests/test_layering.py`` holds it to the CLI's
rule.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from flowgrpo.configuration import ConfigError

__all__ = ["RunResult", "evaluate", "train"]

#: Bad input as the library reports it; the API raises each as a ConfigError.
_INPUT_ERRORS = (ValueError, FileNotFoundError, ImportError)


@dataclass(frozen=True)
class RunResult:
    """What :func:`train` returns.

    Attributes:
        run_dir: the run directory (metrics.jsonl, samples.jsonl, config.yaml, checkpoints).
        steps: optimizer steps done, counting those before a resume.
        metrics: the last line of RUN_DIR/metrics.jsonl (a step's metrics; docs/METRICS.md);
            {} when no step was written.
        checkpoint: the last checkpoint saved (RUN_DIR/checkpoint-N), or None.
        stop_reason: why the run stopped before optim.max_steps (an alert in health.stop_on,
            SIGINT/SIGTERM), or None when it ran to the end.
    """

    run_dir: Path
    steps: int
    metrics: dict
    checkpoint: Path | None
    stop_reason: str | None = None


def train(
    config: str | Path | Any | None = None,
    /,
    *,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[dict], None] | None = None,
    progress: bool = True,
    **overrides: Any,
) -> RunResult:
    """Train as ``flowgrpo train --config CONFIG --set KEY=VALUE ...`` does; return the result.

    Args:
        config: a YAML config file (configs/), a ``TrainConfig``, or None for the defaults.
        resume / overwrite: ``--resume`` (continue from the run directory's last checkpoint)
            and ``--overwrite`` (delete the run already in the directory and start again).
        on_step: called with each step's metrics dict after the step is written.
        progress: print each step's line (the CLI's) and a progress bar, as ``flowgrpo train``
            does; False: silent (``on_step`` still runs; TRL's ``disable_tqdm`` in one switch).
        **overrides: config values, one keyword per ``--set``: ``section__key=value`` is
            ``--set section.key=value`` (``optim__max_steps=2``, ``rewards__weights__format=0.5``);
            a mapping value merges into the section (``optim={"max_steps": 2, "lr": 1e-4}``),
            and ``**{"optim.max_steps": 2}`` is the dotted spelling.

    Overrides are keyword arguments because that is how TRL's ``GRPOConfig(max_steps=...)`` and
    PEFT's ``LoraConfig(r=...)`` take settings; a Python keyword cannot hold a dot, so a nested
    key is written with ``__``, the spelling scikit-learn's ``set_params(step__param=...)``
    made familiar. Values are Python objects, applied as ``--set`` applies its YAML values.

    Raises :class:`~flowgrpo.configuration.ConfigError` (one line) for bad input: an unknown key
    ("did you mean"), a bad value, a missing config or problems file, an executor server that
    cannot answer (asked before the model loads, as the CLI asks), a run directory that holds a
    run (without ``resume``/``overwrite``). A checkpoint that cannot be written raises
    the trainer's ``CheckpointError`` (an ``OSError`` naming the path).

    Under ``accelerate launch`` the process group stays up for what the script does next; call
    ``flowgrpo.trainer.loop.setup.end_process_group()`` when it is done, as ``flowgrpo train``
    does (a process that exits with Gloo's threads alive can abort at shutdown).
    """
    # heavy: torch (the training loop); `import flowgrpo` imports none of it
    from flowgrpo.trainer.loop.environment import check_run
    from flowgrpo.trainer.loop.rundir import METRICS_FILE
    from flowgrpo.trainer.loop.trainer import Trainer

    try:
        cfg = _config(config, overrides)
        environment = check_run(cfg)  # the checks `flowgrpo train` makes, before the model
        trainer = Trainer(cfg, environment, resume=resume, overwrite=overwrite, on_step=on_step)
    except _INPUT_ERRORS as exc:  # one line, raised here: not a traceback deep in the trainer
        raise ConfigError(_in_python(str(exc))) from None
    with _step_printer(progress, cfg.optim.max_steps, trainer.step, on_step) as trainer.on_step:
        result = trainer.train()
    return RunResult(
        run_dir=result.run_dir,
        steps=result.steps,
        metrics=_last_line(result.run_dir / METRICS_FILE),
        checkpoint=result.checkpoint,
        stop_reason=result.stop_reason,
    )


def _step_printer(progress: bool, total: int, initial: int, on_step):
    """The CLI's step lines and progress bar (silent unless ``progress``), then ``on_step``."""
    # heavy: tqdm and the metrics module come with the training loop anyway
    from tqdm.auto import tqdm

    from flowgrpo.trainer.monitoring.metrics import StepPrinter

    bar = tqdm(total=total, initial=initial, desc="train", unit="step", disable=not progress)
    return StepPrinter(bar, lines=progress, on_step=on_step)


def evaluate(
    checkpoint: str | Path | None = None,
    /,
    *,
    base: bool = False,
    all_checkpoints: bool = False,
    json_file: str | Path | None = None,
    **options: Any,
) -> dict:
    """Evaluate as ``flowgrpo eval`` does; return its result (the dict ``--json`` writes).

    Args:
        checkpoint: RUN_DIR/checkpoint-N, evaluated as trained (its run's config.yaml gives
            the defaults); with ``all_checkpoints``, RUN_DIR.
        base: evaluate the untrained base model instead (``--base``; ``model=`` names it).
        all_checkpoints: every checkpoint of RUN_DIR, the model loaded once (``--all``):
            returns ``{"run_dir", "checkpoints": [{"step", "checkpoint", **result}, ...]}``.
        json_file: also write the result there as JSON (``--json FILE``); with
            ``all_checkpoints`` the plot of the metrics over steps is written beside it (.png).
        **options: the other options of ``flowgrpo eval``, by the same names: task, n, k,
            model, dtype, device, max_new_tokens, temperature, execute (``--no-execute`` is
            ``execute=False``), executor, base_url, executor_model, executor_max_new_tokens
            (:class:`~flowgrpo.trainer.reports.eval_run.EvalOptions`).

    Raises :class:`~flowgrpo.configuration.ConfigError` (one line) for bad input: an unknown
    option, a path that holds no checkpoint or run, a bad value.
    """
    if bool(checkpoint) == bool(base):
        raise ConfigError("evaluate: give exactly one of a checkpoint (or RUN_DIR) or base=True")
    if base and all_checkpoints:
        raise ConfigError("evaluate: all_checkpoints evaluates a run's checkpoints; drop base")
    # heavy: torch (the policy and the rollout); `import flowgrpo` imports none of it
    from flowgrpo.trainer.reports import eval_all, eval_run

    known = [field.name for field in fields(eval_run.EvalOptions)]
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"evaluate: unknown option {name!r}; {hint}options: {known}")
    try:
        opts = eval_run.EvalOptions(**options)
        if json_file is not None:  # before the evaluation: its result is not lost at the end
            eval_all.check_report_paths(json_file, plot=all_checkpoints)
        if all_checkpoints:
            result = eval_run.evaluate_run(checkpoint, opts)
        else:
            result = eval_run.evaluate_one(checkpoint, opts)
    except _INPUT_ERRORS as exc:  # one line, raised here: not a traceback deep in the trainer
        raise ConfigError(str(exc)) from None
    if json_file is not None:
        eval_all.write_json(result, json_file)
        if all_checkpoints:
            eval_all.plot_over_steps(result, Path(json_file).with_suffix(".png"))
    return result


#: The CLI's words in a message, and what a caller of :func:`train` writes instead.
_PYTHON_SPELLING = (
    ("--resume", "resume=True"),
    ("--overwrite", "overwrite=True"),
    ("--output-dir", "logging__output_dir="),
)


def _in_python(message: str) -> str:
    """A trainer message with the CLI's flags in this API's spelling (``resume=True``)."""
    for flag, keyword in _PYTHON_SPELLING:
        message = message.replace(flag, keyword)
    return message


def _config(config, overrides: Mapping[str, Any]):
    """The TrainConfig of ``config`` (path, TrainConfig or None) with the keyword overrides."""
    # heavy: the config schema (yaml, the DSL's grammar, the sections); `import flowgrpo` imports
    # none of it
    from flowgrpo.trainer.config import (
        TrainConfig,
        apply_override,
        from_dict,
        load_config,
        to_dict,
    )

    assignments = tuple(_assignment(key, value) for key, value in overrides.items())
    if not isinstance(config, TrainConfig):
        if config is not None and not isinstance(config, (str, Path)):
            raise ConfigError(
                f"train: config is a {type(config).__name__}; give a YAML path, a TrainConfig "
                "or None (the defaults)"
            )
        return load_config(config, assignments)
    data = to_dict(config)
    for assignment in assignments:
        apply_override(data, assignment)
    return from_dict(TrainConfig, data)


def _assignment(key: str, value: Any) -> str:
    """``section__key=value`` as the ``--set`` assignment ``section.key=<value as YAML>``."""
    dotted = key.replace("__", ".")
    try:  # JSON is YAML: --set parses it back to the same value
        text = json.dumps(value, default=_plain)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{dotted}: {exc}; give a number, string, bool, list or dict") from None
    return f"{dotted}={text}"


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"a {type(value).__name__} is not a config value")


def _last_line(path: Path) -> dict:
    """The last JSON line of ``path`` ({} when there is none)."""
    if not path.is_file():
        return {}
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else {}
