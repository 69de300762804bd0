"""Soak benchmark: hundreds of training steps on the tiny model; memory growth and time shares.

    python scripts/soak.py --steps 300 --out runs/soak/soak.json

Runs the real loop (``Trainer``) on ``configs/tiny.yaml`` (a tiny random Llama, the shared
executor = the same weights with the adapter disabled), and reports:

* resident memory (RSS: psutil, else /proc/self/statm) at the first step and every ``--every``
  steps, its growth per window, and a least-squares slope after a warm-up (MB per 100 steps);
  Python objects alive (``gc``), metrics lines the health monitor holds, execution-cache
  entries, so that growth can be traced to its owner;
* the share of step time in each stage: generation (metrics ``gen_time``), scoring and
  execution (``score_time``), the policy update (timed here around ``policy_update``) and the
  rest (advantages, metrics, health checks), plus the time between steps (checkpoints).

The tiny random model writes prose, which would leave nothing to execute or train on, so by
default half of each step's sampled completions are replaced (tokens and text) by valid
workflows from a small pool (``--valid-share``): the executor, the cache, the diversity history
and the update all run as in a real run. That replacement and the update timer are this
script's instrumentation; the package is not changed. Not a timed test: it asserts nothing.
Results of a run are in docs/BENCHMARKS.md ("Soak").
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from flowgrpo.dsl import validate
from flowgrpo.files import replace_text, unwritable
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop import trainer as trainer_mod
from flowgrpo.trainer.loop.interrupt import EXIT_CODES
from flowgrpo.trainer.loop.rollout import Rollout, completion_mask
from flowgrpo.trainer.loop.trainer import Trainer

#: Short valid math workflows (the tiny tokenizer spends about one token per character; each
#: fits in ``--max-new-tokens`` 32 with its EOS).
POOL = (
    "Custom",
    "AnswerGenerate",
    "Custom -> Format",
    "Custom -> Custom",
    "AnswerGenerate -> Format",
    "AnswerGenerate -> Review",
    "Custom -> Review -> Revise",
    "(Custom -> Review) * 2",
    "[Custom, Custom] -> ScEnsemble",
    "[Custom, Custom] -> MdEnsemble",
)
#: The soak's settings on top of the config (``--set`` comes after and wins): one problem per
#: step (K = 8 completions) keeps 300 steps near ten minutes on 2 busy cores; a large problem
#: pool lets the execution cache grow as in a real run; a checkpoint every 50 steps.
SOAK_SETTINGS = (
    "rollout.problems_per_step=1",
    "rollout.train_size=2000",
    "logging.save_every=50",
)


def rss_mb() -> float:
    try:
        import psutil  # optional: falls back to /proc/self/statm

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def with_workflows(generate, share: float, seed: int):
    """``generate_rollout`` whose rows are replaced by pool workflows with probability
    ``share`` (tokens, mask and text), after the real sampling (its time is kept)."""
    rng = random.Random(seed)

    def sample(model, tokenizer, problems, group_size, *args, **kwargs) -> Rollout:
        rollout = generate(model, tokenizer, problems, group_size, *args, **kwargs)
        rows = rollout.completion_ids_NT.tolist()
        texts, eos = list(rollout.texts), tokenizer.eos_token_id
        for i in range(len(rows)):
            if rng.random() < share:
                texts[i] = rng.choice(POOL)
                rows[i] = [*tokenizer(texts[i], add_special_tokens=False)["input_ids"], eos]
        width = max(map(len, rows))
        ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
        mask, truncated = completion_mask(ids, [eos])
        return Rollout(
            rollout.problems, group_size, rollout.prompt_ids, ids, mask, truncated, texts,
            rollout.seconds,
        )  # fmt: skip

    return sample


def timed(function, sink: list[float]):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)

    return wrapper


def run(args) -> dict:
    """Train ``args.steps`` steps, recording memory and times after each; the raw records."""
    for text in POOL:
        assert validate(text, domain="math").ok, text
    overrides = (
        f"logging.output_dir={args.run_dir}",
        f"optim.max_steps={args.steps}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        *SOAK_SETTINGS,
        *args.set,
    )
    cfg = load_config(args.config, overrides)
    if args.valid_share > 0:
        step_mod.generate_rollout = with_workflows(
            step_mod.generate_rollout, args.valid_share, cfg.rollout.seed
        )
    update_times: list[float] = []
    trainer_mod.policy_update = timed(trainer_mod.policy_update, update_times)
    trainer = Trainer(cfg, overwrite=True)
    records, last = [], [time.perf_counter()]

    def on_step(metrics: dict) -> None:
        now = time.perf_counter()
        step = metrics["step"]
        row = {key: metrics.get(key) for key in ("step", "step_time", "gen_time", "score_time")}
        row["update_time"] = update_times.pop() if update_times else 0.0
        row["wall"] = now - last[0]
        row["rss_mb"] = rss_mb()
        if step == 1 or step % args.every == 0:
            gc.collect()
            row["rss_mb_after_gc"] = rss_mb()
            row["objects"] = len(gc.get_objects())
            row["monitor_lines"] = len(trainer.monitor.history)
            row["monitor_alerts"] = len(trainer.monitor.alerts)
            row["cache_entries"] = len(getattr(trainer.cache, "_data", ()))
        records.append(row)
        last[0] = now

    trainer.on_step = on_step
    started = time.perf_counter()
    result = trainer.train()
    if result.exit_code in EXIT_CODES.values():  # Ctrl-C / kill: a cut-short soak is no result
        sys.exit(f"interrupted at step {result.steps} of {args.steps}: nothing written")
    return {"records": records, "wall_s": time.perf_counter() - started, "steps": result.steps}


def summarize(raw: dict, args) -> dict:
    """Growth per window, slope after warm-up and time shares from the records."""
    records = raw["records"]
    marks = [r for r in records if "objects" in r]
    windows = []
    for before, after in itertools.pairwise(marks):
        span = [r for r in records if before["step"] < r["step"] <= after["step"]]
        windows.append(_window(before, after, span))
    steps = np.array([r["step"] for r in records if r["step"] > args.warmup], dtype=float)
    rss = np.array([r["rss_mb"] for r in records if r["step"] > args.warmup])
    slope = float(np.polyfit(steps, rss, 1)[0] * 100) if len(steps) > 2 else None
    return {
        "steps": raw["steps"],
        "wall_s": raw["wall_s"],
        "rss_first_mb": marks[0]["rss_mb_after_gc"],
        "rss_last_mb": marks[-1]["rss_mb_after_gc"],
        "slope_mb_per_100_steps_after_warmup": slope,
        "warmup_steps": args.warmup,
        "windows": windows,
        "time_share": _shares(records),
    }


def _window(before: dict, after: dict, span: list[dict]) -> dict:
    shares = _shares(span)
    return {
        "steps": f"{before['step'] + 1}-{after['step']}",
        "rss_end_mb": after["rss_mb_after_gc"],
        "rss_growth_mb": after["rss_mb_after_gc"] - before["rss_mb_after_gc"],
        "objects_growth": after["objects"] - before["objects"],
        "monitor_lines": after["monitor_lines"],
        "cache_entries": after["cache_entries"],
        "mean_step_s": float(np.mean([r["step_time"] for r in span])),
        **{f"{k}_share": v for k, v in shares.items()},
    }


def _shares(rows: list[dict]) -> dict:
    step = sum(r["step_time"] for r in rows)
    gen = sum(r["gen_time"] or 0.0 for r in rows)
    score = sum(r["score_time"] or 0.0 for r in rows)
    update = sum(r["update_time"] for r in rows)
    between = sum(max(r["wall"] - r["step_time"], 0.0) for r in rows)
    return {
        "generation": gen / step,
        "scoring": score / step,
        "update": update / step,
        "other": (step - gen - score - update) / step,
        "between_steps_vs_step_time": between / step,
    }


def markdown(summary: dict) -> str:
    head = (
        "| steps | RSS at end (MB) | RSS growth (MB) | Python objects growth | monitor lines "
        "| cache entries | mean step (s) | generation | scoring | update | other |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = "".join(
        f"| {w['steps']} | {w['rss_end_mb']:.0f} | {w['rss_growth_mb']:+.1f} | "
        f"{w['objects_growth']:+d} | {w['monitor_lines']} | {w['cache_entries']} | "
        f"{w['mean_step_s']:.2f} | {w['generation_share']:.0%} | {w['scoring_share']:.0%} | "
        f"{w['update_share']:.0%} | {w['other_share']:.0%} |\n"
        for w in summary["windows"]
    )
    share = summary["time_share"]
    tail = (
        f"\nRSS {summary['rss_first_mb']:.0f} MB after step 1 -> {summary['rss_last_mb']:.0f} MB "
        f"after step {summary['steps']}; slope after step {summary['warmup_steps']}: "
        f"{summary['slope_mb_per_100_steps_after_warmup']:+.2f} MB per 100 steps. Whole run: "
        f"generation {share['generation']:.0%}, scoring {share['scoring']:.0%}, update "
        f"{share['update']:.0%}, other {share['other']:.0%} of step time; between steps "
        f"(checkpoints) {share['between_steps_vs_step_time']:.1%} on top. "
        f"{summary['wall_s'] / 60:.1f} min in all.\n"
    )
    return head + rows + tail


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }


def _check(parser, args) -> None:
    """Before the run, not after it: counts, and where the report goes."""
    for name in ("steps", "every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0 or args.threads < 0:
        parser.error("--warmup and --threads must be >= 0 (--threads 0: torch's default)")
    if (why := unwritable(args.out)) is not None:
        parser.error(f"--out: {why} for the report")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100, help="memory snapshot every N steps")
    parser.add_argument("--warmup", type=int, default=50, help="steps left out of the slope")
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--set", action="append", default=[], help="config override (repeat)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--valid-share", type=float, default=0.5)
    parser.add_argument("--run-dir", default="runs/soak")
    parser.add_argument("--out", default="runs/soak/soak.json")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (0: torch's default). 1 by default: on 2 cores shared with "
        "other work, 2 threads spin against each other (measured here at load 11-14: about "
        "11 s per step with 2 threads, 0.4 s with 1)",
    )
    args = parser.parse_args(argv)
    _check(parser, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    before = machine()
    raw = run(args)
    summary = summarize(raw, args)
    report = {
        "command": " ".join(["python", "scripts/soak.py", *(argv or sys.argv[1:])]),
        "machine": before,
        "load_average_after": os.getloadavg(),
        "summary": summary,
        "records": raw["records"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    replace_text(args.out, json.dumps(report, indent=1))
    print(markdown(summary))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
