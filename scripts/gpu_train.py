"""The training parts of ``scripts/gpu_check.py``: ``train`` (the shipped 7B step: its split
and peak memory against ``--dry-run``'s estimate), ``capacity`` (the largest generation batch
and training group that fit) and ``eval`` (``flowgrpo eval`` of the trained adapter).

Every part returns ``{"rows": [...], "summary": {...}, "notes": [...]}`` (gpu_check writes
them as Markdown and JSON)."""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

import torch
from gpu_common import Clock, Profile, peak, release, reset_peak, sync, train_config

from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop import step as step_module
from flowgrpo.trainer.loop import update as update_module
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.update import UpdateBatch, UpdateSettings, accumulate_gradients

PHASES = ("generation", "fwd_bwd", "optimizer")


def _phase(totals: dict, name: str, fn):
    """``fn`` timed (synchronised) into ``totals[name]`` and its peak memory into
    ``totals[name + '_peak']`` (the peak counter is reset when the phase starts)."""

    def wrapper(*args, **kwargs):
        reset_peak()
        with Clock() as clock:
            result = fn(*args, **kwargs)
        totals[name] = totals.get(name, 0.0) + clock.seconds
        for key, value in peak().items():
            slot = f"{name}_{key}"
            totals[slot] = max(totals.get(slot, 0.0), value)
        return result

    return wrapper


class _Patched:
    """The trainer's generation and gradient functions timed for the ``with`` block."""

    def __init__(self, totals: dict):
        self.totals = totals
        self.saved = (step_module.generate_rollout, update_module.accumulate_gradients)

    def __enter__(self):
        step_module.generate_rollout = _phase(self.totals, "generation", self.saved[0])
        update_module.accumulate_gradients = _phase(self.totals, "fwd_bwd", self.saved[1])
        return self

    def __exit__(self, *exc):
        step_module.generate_rollout, update_module.accumulate_gradients = self.saved
        return False


def _step_row(metrics: dict, totals: dict) -> dict:
    row = {
        "step": metrics["step"],
        "step_s": round(metrics["step_time"], 2),
        "generation_s": round(totals.get("generation", 0.0), 2),
        "scoring_s": round(metrics.get("score_time") or 0.0, 2),
        "fwd_bwd_s": round(totals.get("fwd_bwd", 0.0), 2),
        "optimizer_s": round(totals.get("optimizer", 0.0), 3),
        "updated": not metrics.get("skipped_update", False),
        "completions": metrics.get("num_completions"),
        "validity": metrics.get("rewards/validity/mean", metrics.get("validity")),
    }
    accounted = sum(row[k] for k in ("generation_s", "scoring_s", "fwd_bwd_s", "optimizer_s"))
    row["other_s"] = round(row["step_s"] - accounted, 2)
    for key, value in totals.items():
        if key.endswith("_gib"):
            row[key] = value
    return row


def part_train(profile: Profile, out: Path) -> dict:
    """One warm-up step and ``profile.steps`` timed steps of the shipped setting."""
    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.reports.estimate import estimate

    cfg = train_config(profile, out / "run", 1 + profile.steps)
    totals: dict = {}
    rows: list[dict] = []

    def on_step(metrics: dict) -> None:
        rows.append(_step_row(metrics, totals))
        totals.clear()

    with _Patched(totals):
        with Clock() as build:
            trainer = Trainer(cfg, on_step=on_step, overwrite=True)
        trainer.optimizer.step = _phase(totals, "optimizer", trainer.optimizer.step)
        result = trainer.train()
    del trainer
    release()
    return {"rows": rows, "summary": _train_summary(rows, estimate(cfg), build.seconds, result)}


def _train_summary(rows: list[dict], est: dict, build_s: float, result) -> dict:
    timed_rows = rows[1:] or rows
    summary = {"model_build_s": round(build_s, 1), "timed_steps": len(timed_rows)}
    for key in ("step_s", "generation_s", "scoring_s", "fwd_bwd_s", "optimizer_s", "other_s"):
        summary[f"mean_{key}"] = round(statistics.mean(r[key] for r in timed_rows), 3)
    peaks = [v for r in rows for k, v in r.items() if k.endswith("allocated_gib")]
    reserved = [v for r in rows for k, v in r.items() if k.endswith("reserved_gib")]
    if peaks:
        summary["peak_allocated_gib"] = max(peaks)
        summary["peak_reserved_gib"] = max(reserved)
        total = est.get("total_gib_estimate")
        summary["estimate_gib"] = total
        summary["estimate_parts_gib"] = est.get("gib")
        if total:
            summary["peak_reserved_over_estimate"] = round(max(reserved) / total, 2)
    summary["checkpoint"] = str(result.checkpoint) if result.checkpoint else None
    return summary


