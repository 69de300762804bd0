"""Evaluations as ``flowgrpo eval`` and ``flowgrpo.evaluate`` run them: one checkpoint, the base
model, or every checkpoint of a run with the base model loaded once.

A checkpoint is evaluated as trained: its run's config.yaml gives the defaults of the base model
(name, gguf_file, dtype; tiny-random's seed), the workflow budget and sampling, the prompt with
its operator table, the ``executor`` section and the plugins' metrics hooks; the
:class:`EvalOptions` given override them.

The start and every checkpoint of a run (:func:`evaluate_run`): the base model is loaded once;
the first row (step 0) is the policy before training; each
checkpoint's LoRA adapter is loaded beside it and made the active one (peft ``load_adapter`` and
``set_adapter``), and the one before it deleted. An adapter sits next to the base weights and
generation restores them bit for bit after merging (``loop.policy.merged_adapter``), so the base
weights never change and each checkpoint's numbers are those of its own ``flowgrpo eval``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flowgrpo.configuration import ConfigError, check_types
from flowgrpo.dsl import DEFAULT_STATIC_LIMITS, validate
from flowgrpo.operators.executor import ExecutorConfig, build_executor
from flowgrpo.operators.models import resolve_device
from flowgrpo.trainer.loop.metric_hooks import start_hooks
from flowgrpo.trainer.reports.evaluate import (
    EvalSettings,
    ModelSpec,
    checkpoint_adapter,
    evaluate,
    load_base_model,
    settings_of_run,
)

logger = logging.getLogger(__name__)

__all__ = ["EvalOptions", "EvalSession", "evaluate_one", "evaluate_run", "override_executor"]


@dataclass(frozen=True)
class EvalOptions:
    """The options of an evaluation: ``flowgrpo eval``'s, and ``flowgrpo.evaluate``'s keywords.

    None means: the run's value when a checkpoint is evaluated, else the built-in default.

    Attributes:
        task: task spec (arithmetic[:level], test split; gsm8k:PATH, mbpp:PATH, humaneval,
            jsonl:PATH); None: the run's ``rollout.task`` for a checkpoint, else arithmetic.
        n: number of held-out problems. k: workflows per problem (greedy when 1).
        model: base model ('default', 'tiny-random', a path or hub id).
        dtype: weights dtype (float32, bfloat16, float16). device: cpu, cuda, cuda:N or auto.
        max_new_tokens: workflow budget in tokens. temperature: sampling when k > 1.
        execute: run the workflows (accuracy, cost); off: validity and diversity only.
        executor: sets executor.kind (hf: the base weights in-process, i.e. kind shared).
        base_url / executor_model: executor.base_url / executor.model.
        executor_max_new_tokens: executor.max_new_tokens (tokens per executor call).
        constrained: off or grammar (rollout.constrained: sample only grammar-valid workflows).
        batch: problems sampled in one ``generate`` call (``EvalSettings.batch``); the
            distribution sampled does not depend on it, the speed and memory do.
    """

    task: str | None = None
    n: int = 20
    k: int = 1
    model: str | None = None
    dtype: str | None = None
    device: str = "cpu"
    max_new_tokens: int | None = None
    temperature: float | None = None
    execute: bool = True
    executor: str | None = None
    base_url: str | None = None
    executor_model: str | None = None
    executor_max_new_tokens: int | None = None
    constrained: str | None = None
    batch: int = EvalSettings.batch

    def __post_init__(self):
        check_types(self, "eval.")  # the values' ranges are EvalSettings' and the loaders'


def override_executor(
    base: ExecutorConfig | None,
    kind: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    max_new_tokens: int | None = None,
) -> ExecutorConfig:
    """``base`` (a run's ``executor`` section, or the defaults) with each value given replacing
    its field (``kind`` sets executor.kind). A different kind drops the base's ``model`` and
    ``base_url`` (they name that kind's model and server) unless given; budgets, limits,
    timeouts and retries stay. ``ConfigError`` naming the field for a bad value."""
    section = base if base is not None else ExecutorConfig()
    changes: dict = {}
    if kind is not None and kind != section.kind:
        changes |= {"kind": kind, "model": "default", "base_url": None}
    changes |= {"model": model} if model is not None else {}
    changes |= {"base_url": base_url} if base_url is not None else {}
    changes |= {"max_new_tokens": max_new_tokens} if max_new_tokens is not None else {}
    return dataclasses.replace(section, **changes)


def run_prompt(run):
    """The prompt (with its operator table) a run was trained with: its environment, built
    without executor or training problems (imports the run's plugins, implements its
    ``operators:``); the built-in prompt without a run."""
    # heavy: torch (the loop package); `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.loop.environment import build_environment
    from flowgrpo.trainer.loop.prompt import PolicyPrompt

    if run is None:
        return PolicyPrompt()
    try:
        return build_environment(run, with_executor=False, with_problems=False).prompt
    except ValueError as exc:
        raise ConfigError(f"the run's config.yaml: {exc}") from None


def load_run(path: str | Path | None):
    """The TrainConfig of the run ``path`` (a run directory or one of its checkpoints) belongs
    to; None without a path. ``ConfigError`` when its config.yaml is missing or does not load."""
    if path is None:
        return None
    # heavy: the config schema; `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.rundir import load_run_config

    try:
        return load_run_config(path)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"the run's config.yaml: {exc}") from None


def task_of(run, task: str | None) -> tuple[str, str]:
    """(the task to evaluate on, where it came from): ``task`` when given, else the run's
    ``rollout.task`` (a checkpoint is evaluated on the data it was trained for, its test split
    where the task has one), else ``arithmetic``."""
    if task is not None:  # an empty name is refused by the task loader, not replaced
        return task, "--task"
    if run is not None:
        return run.rollout.task, "the run's rollout.task"
    return "arithmetic", "the default"


class EvalSession:
    """One evaluation's run (or none), settings, prompt, executor section and hooks; the model
    is loaded once by :meth:`load`, and :meth:`use_checkpoint` swaps adapters in."""

    def __init__(self, run, options: EvalOptions):
        o = options
        self.run, self.options = run, options
        self.device = resolve_device(o.device)  # ValueError naming the fix
        self.spec = ModelSpec.of_run(run, o.model, o.dtype)
        self.task, self.task_source = task_of(run, o.task)
        self.settings = settings_of_run(
            run, o.max_new_tokens, o.temperature, o.constrained,
            task=self.task, n=o.n, k=o.k, execute=o.execute, batch=o.batch,
        )  # fmt: skip
        run_or_defaults = run if run is not None else _default_config()
        kind = "shared" if o.executor == "hf" else o.executor  # hf: the base weights in-process
        section = override_executor(
            run_or_defaults.executor, kind, o.executor_model, o.base_url, o.executor_max_new_tokens
        )
        self.config = dataclasses.replace(run_or_defaults, executor=section)
        self.prompt = run_prompt(run)  # the prompt and operators a checkpoint was trained with
        self.model = self.tokenizer = self.llm = self.limits = None
        self.hooks: tuple = ()
        self.adapter: Path | None = None  # the adapter folder active now
        self.loaded = 0  # adapters loaded so far (each gets a name of its own)
        self.described = f"{self.spec.name_or_path} (base)"

    def load(self, adapter: str | Path | None = None) -> None:
        """Load the base model (once), with ``adapter`` (RUN_DIR/checkpoint-N or an adapter
        folder) when given; build the executor and start the plugins' metrics hooks."""
        path = checkpoint_adapter(adapter) if adapter is not None else None
        logger.info("loading %r (%s, %s)", self.spec.name_or_path, self.spec.dtype, self.device)
        self.model, self.tokenizer = load_base_model(self.spec, self.device)  # padded
        if path is not None:
            from peft import PeftModel  # heavy: peft (imports torch)

            self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=self._name())
            self.model.eval()
            self.adapter, self.described = path, f"{self.spec.name_or_path} + {path}"
        self._start()

    def use_model(self, model, tokenizer, described: str = "a model in memory") -> None:
        """Evaluate ``model`` as it is (e.g. a policy just trained, its adapter on) instead of
        loading one: moved to the session's device and put in eval mode; the executor is built
        and the hooks started as :meth:`load` does."""
        self.model, self.tokenizer, self.described = model.to(self.device), tokenizer, described
        self.model.eval()
        self._start()

    def _start(self) -> None:
        if self.settings.execute:  # kind shared: the policy with its adapter disabled
            self.llm, self.limits = build_executor(
                self.config.executor, self.model, self.tokenizer, device=self.device
            )
        self.hooks = start_hooks(self.config)  # plugins' metrics hooks, as in training

    def use_checkpoint(self, checkpoint: str | Path) -> None:
        """Make ``checkpoint``'s adapter the active one (loaded beside the base weights, which
        stay as they are); the adapter active before is deleted."""
        path = checkpoint_adapter(checkpoint)
        if path == self.adapter:
            return
        if self.adapter is None:
            raise ValueError("use_checkpoint: load the session with a first adapter")
        old, name = self.model.active_adapter, self._name()
        self.model.load_adapter(str(path), adapter_name=name)  # in eval mode, not trainable
        self.model.set_adapter(name)
        self.model.delete_adapter(old)
        self.adapter, self.described = path, f"{self.spec.name_or_path} + {path}"

    def _name(self) -> str:
        self.loaded += 1
        return f"checkpoint_{self.loaded}"

    def evaluate(
        self, progress: Callable[[int], None] | None = None, pick=None, picked: str = ""
    ) -> dict:
        """Evaluate the model as it is now: the JSON-ready result of ``flowgrpo eval``. With
        ``pick`` (``problem -> workflow``, described by ``picked``) its workflows are scored
        instead of the model's, in the same setting."""
        if pick is not None:
            pick = self._checked(pick, picked)
        result = evaluate(
            self.model, self.tokenizer, self.settings, self.llm, self.limits,
            progress=progress, hooks=self.hooks, prompt=self.prompt, pick=pick,
        )  # fmt: skip
        result["model"] = picked or self.described
        llm, limits = self.llm, self.limits
        result["settings"] = {  # what it ran with (the run's defaults or the options)
            **dataclasses.asdict(self.settings),
            "device": self.device,
            "dtype": self.spec.dtype,
            "executor": getattr(llm, "settings_key", None) if llm is not None else None,
            "executor_limits": dataclasses.asdict(limits) if limits is not None else None,
        }
        return result

    def _checked(self, pick, picked: str):
        """``pick``, raising ``ValueError`` where it writes a workflow this setting does not
        accept (a search made with another call budget or operator table): scored, every such
        workflow is invalid, and the result would be zeros with no reason given."""
        limits = self.limits.static_limits() if self.limits is not None else DEFAULT_STATIC_LIMITS
        table = self.prompt.operators if self.prompt is not None else None

        def checked(problem):
            workflow = pick(problem)
            report = validate(workflow, domain=problem.domain, operators=table, limits=limits)
            if not report.ok:
                raise ValueError(
                    f"{picked or 'the pick'} writes {workflow!r} for {problem.id}, which this "
                    f"setting does not accept ({report.errors[0].message}): search in the "
                    "setting you evaluate in (flowgrpo search --config RUN_DIR/config.yaml)"
                )
            return workflow

        return checked


def evaluate_one(adapter: str | Path | None, options: EvalOptions, progress=None) -> dict:
    """The result of ``flowgrpo eval``: ``adapter`` (RUN_DIR/checkpoint-N) as trained, or the
    base model (``adapter`` None)."""
    session = EvalSession(load_run(adapter), options)
    session.load(adapter)
    return session.evaluate(progress)


def evaluate_run(
    run_dir: str | Path, options: EvalOptions, progress: Callable[[int], None] | None = None
) -> dict:
    """The start (step 0, :func:`_start_row`) and every checkpoint of ``run_dir``, oldest
    first, with the base model loaded once: ``{"run_dir", "checkpoints": [{"step",
    "checkpoint", **result}, ...]}``, each checkpoint's result that of ``flowgrpo eval
    --adapter`` of it. ``ConfigError`` when there is no checkpoint."""
    # heavy: the config schema (the run folder's layout); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.rundir import list_checkpoints

    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        raise ConfigError(no_checkpoints(run_dir))
    run = load_run(run_dir)
    session = EvalSession(run, options)
    session.load(checkpoints[0][1])
    rows = [_start_row(session, run, progress)]
    for step, path in checkpoints:
        session.use_checkpoint(path)
        logger.info("evaluating %s", path)
        rows.append({"step": step, "checkpoint": str(path), **session.evaluate(progress)})
    return {"run_dir": str(run_dir), "checkpoints": rows}


#: What the step-0 row of a run without ``model.init_adapter`` evaluated.
BASE_START = "start: the base model (a fresh adapter has B = 0)"


def _start_row(session: EvalSession, run, progress) -> dict:
    """Step 0, the policy before training: the run's ``model.init_adapter``, else the base
    model with the adapter off (a fresh LoRA adapter is B = 0: the base model's behaviour)."""
    init = run.model.init_adapter if run is not None else None
    if init:
        session.use_checkpoint(init)
        logger.info("evaluating the start adapter %s", init)
        return {
            "step": 0,
            "checkpoint": str(checkpoint_adapter(init)),
            **session.evaluate(progress),
        }
    logger.info("evaluating the start: the base model")
    with session.model.disable_adapter():
        result = session.evaluate(progress)
    result["model"] = f"{session.spec.name_or_path} (base)"
    return {"step": 0, "checkpoint": BASE_START, **result}


def no_checkpoints(run_dir: str | Path) -> str:
    """The one-line error for a run directory without checkpoints."""
    if not Path(run_dir).is_dir():
        return f"{run_dir}: no such run directory; give the --output-dir of a flowgrpo train run"
    return (
        f"{run_dir}: no checkpoints here (checkpoint-N folders holding adapter/ and "
        "trainer_state.pt); train with logging.save_every > 0, or give another run directory"
    )


def _default_config():
    # heavy: the config schema; `flowgrpo eval --compare` starts without it
    from flowgrpo.trainer.config import TrainConfig

    return TrainConfig()
