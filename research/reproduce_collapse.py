"""Reproduce the K=2 collapse in the known-optimum environment; compare K=8 settings and the
default; measure the collapse guard's false-positive and detection rates on the runs.

Every run starts from the format-trained adapter of ``configs/known-optimum.yaml`` (about 60%
valid DSL, like the seed's Qwen2.5-7B), is scored by the SIMULATED executor
(operators/simulation: accuracies come from a model of operators, not from an LLM) with the
seed's reward shape (invalid 0, valid-but-wrong 0.2, correct 1.2), and samples the same number
of completions per step (K=2 gets 4x the problems):

    python research/reproduce_collapse.py --seeds 0 1 2 3 4 --steps 12 \\
        --sweep k2_grpo k8_grpo --sweep-lrs 1e-3 2.5e-3 5e-3   # the study (about 3 CPU hours here)
    python research/reproduce_collapse.py --smoke --out /tmp/smoke   # tiny model, seconds
    python research/reproduce_collapse.py ... --from-runs            # rebuild the table

Configurations (the config file's settings plus):

* ``k2_grpo``: K=2, ``grpo`` (the original failing setting; ``allow_small_groups``);
* ``k8_grpo``: K=8, ``grpo``;
* ``k8_dr_grpo``: K=8, ``dr_grpo``, clip-higher (epsilon_high 0.28);
* ``k8_gdpo``: K=8, ``gdpo``;
* ``default``: the project default (``dr_grpo``, clip-higher, dynamic sampling) with the
  collapse guard in ``rollback`` mode, to see whether the guard makes a good run worse;
* ``default_warn``: the same with the guard in ``warn`` mode (it alerts, undoes nothing): the
  control that says what the rollback changed.

All but ``default``: no dynamic sampling, guard ``warn`` (collapses are counted, not undone).
``--lr`` is every configuration's rate; ``--sweep-lrs`` re-runs the ``--sweep`` configurations
(default ``k2_grpo``) at other rates, to find where K=2 collapses.

Writes ``OUT/collapse_study.md`` (a file of its own, linked by the docs): the per-configuration
table (means and 95% intervals over seeds), the guard table, figures in ``OUT/figures/``, and
the per-run rows in ``OUT/collapse_study.json``. Raw runs go to ``--runs-dir`` (not committed).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import collapse_report  # the tables and figures, next to this file

SAMPLES_PER_STEP = 16
K2 = ["rollout.num_generations=2", "rollout.allow_small_groups=true", "rollout.problems_per_step=8"]
K8 = ["rollout.num_generations=8", "rollout.problems_per_step=2"]
CLIP_HIGHER = "algorithm.loss.epsilon_high=0.28"  # DAPO's clip-higher (arXiv 2503.14476)
NO_GUARD = ["rollout.dynamic_sampling=false", "health.guard=warn"]
CONFIGS = {
    "k2_grpo": [*K2, "algorithm.advantage=grpo", *NO_GUARD],
    "k8_grpo": [*K8, "algorithm.advantage=grpo", *NO_GUARD],
    "k8_dr_grpo": [*K8, "algorithm.advantage=dr_grpo", CLIP_HIGHER, *NO_GUARD],
    "k8_gdpo": [*K8, "algorithm.advantage=gdpo", *NO_GUARD],
    "default": [*K8, "health.guard=rollback"],
    "default_warn": [*K8, "health.guard=warn"],  # the control for the rollback
}
STUDY = ["k2_grpo", "k8_grpo", "k8_dr_grpo", "k8_gdpo", "default"]  # --configs' default


def run_dir_of(args, name: str, lr: float, seed: int) -> Path:
    return Path(args.runs_dir) / f"{name}_lr{lr:g}_seed{seed}"


def plan(args) -> list[tuple[str, float, int]]:
    """(configuration, lr, seed) of every run: all configurations at ``--lr``, then the sweep
    configurations at each ``--sweep-lrs``; seeds outermost so a cut-short study is balanced."""
    runs = [(name, args.lr, seed) for seed in args.seeds for name in args.configs]
    extra = [lr for lr in args.sweep_lrs if lr != args.lr]
    runs += [(name, lr, seed) for lr in extra for seed in args.seeds for name in args.sweep]
    return runs


def run_one(args, name: str, lr: float, seed: int, base) -> Path:
    """Train one configuration into its run directory."""
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.loop.interrupt import EXIT_CODES
    from flowgrpo.trainer.loop.trainer import Trainer

    run_dir = run_dir_of(args, name, lr, seed)
    common = [
        f"logging.output_dir={run_dir}",
        f"optim.max_steps={args.steps}",
        f"optim.lr={lr}",
        f"optim.seed={seed}",
        f"rollout.seed={seed}",
        "rollout.cache_path=null",
        "logging.save_every=0",
    ]
    cfg = load_config(args.config, (*common, *CONFIGS[name], *args.set))
    model, tokenizer = (None, None) if base is None else (copy.deepcopy(base[0]), base[1])
    # overwrite: re-running the study replaces its runs (--from-runs rebuilds from them)
    result = Trainer(cfg, model=model, tokenizer=tokenizer, overwrite=True).train()
    if result.exit_code in EXIT_CODES.values():  # Ctrl-C / kill: stop the study, record nothing
        sys.exit(
            f"{name} lr {lr:g} seed {seed} interrupted at step {result.steps}: the study "
            "stops, no table written; rerun it (--from-runs: the runs that ended)"
        )
    return run_dir


def load_base(args):
    """The base model and tokenizer, loaded once and copied into each run (None for tiny)."""
    from flowgrpo.operators.models import load_model
    from flowgrpo.trainer.config import load_config

    cfg = load_config(args.config, tuple(args.set))
    if cfg.model.name_or_path == "tiny-random":
        return None
    model, tokenizer = load_model(cfg.model.name_or_path, gguf_file=cfg.model.gguf_file)
    return model, tokenizer  # load_model gives it a pad token


def command_line(args) -> str:
    argv = [a for a in sys.argv[1:] if a != "--from-runs"]
    command = "`python research/reproduce_collapse.py " + " ".join(argv) + "`"
    if args.from_runs:
        command += " (tables rebuilt from its run directories with `--from-runs`)"
    return command


def environment(args) -> str:
    import torch
    import transformers

    model = "tiny random (smoke)" if args.smoke else "SmolLM2-135M-Instruct + LoRA r16"
    return (
        f"Machine: {platform.machine()}, {_cores()} CPU cores, no GPU; Python "
        f"{platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}. Policy: {model}, from `{args.config}`"
        f"{'' if args.smoke else ' (start: the format-trained adapter)'}; {args.steps} steps "
        f"of {SAMPLES_PER_STEP} completions; seeds {' '.join(map(str, args.seeds))}."
    )


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--configs", nargs="*", choices=list(CONFIGS), default=STUDY, help="at --lr")
    p.add_argument("--lr", type=float, default=2e-4, help="every configuration's rate")
    p.add_argument("--sweep-lrs", type=float, nargs="*", default=[], help="more rates")
    p.add_argument("--sweep", nargs="+", choices=list(CONFIGS), default=["k2_grpo"])
    p.add_argument("--set", nargs="*", default=[], help="more config overrides (KEY=VALUE)")
    p.add_argument("--out", default="research/records")
    p.add_argument("--runs-dir", default="runs/collapse_study", help="raw runs (not committed)")
    p.add_argument("--smoke", action="store_true", help="tiny random model, 2 steps (for CI)")
    p.add_argument("--from-runs", action="store_true", help="rebuild from existing runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.config, args.steps = "configs/tiny-known-optimum.yaml", min(args.steps, 2)
        args.seeds = args.seeds[:2]
    return args


def absent(missing: list[tuple[str, float, int]]) -> list[str]:
    """Planned runs without a directory, one entry per (configuration, lr) with its seeds."""
    seeds: dict[tuple[str, float], list[int]] = {}
    for name, lr, seed in missing:
        seeds.setdefault((name, lr), []).append(seed)
    return [f"{n} lr {lr:g} (seeds {' '.join(map(str, s))})" for (n, lr), s in seeds.items()]


def main(argv=None) -> None:
    args = parse_args(argv)
    base = None if args.from_runs else load_base(args)
    runs, missing = [], []
    for name, lr, seed in plan(args):
        run_dir = run_dir_of(args, name, lr, seed)
        if not args.from_runs:
            print(f"== {name} lr {lr:g} seed {seed}", flush=True)
            run_one(args, name, lr, seed, base)
        elif not (run_dir / "metrics.jsonl").is_file():
            print(f"(missing, left out: {run_dir})", flush=True)
            missing.append((name, lr, seed))
            continue
        runs.append(collapse_report.summarize(name, lr, seed, run_dir))
    if not runs:  # nothing to report: no table over nothing
        sys.exit(f"error: no run of the plan in {args.runs_dir}; run the study first, or give "
                 "its --runs-dir and the same --configs/--seeds/--lr")  # fmt: skip
    out = Path(args.out)
    path = collapse_report.write(
        runs, out, command_line(args), environment(args), args.runs_dir, absent(missing)
    )
    (out / "collapse_study.json").write_text(json.dumps(runs, indent=1), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