def part_capacity(profile: Profile, out: Path) -> dict:
    """The largest generation batch (K x problems rows) and training group (K) that fit."""
    cfg = train_config(profile, out / "capacity", 1)
    model, tokenizer = setup.policy(cfg, device=profile.device)
    k, r = cfg.rollout.num_generations, cfg.rollout
    problems = load_task("arithmetic", n=max(profile.capacity_rows) // k + 1, seed=1)
    rows = []
    for n_rows in (r.problems_per_step * k, *profile.capacity_rows):
        sample = partial(generate_rollout, model, tokenizer, problems[: n_rows // k], k,
                         r.temperature, r.top_p, r.max_new_tokens)  # fmt: skip
        rows.append(_try("generation", n_rows, sample))
    settings = UpdateSettings(loss=cfg.algorithm.loss, logprob_mode=cfg.logprob_mode)
    for group in (k, *profile.capacity_k):
        train = partial(_one_group, model, tokenizer, problems[0], group, r, settings)
        rows.append(_try("train group", group, train))
    del model
    release()
    fits = {kind: max((x["size"] for x in rows if x["kind"] == kind and x["fits"]), default=0)
            for kind in ("generation", "train group")}  # fmt: skip
    return {"rows": rows, "summary": {"largest_generation_rows": fits["generation"],
                                      "largest_train_group": fits["train group"]}}  # fmt: skip


def _one_group(model, tokenizer, problem, k: int, r, settings) -> None:
    rollout = generate_rollout(model, tokenizer, [problem], k, r.temperature, r.top_p,
                               r.max_new_tokens)  # fmt: skip
    batch = UpdateBatch(rollout, torch.linspace(-1.0, 1.0, k))
    reset_peak()
    accumulate_gradients(model, batch, settings)
    sync()
    for p in model.parameters():
        p.grad = None


def _try(kind: str, size: int, fn) -> dict:
    """Run ``fn``; its seconds and peak memory, or that it ran out of memory."""
    release()
    reset_peak()
    try:
        with Clock() as clock:
            fn()
    except torch.cuda.OutOfMemoryError as exc:
        release()
        return {"kind": kind, "size": size, "fits": False, "error": str(exc).splitlines()[0]}
    return {"kind": kind, "size": size, "fits": True, "seconds": round(clock.seconds, 2), **peak()}


def part_eval(profile: Profile, out: Path) -> dict:
    """``flowgrpo eval`` (:func:`flowgrpo.trainer.reports.eval_run.evaluate_one`) of the train
    part's last checkpoint; trains one step first when that part did not run."""
    from flowgrpo.trainer.loop.rundir import latest_checkpoint
    from flowgrpo.trainer.reports.eval_run import EvalOptions, evaluate_one

    checkpoint = latest_checkpoint(out / "run")
    notes = []
    if checkpoint is None:
        from flowgrpo.trainer.loop.trainer import Trainer

        Trainer(train_config(profile, out / "run", 1), overwrite=True).train()
        release()
        checkpoint = latest_checkpoint(out / "run")
        notes.append("no train part before: one training step made the checkpoint")
    options = EvalOptions(task="arithmetic", n=profile.eval_n, k=4, device=profile.device)
    reset_peak()
    with Clock() as clock:
        result = evaluate_one(checkpoint, options)
    row = {"checkpoint": str(checkpoint), "seconds": round(clock.seconds, 1), **peak()}
    keys = ("problems", "samples", "validity_rate", "pass@1", "sim/regret", "executor")
    row.update({k: result[k] for k in keys if k in result})
    release()
    return {"rows": [row], "summary": {"eval_seconds": row["seconds"]}, "notes": notes}
