"""Reproduce the K=2 collapse and compare it with K=8 settings and the project default.

Trains the CPU default model (SmolLM2-135M-Instruct + LoRA) under several configurations with
the same problems, seeds, step budget and number of completions per step (K=2 gets 4x the
problems), then writes a results table and figures into ``docs/``:

    python scripts/reproduce_collapse.py --steps 15 --seeds 0            # the study (CPU, ~30 min)
    python scripts/reproduce_collapse.py --smoke --out /tmp/smoke        # tiny model, seconds

Configurations (all: lr --lr, no executor so every step costs the same, validity/diversity
rewards; health guard in ``warn`` mode so collapses are counted, not undone, except ``default``):

* ``k2_grpo``: K=2, ``grpo`` (the original failing setting; ``allow_small_groups``);
* ``k8_grpo``: K=8, ``grpo``;
* ``k8_dr_grpo``: K=8, ``dr_grpo``, clip-higher (epsilon_high 0.28);
* ``k8_gdpo``: K=8, ``gdpo``;
* ``default``: the project default (``dr_grpo``, clip-higher, dynamic sampling) with the
  collapse guard in ``rollback`` mode.

The table and figures go between markers in ``OUT/RESULTS.md`` (other sections are kept) and
into ``OUT/figures/``; raw run directories into ``--runs-dir`` (default runs/collapse_study,
not committed).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
from pathlib import Path

SAMPLES_PER_STEP = 16
CONFIGS = {
    "k2_grpo": [
        "rollout.num_generations=2",
        "rollout.allow_small_groups=true",
        "rollout.problems_per_step=8",
        "algorithm.advantage=grpo",
        "rollout.dynamic_sampling=false",
        "health.guard=warn",
    ],
    "k8_grpo": ["algorithm.advantage=grpo", "rollout.dynamic_sampling=false", "health.guard=warn"],
    "k8_dr_grpo": [
        "algorithm.advantage=dr_grpo",
        "algorithm.loss.epsilon_high=0.28",
        "rollout.dynamic_sampling=false",
        "health.guard=warn",
    ],
    "k8_gdpo": ["algorithm.advantage=gdpo", "rollout.dynamic_sampling=false", "health.guard=warn"],
    "default": ["health.guard=rollback"],
}
START, END = "<!-- collapse-study:start -->", "<!-- collapse-study:end -->"


def run_one(name: str, seed: int, args, base) -> dict:
    """Train one configuration; returns its summary row."""
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.loop.trainer import Trainer

    run_dir = Path(args.runs_dir) / f"{name}_seed{seed}"
    common = [
        f"logging.output_dir={run_dir}",
        f"optim.max_steps={args.steps}",
        f"optim.lr={args.lr}",
        f"optim.seed={seed}",
        f"rollout.seed={seed}",
        "rollout.execute=false",
        "rollout.cache_path=null",
        "logging.save_every=0",
        f"rollout.max_new_tokens={args.max_new_tokens}",
    ]
    if args.smoke:
        common += ["model.name_or_path=tiny-random", "lora.r=4", "rollout.train_size=64"]
    cfg = load_config(None, (*common, *CONFIGS[name]))
    model, tokenizer = (None, None) if base is None else (copy.deepcopy(base[0]), base[1])
    # overwrite: re-running the study replaces its runs (--from-runs rebuilds from them)
    Trainer(cfg, model=model, tokenizer=tokenizer, overwrite=True).train()
    return summarize(name, seed, run_dir)


def summarize(name: str, seed: int, run_dir: Path) -> dict:
    """The table row of a finished run directory (metrics.jsonl, samples.jsonl, config.yaml)."""
    from flowgrpo.trainer.monitoring.collapse import replay
    from flowgrpo.trainer.reports.diagnose import load_health_config, read_jsonl

    health, _ = load_health_config(run_dir)
    history = read_jsonl(run_dir / "metrics.jsonl")
    samples = read_jsonl(run_dir / "samples.jsonl")
    detector = replay(history, health.collapse_rule)
    entropy = [m["entropy"] for m in history if m.get("entropy") is not None]
    tail = history[-3:]

    def mean(key):
        values = [m[key] for m in history if m.get(key) is not None]
        return statistics.mean(values) if values else float("nan")

    return {
        "config": name,
        "seed": seed,
        "steps": len(history),
        "collapse_rate": detector.collapse_rate,
        "collapses": detector.collapses,
        "updates": detector.updates,
        "fallback_start": history[0]["fallback_rate"],
        "fallback_end": statistics.mean(m["fallback_rate"] for m in tail),
        "validity_end": statistics.mean(m["validity_rate"] for m in tail),
        "distinct_workflows": len(
            {s["canonical"] for s in samples if s.get("valid") and s.get("canonical")}
        ),
        "entropy_mean": statistics.mean(entropy) if entropy else float("nan"),
        "entropy_min": min(entropy) if entropy else float("nan"),
        "zero_std_steps": sum(m["frac_reward_zero_std"] == 1 for m in history) / len(history),
        "adv_frac_extreme": mean("adv_frac_extreme"),
        "reward_z_frac_extreme": mean("reward_z_frac_extreme"),
        "adv_abs_mean": mean("adv_abs_mean"),
        "rollbacks": sum(bool(m.get("rollback")) for m in history),
        "wall_s": sum(m["step_time"] for m in history),
        "series": {
            "fallback": [m["fallback_rate"] for m in history],
            "entropy": [m.get("entropy") for m in history],
        },
    }


def plot(rows: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, label in (("fallback", "fallback rate"), ("entropy", "token entropy (nats)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for row in rows:
            ys = row["series"][key]
            ax.plot(
                range(1, len(ys) + 1),
                [float("nan") if y is None else y for y in ys],
                marker="o",
                ms=3,
                label=f"{row['config']} (seed {row['seed']})",
            )
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        path = out / f"collapse_study_{key}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def table(rows: list[dict]) -> str:
    head = (
        "| config | seed | collapse rate | fallback start → end | validity end | distinct "
        "workflows | entropy mean / min | steps with zero-std = 1 | adv_frac_extreme "
        r"(\|A\| ≥ 0.99) | reward \|z\| ≥ 0.99 | mean \|A\| | rollbacks | step time s |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['seed']} | {r['collapse_rate']:.2f} ({r['collapses']}/"
            f"{r['updates']}) | {r['fallback_start']:.2f} → {r['fallback_end']:.2f} | "
            f"{r['validity_end']:.2f} | {r['distinct_workflows']} | {r['entropy_mean']:.2f} / "
            f"{r['entropy_min']:.2f} | {r['zero_std_steps']:.2f} | {r['adv_frac_extreme']:.2f} | "
            f"{r['reward_z_frac_extreme']:.2f} | {r['adv_abs_mean']:.3f} | {r['rollbacks']} | "
            f"{r['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def write_results(rows: list[dict], figures: list[Path], args, out: Path) -> Path:
    import torch
    import transformers

    argv = [a for a in sys.argv[1:] if a != "--from-runs"]
    command = "`python scripts/reproduce_collapse.py " + " ".join(argv) + "`"
    if args.from_runs:
        command += " (table rebuilt from its run directories with `--from-runs`)"
    section = "\n".join(
        [
            START,
            "## The K=2 collapse study",
            "",
            f"Command: {command}. Machine: {platform.machine()}, 2 CPU cores; Python "
            f"{platform.python_version()}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}. Model: "
            f"{'tiny random (smoke)' if args.smoke else 'SmolLM2-135M-Instruct + LoRA r16'}; "
            f"{args.steps} steps, {SAMPLES_PER_STEP} completions per step, lr {args.lr}, "
            f"max {args.max_new_tokens} new tokens; no executor (validity + diversity rewards). "
            "**Small-scale results**: one CPU, a 135M model, a few steps; they show mechanisms, "
            "not production numbers.",
            "",
            table(rows),
            "",
            *[f"![{p.stem}]({p.relative_to(out)})" for p in figures],
            "",
            f"Raw metrics (not committed): `{args.runs_dir}/<config>_seed<N>/`; the rows "
            "above with their series: `collapse_study.json`.",
            END,
        ]
    )
    path = out / "RESULTS.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Results\n"
    if START in text and END in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")
    (out / "collapse_study.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", default="docs")
    parser.add_argument(
        "--runs-dir",
        default="runs/collapse_study",
        help="where the raw run directories go (not committed)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny random model (for tests)")
    parser.add_argument(
        "--from-runs",
        action="store_true",
        help="rebuild the table and figures from existing run directories",
    )
    args = parser.parse_args()
    if args.smoke:
        args.steps = min(args.steps, 2)
    out = Path(args.out)
    base = None
    if not args.smoke and not args.from_runs:
        from flowgrpo.operators.backends.hf import load_hf_model
        from flowgrpo.trainer.loop.policy import _pad

        model, tokenizer = load_hf_model("default")
        base = (model, _pad(tokenizer))
    rows = []
    for seed in args.seeds:
        for name in args.configs:
            print(f"== {name} seed {seed}", flush=True)
            if args.from_runs:
                rows.append(summarize(name, seed, Path(args.runs_dir) / f"{name}_seed{seed}"))
            else:
                rows.append(run_one(name, seed, args, base))
            print({k: v for k, v in rows[-1].items() if k != "series"}, flush=True)
    path = write_results(rows, plot(rows, out / "figures"), args, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
