"""The training loop: orchestrates rollout, scoring, advantages, update, health, checkpoints.

Each piece lives in its own module (rollout, rewards, advantages, update, health, checkpoint);
this one only wires them together: one step is :meth:`Trainer._train_step`, a sequence of calls
to the typed functions of :mod:`.step` and :mod:`.update`. Runs on a CPU, one GPU or many
processes under ``accelerate launch`` (each rank samples its own problems; the loss of the whole
step is normalised over all ranks and the LoRA gradients are summed).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from flowgrpo.operators.llm import CountingLLM
from flowgrpo.rewards import RecentWorkflows
from flowgrpo.trainer.config import TrainConfig
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop import step as steps
from flowgrpo.trainer.loop.checkpoint import load_checkpoint, save_checkpoint
from flowgrpo.trainer.loop.environment import RunEnvironment, build_environment
from flowgrpo.trainer.loop.interrupt import RunAbandoned, StopOnSignal
from flowgrpo.trainer.loop.metric_hooks import rollout_hook_metrics
from flowgrpo.trainer.loop.policy import frozen_linear_weights, trainable_values
from flowgrpo.trainer.loop.rollout import ProblemSampler
from flowgrpo.trainer.loop.rundir import (
    check_run_dir,
    finish_resume,
    latest_checkpoint,
    start_run_dir,
)
from flowgrpo.trainer.loop.sampling_cache import SamplingCache
from flowgrpo.trainer.loop.state import (
    StepState,
    initial_state,
    next_state,
    next_tie_temperature,
    state_metrics,
)
from flowgrpo.trainer.loop.update import (
    UPDATE_KEYS,
    UpdateBatch,
    UpdateSettings,
    policy_update,
    rollout_entropy,
)
from flowgrpo.trainer.monitoring.collapse import collapse_at
from flowgrpo.trainer.monitoring.guard import restore_snapshot, take_snapshot
from flowgrpo.trainer.monitoring.health import EXIT_CODE_ALERT_STOP, HealthMonitor
from flowgrpo.trainer.monitoring.metrics import complete_metrics, truncate_jsonl

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """How a run ended: steps done, run dir, last checkpoint, and the exit code for the CLI."""

    steps: int
    run_dir: Path
    checkpoint: Path | None
    exit_code: int = 0
    stop_reason: str | None = None


class Trainer:
    """LoRA GRPO-family trainer. ``Trainer(config, environment).train()`` runs the whole thing.

    ``environment``: the run environment :func:`.environment.check_run` built and checked (the
    front ends pass it, so a run builds it once); None: built here. ``model``/``tokenizer`` may
    be passed in (tests, notebooks); otherwise they are loaded from ``config.model``.
    ``executor`` overrides the configured executor backend.
    """

    def __init__(
        self,
        config: TrainConfig,
        environment: RunEnvironment | None = None,
        *,
        run_dir: str | Path | None = None,
        resume: bool = False,
        model=None,
        tokenizer=None,
        executor=None,
        on_step: Callable[[dict], None] | None = None,
        overwrite: bool = False,
    ):
        self.config = config
        self.run_dir = Path(run_dir or config.logging.output_dir)
        self.accelerator = setup.accelerator(config, self.run_dir)
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        self.on_step = on_step
        cfg = config
        self.update_settings = UpdateSettings(
            loss=cfg.algorithm.loss,
            num_iterations=cfg.algorithm.num_iterations,
            logprob_mode=cfg.logprob_mode,
            temperature=cfg.rollout.temperature,
            max_grad_norm=cfg.optim.max_grad_norm,
            world_size=self.world,
            bf16=cfg.optim.bf16,
        )
        self.state = initial_state(cfg)  # what changes between steps (loop.state)
        self._setup(environment, model, tokenizer, executor, resume, overwrite)

    # ------------------------------------------------------------------ setup

    def _setup(self, environment, model, tokenizer, executor, resume: bool, overwrite: bool):
        cfg = self.config
        main = self.accelerator.is_main_process
        # refuses (RunDirError) before anything is written; config.yaml once all is built
        check_run_dir(cfg, self.run_dir, resume, overwrite)
        setup.warn_hot_unconstrained(cfg)
        self.model, self.tokenizer = setup.policy(cfg, model, tokenizer, self.accelerator.device)
        if cfg.algorithm.reference == "start":  # the start as loaded, before any resume
            self.update_settings = replace(
                self.update_settings, reference_values=trainable_values(self.model)
            )
        setup.warn_emulated_bf16(
            {"rollout.sample_dtype=bfloat16": cfg.rollout.sample_dtype == "bfloat16",
             "optim.bf16": cfg.optim.bf16},
            self.accelerator.device,
        )  # fmt: skip
        if cfg.optim.bf16:  # the base never changes: its bf16 copies are made once
            weights = frozen_linear_weights(self.model, torch.bfloat16)
            self.update_settings = replace(self.update_settings, bf16_weights=weights)
        self.optimizer, self.scheduler = setup.optimizer(cfg, self.model)
        # plugins, registry names, operator table, prompt, problems: once, by the front end
        # (check_run) or here; the executor once the policy is loaded (shared runs on it)
        if environment is None:
            environment = build_environment(cfg, with_executor=False)
        llm, limits = setup.executor(cfg, self.model, self.tokenizer, executor)
        self.counter = CountingLLM(llm) if llm is not None else None  # executor_calls per step
        self.environment = environment.with_executor(self.counter, limits)
        if not resume:  # clears an overwritten run: before the cache reads it
            start_run_dir(cfg, self.run_dir, overwrite, main)
        seed = cfg.rollout.seed + 1000 * self.rank  # each rank draws its own problems
        self.sampler = ProblemSampler(self.environment.problems, seed=seed)
        self.cache = setup.cache(cfg, self.run_dir)
        self.history = RecentWorkflows()
        self.monitor = HealthMonitor(cfg.health)
        self.snapshot = None
        self.step = 0
        if resume:
            self._resume()
            if main:  # a failed resume writes nothing
                finish_resume(cfg, self.run_dir)
        self.step_env = steps.StepEnv(
            cfg, self.model, self.tokenizer, self.environment, self.cache, self.history,
            SamplingCache(),
        )  # fmt: skip
        self.writer = setup.writer(cfg, self.run_dir, self.accelerator, resume)

    def _resume(self) -> None:
        path = latest_checkpoint(self.run_dir)
        if path is None:
            logger.info("no checkpoint in %s: starting from scratch", self.run_dir)
            return
        state = load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self.step = state["step"]
        self.sampler.load_state_dict(state["sampler"])
        self.monitor = HealthMonitor(self.config.health, state.get("metrics_history", ()))
        if state.get("recent_workflows"):
            self.history = RecentWorkflows.from_dict(state["recent_workflows"])
        self.state = _saved_state(state, self.config, self.monitor.history)
        for name in ("metrics.jsonl", "samples.jsonl"):
            truncate_jsonl(self.run_dir / name, self.step)
        self._cut_cache(state.get("cache_lines"))
        logger.info("resumed from %s at step %d", path, self.step)

    def _cut_cache(self, lines: int | None) -> None:
        """The execution cache as it was at the checkpoint (None: a checkpoint from before it
        was recorded); the main process cuts the shared file, every process reloads it."""
        if lines is None:
            return
        main = self.accelerator.is_main_process
        if main:
            self.cache.cut_back(lines)
        self.accelerator.wait_for_everyone()
        if not main:
            self.cache.cut_back(lines, rewrite=False)

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        """Run to ``optim.max_steps`` and save; stop early on an alert named in
        ``health.stop_on`` (exit code 3) or on SIGINT/SIGTERM (:mod:`.interrupt`: the step under
        way is finished and saved, exit code 130/143; a second signal abandons it unsaved)."""
        self.completed_step = self.step  # the last step whose metrics line is written
        checkpoint, stop_reason, code = None, None, 0
        try:
            with StopOnSignal() as signals:
                stop_reason, code = self._run_steps(signals)
                checkpoint = self._save()
        except RunAbandoned as exc:
            main = self.accelerator.is_main_process
            checkpoint = latest_checkpoint(self.run_dir) if main else None
            stop_reason = (
                f"{exc} during step {self.completed_step + 1}: stopped at once, nothing saved "
                f"(last checkpoint: {checkpoint})"
            )
            code, self.step = exc.exit_code, self.completed_step
        finally:
            if self.writer is not None:
                self.writer.close()
        return TrainResult(self.step, self.run_dir, checkpoint, code, stop_reason)

    def _run_steps(self, signals: StopOnSignal) -> tuple[str | None, int]:
        """Steps until max_steps, a stop_on alert or a signal: (stop reason, exit code)."""
        cfg = self.config
        while self.step < cfg.optim.max_steps:
            self.step += 1
            metrics = self._train_step()
            self.completed_step = self.step
            if self.on_step is not None and self.accelerator.is_main_process:
                self.on_step(metrics)
            every = cfg.logging.save_every
            if every and self.step % every == 0 and self.step < cfg.optim.max_steps:
                self._save()
            if self._any_rank(self.monitor.should_stop):
                reason = self.monitor.stop_reason or "another process stopped on an alert"
                return reason, EXIT_CODE_ALERT_STOP
            if self.step < cfg.optim.max_steps and self._any_rank(signals.received is not None):
                return signals.stop(self.step, cfg.optim.max_steps)
        return None, 0

    def _any_rank(self, flag: bool) -> bool:
        if self.world == 1:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=self.accelerator.device)
        return float(self.accelerator.reduce(t, reduction="sum")) > 0

    def _save(self):
        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return None
        state = {
            "sampler": self.sampler.state_dict(),
            "metrics_history": self.monitor.history[-200:],
            "recent_workflows": self.history.to_dict(),
            "step_state": self.state.to_dict(),
            "cache_lines": self.cache.lines,
        }
        return save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.optimizer,
            self.scheduler,
            state,
            self.config.logging.keep_checkpoints,
        )

    def _train_step(self) -> dict:
        """One step: collect -> advantages (once) -> guard -> update -> health; the metrics
        line is assembled once, from what each part returned, and the next state derived from
        it (:func:`.state.next_state`)."""
        start, state = time.perf_counter(), self.state
        calls_before = self.counter.requests if self.counter is not None else 0
        first = steps.first_rollout(self.step_env, self.sampler.draw)
        observed = {"step": self.step, **steps.rollout_metrics_of(first)}
        hooks = self.environment.hooks  # plugins' metrics hooks that are on for this run
        observed.update(rollout_hook_metrics(hooks, first.table, first.rollout))
        observed = self._mean_over_ranks(observed)  # every rank decides on the same numbers
        collapse, rollback = self._maybe_rollback(observed)
        if rollback:
            collected = steps.untrained(first)
        else:
            collected = steps.collect(
                self.step_env, self.sampler.draw, first, state.tie_temperature
            )
        adv_N = steps.compute_train_advantages(self.config, collected.train)
        trained = self._mean_over_ranks(steps.train_metrics(collected, adv_N))
        batch = None
        if not rollback and collected.train is not None:
            batch = UpdateBatch(collected.train.rollout, adv_N)
        update, updated = self._update(batch, collected, rollback)
        elapsed = time.perf_counter() - start
        metrics = {
            **observed, "collapse": collapse, **trained, **update,
            "skipped_update": not updated, "rollback": rollback,
            **state_metrics(state, self.config, updated),
            "step_time": elapsed,
            "tokens_per_s": collected.generated_tokens / max(elapsed, 1e-9),
            "cache_hit_rate": self.cache.hit_rate if self.cache else None,
            "executor_calls": (self.counter.requests - calls_before) if self.counter else None,
        }  # fmt: skip
        metrics["alerts"] = [a.to_dict() for a in self.monitor.observe(metrics)]
        metrics = complete_metrics(metrics)
        self.state = next_state(state, metrics, self.config)
        if self.writer is not None:
            limit = self.config.logging.samples_per_step
            self.writer.write(metrics, steps.sample_rows(self.step, collected, adv_N, limit))
        return metrics

    def _update(self, batch, collected, rollback: bool) -> tuple[dict, bool]:
        """The policy update of the step (or its no-update numbers) and whether it ran."""
        first = collected.first.rollout
        if rollback or not self._any_rank(batch is not None):
            # No gradient this step: loss and norm are truly 0 (the zero_grad check reads them);
            # the rest was not computed.
            update = {key: None for key in UPDATE_KEYS} | {"loss": 0.0, "grad_norm": 0.0}
            update["entropy"] = rollout_entropy(self.model, first, self.update_settings)
            return update, False
        if self.config.health.guard == "rollback":
            self.snapshot = take_snapshot(self.model, self.optimizer, self.step)
        hot = collected.resample_temperature if collected.train is not None else None
        # a batch resampled hot: log the entropy of the policy as it samples (the first rollout
        # at the step's temperature, before the update), not the hot batch's, so entropy_low
        # still reports a collapse the response is answering
        entropy = None if hot is None else rollout_entropy(self.model, first, self.update_settings)
        settings = self._settings(hot)
        update = policy_update(self.model, self.optimizer, self.scheduler, batch, settings)
        if entropy is not None:
            update["entropy"] = entropy
        return update, True

    def _settings(self, hot: float | None) -> UpdateSettings:
        """This step's update settings: the loss's entropy coefficient is the step state's
        (with ``algorithm.entropy_control`` on; Skywork-OR1), and a batch sampled by the
        replacement rounds of a tied step (``rollout.tie_temperature``) is scored at the
        temperature it was sampled at, so the log-probs are those of the policy that drew it."""
        settings = self.update_settings
        if hot is not None:
            logger.info("step %d: every group tied; trained on groups resampled at temperature "
                        "%.2f (rollout.tie_temperature)", self.step, hot)  # fmt: skip
            settings = replace(settings, temperature=hot)
        if self.config.algorithm.entropy_control.target is None:
            return settings
        coef = self.state.applied_entropy_coef(self.config)
        return replace(settings, loss=replace(settings.loss, entropy_coef=coef))

    def _mean_over_ranks(self, metrics: dict) -> dict:
        """Numeric metrics averaged over processes (None/NaN left out); others as rank 0's."""
        if self.world == 1:
            return metrics
        keys = sorted(k for k, v in metrics.items() if _is_number(v) and k != "step")
        values = [float(metrics[k]) for k in keys]
        present = [0.0 if math.isnan(v) else 1.0 for v in values]
        t = torch.tensor(
            [0.0 if math.isnan(v) else v for v in values] + present,
            device=self.accelerator.device, dtype=torch.float64,
        )  # fmt: skip
        t = self.accelerator.reduce(t, reduction="sum").cpu().tolist()
        out = dict(metrics)
        for i, key in enumerate(keys):
            n = t[len(keys) + i]
            out[key] = t[i] if key in _SUMMED else (t[i] / n if n else math.nan)
        return out

    def _maybe_rollback(self, metrics: dict) -> tuple[dict | None, bool]:
        """Compare this rollout with the one before the last update; undo the update on collapse.

        The same rule as the ``update_collapse`` health check and ``flowgrpo diagnose``
        (:func:`..monitoring.collapse.collapse_at`). Returns (the collapse event as a dict, or
        None; True when the update was rolled back: the step then trains on nothing, since this
        rollout came from the collapsed policy).
        """
        health = self.config.health
        if health.guard == "off":
            return None, False
        history = self.monitor.history
        event = collapse_at([*history, metrics], len(history), health.collapse_rule)
        if event is None:
            return None, False
        if health.guard != "rollback" or self.snapshot is None:
            return event.to_dict(), False
        restore_snapshot(
            self.model, self.optimizer, self.snapshot, health.rollback_lr_factor, self.scheduler
        )
        logger.warning(
            "step %d: update -> collapse (%s): rolled back to the weights before step %s's update",
            metrics["step"], event.reason, self.snapshot.step,
        )  # fmt: skip
        self.snapshot = None
        return event.to_dict(), True


def _saved_state(saved: dict, config: TrainConfig, history) -> StepState:
    """The step state of a checkpoint; a checkpoint of an earlier release (no ``step_state``)
    gives its entropy controller's values, and the tie temperature derived from the last
    metrics line, as that release did."""
    if "step_state" in saved:
        return StepState.from_dict(saved["step_state"], config)
    old = saved.get("entropy_control") or {}
    last = history[-1] if history else None
    data = {"tie_temperature": next_tie_temperature(config.rollout, last)}
    if old:
        data |= {"entropy_coef": old["coef"], "last_entropy": old["entropy"]}
    return StepState.from_dict(data, config)


#: Counts that add up over processes (the rest are averaged).
_SUMMED = frozenset({"num_completions", "kept_groups", "resampled_groups"})


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
