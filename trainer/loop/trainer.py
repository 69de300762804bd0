"""The training loop: orchestrates rollout, scoring, advantages, update, health, checkpoints.

Each piece lives in its own module (rollout, rewards, advantages, update, health, checkpoint);
this one only wires them together. Runs on a CPU, one GPU or many processes under
``accelerate launch`` (each rank samples its own problems; LoRA gradients are averaged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from flowgrpo.trainer.config import TrainConfig, save_config
from flowgrpo.trainer.monitoring.health import EXIT_CODE_ALERT_STOP, HealthMonitor

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
    """LoRA GRPO-family trainer. ``Trainer(config).train()`` runs the whole thing.

    ``model``/``tokenizer`` may be passed in (tests, notebooks); otherwise they are loaded from
    ``config.model``. ``executor`` overrides the configured executor backend.
    """

    def __init__(
        self,
        config: TrainConfig,
        run_dir: str | Path | None = None,
        resume: bool = False,
        model=None,
        tokenizer=None,
        executor=None,
        on_step: Callable[[dict], None] | None = None,
    ):
        from accelerate import Accelerator

        self.config = config
        self.run_dir = Path(run_dir or config.logging.output_dir)
        self.accelerator = Accelerator()
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        self.on_step = on_step
        self.loss_cfg = config.algorithm.loss
        if self.loss_cfg.max_new_tokens is None:
            self.loss_cfg = replace(self.loss_cfg, max_new_tokens=config.rollout.max_new_tokens)
        self._setup(model, tokenizer, executor, resume)

    # ------------------------------------------------------------------ setup

    def _setup(self, model, tokenizer, executor, resume: bool) -> None:
        from flowgrpo.trainer.loop import setup

        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.accelerator.is_main_process:
            save_config(cfg, self.run_dir / "config.yaml")
        self.model, self.tokenizer = setup.policy(cfg, model, tokenizer, self.accelerator.device)
        self.optimizer, self.scheduler = setup.optimizer(cfg, self.model)
        self.sampler = setup.sampler(cfg, self.rank)
        self.executor, self.exec_limits = setup.executor(cfg, self.model, self.tokenizer, executor)
        self.cache = setup.cache(cfg, self.run_dir)
        from flowgrpo.rewards import RecentWorkflows

        self.history = RecentWorkflows()
        self.monitor = HealthMonitor(cfg.health)
        self.snapshot = None
        self.step = 0
        if resume:
            self._resume()
        self.writer = setup.writer(cfg, self.run_dir, self.accelerator.is_main_process)

    def _resume(self) -> None:
        from flowgrpo.trainer.loop.checkpoint import latest_checkpoint, load_checkpoint
        from flowgrpo.trainer.monitoring.metrics import truncate_jsonl

        path = latest_checkpoint(self.run_dir)
        if path is None:
            logger.info("no checkpoint in %s: starting from scratch", self.run_dir)
            return
        state = load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self.step = state["step"]
        self.sampler.load_state_dict(state["sampler"])
        self.monitor = HealthMonitor(self.config.health, state.get("metrics_history", ()))
        if state.get("recent_workflows"):
            from flowgrpo.rewards import RecentWorkflows

            self.history = RecentWorkflows.from_dict(state["recent_workflows"])
        for name in ("metrics.jsonl", "samples.jsonl"):
            truncate_jsonl(self.run_dir / name, self.step)
        logger.info("resumed from %s at step %d", path, self.step)

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        cfg, checkpoint, stop_reason = self.config, None, None
        try:
            while self.step < cfg.optim.max_steps:
                self.step += 1
                metrics = self._train_step()
                if self.on_step is not None and self.accelerator.is_main_process:
                    self.on_step(metrics)
                every = cfg.logging.save_every
                if every and self.step % every == 0 and self.step < cfg.optim.max_steps:
                    checkpoint = self._save()
                if self._any_rank(self.monitor.should_stop):
                    stop_reason = self.monitor.stop_reason or "another process stopped on an alert"
                    break
            checkpoint = self._save()
        finally:
            if self.writer is not None:
                self.writer.close()
        code = EXIT_CODE_ALERT_STOP if stop_reason else 0
        return TrainResult(self.step, self.run_dir, checkpoint, code, stop_reason)

    def _mean_over_ranks(self, value: float) -> float:
        import torch

        t = torch.tensor([float(value)], device=self.accelerator.device)
        return float(self.accelerator.reduce(t, reduction="mean"))

    def _any_rank(self, flag: bool) -> bool:
        if self.world == 1:
            return bool(flag)
        import torch

        t = torch.tensor([1.0 if flag else 0.0], device=self.accelerator.device)
        return float(self.accelerator.reduce(t, reduction="sum")) > 0

    def _save(self):
        from flowgrpo.trainer.loop.checkpoint import save_checkpoint

        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return None
        state = {
            "sampler": self.sampler.state_dict(),
            "metrics_history": self.monitor.history[-200:],
            "recent_workflows": self.history.to_dict(),
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
        from flowgrpo.trainer.loop import step as step_mod

        start = time.perf_counter()
        scored = step_mod.rollout_and_score(self)
        metrics = {"step": self.step, **scored.metrics}
        if self.world > 1:  # every rank decides on the same, global rates
            for key in ("fallback_rate", "validity_rate"):
                metrics[key] = self._mean_over_ranks(metrics[key])
        rollback = step_mod.maybe_rollback(self, metrics)
        if not rollback:
            scored = step_mod.select_training_groups(self, scored)
            metrics.update(
                kept_groups=scored.metrics["kept_groups"],
                resampled_groups=scored.metrics["resampled_groups"],
            )
        if rollback or (scored.train is None and self.world == 1):
            metrics.update(
                loss=0.0,
                grad_norm=0.0,
                skipped_update=True,
                rollback=rollback,
                entropy=step_mod.rollout_entropy(self, scored.rollout),
            )
        else:
            if self.config.health.guard == "rollback":
                from flowgrpo.trainer.monitoring.guard import take_snapshot

                self.snapshot = take_snapshot(self.model, self.optimizer, self.step)
            metrics.update(
                step_mod.update(self, scored.train), skipped_update=False, rollback=False
            )
        elapsed = time.perf_counter() - start
        tokens = float(scored.train_tokens)
        metrics.setdefault("kl", None)  # null: not computed (beta = 0); see algorithm.loss.beta
        metrics.setdefault("collapse", None)
        metrics.update(
            step_time=elapsed,
            tokens_per_s=tokens / max(elapsed, 1e-9),
            cache_hit_rate=self.cache.hit_rate if self.cache else None,
        )
        metrics["alerts"] = [a.to_dict() for a in self.monitor.observe(metrics)]
        if self.writer is not None:
            self.writer.write(metrics, scored.samples)
        return metrics
