"""Does the RL learn to pick better workflows? Seeds of the known-optimum run, held-out eval.

Trains ``configs/known-optimum.yaml`` (SmolLM2-135M + LoRA from the format-trained adapter,
scored by the SIMULATED executor: accuracies come from a model of operators, not from an LLM)
once per seed, then evaluates the start policy and each run's final checkpoint on held-out
problems (the test split) with the same simulated executor, as
``flowgrpo eval --adapter RUN/checkpoint-N --executor simulated --n N --k K`` does. Writes a
section of ``OUT/RESULTS.md`` (per-seed table, means with 95% intervals, a figure of regret over
training) and ``OUT/known_optimum.json``:

    python scripts/learn_known_optimum.py --seeds 0 1 2 3 4          # CPU, about 40 minutes
    python scripts/learn_known_optimum.py --from-runs ...            # runs already trained
    python scripts/learn_known_optimum.py --smoke --out /tmp/smoke   # tiny model (CI)

Regret is the best achievable expected reward minus the expected reward of the workflows
written (``sim/regret``; docs/SIMULATED_EXECUTOR.md); it falls when the policy learns.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
from pathlib import Path

from flowgrpo.trainer.reports.study import mean_interval, series

START, END = "<!-- known-optimum:start -->", "<!-- known-optimum:end -->"
TAIL = 5  # "first"/"last" training values: means over this many rollouts (16 completions each)
EVAL_KEYS = (
    "validity_rate", "pass@1", "sim/expected_accuracy", "sim/regret", "sim/valid_regret",
    "sim/best_share",
)  # fmt: skip
ORDER = ("sim/expected_accuracy", "sim/regret", "sim/valid_regret", "pass@1", "validity_rate")
SERIES_KEYS = ("sim/regret", "sim/valid_regret", "sim/expected_accuracy", "entropy")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, help="default: the config's optim.max_steps")
    p.add_argument("--eval-n", type=int, default=40, help="held-out problems")
    p.add_argument("--eval-k", type=int, default=4, help="workflows sampled per problem")
    p.add_argument("--runs-dir", default="runs/known_optimum", help="raw runs (not committed)")
    p.add_argument("--out", default="docs")
    p.add_argument("--from-runs", action="store_true", help="evaluate runs already trained")
    p.add_argument("--smoke", action="store_true", help="tiny random model (for CI)")
    args = p.parse_args(argv)
    if args.smoke:
        args.config, args.steps, args.eval_n = "configs/tiny-known-optimum.yaml", 2, 4
        args.seeds = args.seeds[:2]
    return args


def config_of(args, seed: int | None):
    from flowgrpo.trainer.config import load_config

    overrides = ["rollout.cache_path=null", "logging.save_every=0"]
    if args.steps:
        overrides.append(f"optim.max_steps={args.steps}")
    if seed is not None:
        run_dir = Path(args.runs_dir) / f"seed{seed}"
        overrides += [f"optim.seed={seed}", f"rollout.seed={seed}", f"logging.output_dir={run_dir}"]
    return load_config(args.config, tuple(overrides))


def held_out(cfg, model, tokenizer, args) -> dict:
    """The policy on ``--eval-n`` test problems, ``--eval-k`` samples each, SIMULATED executor."""
    from flowgrpo.trainer.loop import setup
    from flowgrpo.trainer.loop.metric_hooks import start_hooks
    from flowgrpo.trainer.reports.evaluate import EvalSettings, evaluate

    r = cfg.rollout
    settings = EvalSettings(
        task=r.task, n=args.eval_n, k=args.eval_k, temperature=r.temperature,
        top_p=r.top_p, max_new_tokens=r.max_new_tokens,
    )  # fmt: skip
    executor, limits = setup.executor(cfg, model, tokenizer)
    model.eval()
    result = evaluate(model, tokenizer, settings, executor, limits, hooks=start_hooks(cfg))
    return {key: result.get(key) for key in EVAL_KEYS}


def base_model(cfg):
    """(model, tokenizer) without an adapter, loaded once and copied for each policy."""
    from flowgrpo.operators.models import load_model
    from flowgrpo.trainer.loop.policy import _pad

    m = cfg.model
    model, tokenizer = load_model(
        m.name_or_path, gguf_file=m.gguf_file, dtype=m.dtype, seed=cfg.optim.seed
    )
    return model, _pad(tokenizer)


def train_and_eval(args, seed: int, base) -> dict:
    """Train one seed (unless ``--from-runs``) and evaluate its final checkpoint."""
    from peft import PeftModel

    from flowgrpo.trainer.loop.checkpoint import latest_checkpoint
    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.reports.diagnose import read_jsonl
    from flowgrpo.trainer.reports.evaluate import adapter_dir

    cfg = config_of(args, seed)
    run_dir = Path(cfg.logging.output_dir)
    if not args.from_runs:
        model = copy.deepcopy(base[0])
        Trainer(cfg, model=model, tokenizer=base[1], overwrite=True).train()
    checkpoint = latest_checkpoint(run_dir)
    policy = PeftModel.from_pretrained(copy.deepcopy(base[0]), str(adapter_dir(checkpoint)))
    history = read_jsonl(run_dir / "metrics.jsonl")
    return {
        "seed": seed,
        "checkpoint": str(checkpoint),
        "steps": len(history),
        "series": {k: series(history, k) for k in SERIES_KEYS},
        "eval": held_out(cfg, policy, base[1], args),
    }


def start_eval(args, base) -> dict:
    """The start policy (the config's init_adapter, else a fresh LoRA) on the held-out set."""
    from flowgrpo.trainer.loop import setup

    cfg = config_of(args, None)
    policy, tokenizer = setup.policy(cfg, model=copy.deepcopy(base[0]), tokenizer=base[1])
    return held_out(cfg, policy, tokenizer, args)


def _ci(values) -> str:
    mean, half = mean_interval([v for v in values if v is not None])
    return _f(mean) + ("" if half != half else f" ± {half:.3f}")  # half != half: NaN


def _f(value) -> str:
    """A number to 3 decimals; "–" for None (e.g. valid-only regret with no valid sample)."""
    return "–" if value is None or value != value else f"{value:.3f}"


def _first_last(run: dict, key: str) -> tuple[float, float]:
    values = run["series"][key]
    return mean_interval(values[:TAIL])[0], mean_interval(values[-TAIL:])[0]


def table(start: dict, runs: list[dict]) -> str:
    """Per seed: training regret (all / valid-only) first → last, the held-out numbers."""
    lines = [
        f"| seed | regret, first {TAIL} steps → last {TAIL} | valid-only regret, first → last "
        "| held-out E[acc] | held-out regret | held-out valid-only regret | held-out pass@1 "
        "(simulated runs) | held-out validity | entropy, last step |",
        "|---|---|---|---|---|---|---|---|---|",
        "| start | – | – | " + " | ".join(_f(start[k]) for k in ORDER) + " | – |",
    ]
    for run in runs:
        e, (r0, r1), (v0, v1) = run["eval"], *(_first_last(run, k) for k in SERIES_KEYS[:2])
        lines.append(
            f"| {run['seed']} | {_f(r0)} → {_f(r1)} | {_f(v0)} → {_f(v1)} | "
            + " | ".join(_f(e[k]) for k in ORDER)
            + f" | {_f(run['series']['entropy'][-1])} |"
        )
    pairs = {k: list(zip(*(_first_last(r, k) for r in runs), strict=True)) for k in SERIES_KEYS[:2]}
    lines.append(
        f"| **mean ± 95% CI** | {_ci(pairs['sim/regret'][0])} → {_ci(pairs['sim/regret'][1])} | "
        f"{_ci(pairs['sim/valid_regret'][0])} → {_ci(pairs['sim/valid_regret'][1])} | "
        + " | ".join(_ci([r["eval"][k] for r in runs]) for k in ORDER)
        + f" | {_ci([r['series']['entropy'][-1] for r in runs])} |"
    )
    return "\n".join(lines)


def plot(runs: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key in zip(axes, ("sim/regret", "sim/valid_regret", "entropy"), strict=True):
        width = min(len(r["series"][key]) for r in runs)
        for run in runs:
            ax.plot(range(1, width + 1), run["series"][key][:width], alpha=0.3, lw=1)
        mean = [mean_interval([r["series"][key][i] for r in runs])[0] for i in range(width)]
        ax.plot(range(1, width + 1), mean, color="black", lw=2, label="mean over seeds")
        ax.set_xlabel("step")
        ax.set_ylabel(key if key == "entropy" else f"{key} (SIMULATED executor)")
        ax.grid(alpha=0.3)
        ax.legend()
    path = out / "known_optimum.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def section(args, start: dict, runs: list[dict], figure: Path) -> str:
    import torch

    argv = " ".join(a for a in sys.argv[1:] if a != "--from-runs")
    model = "tiny random (smoke)" if args.smoke else "SmolLM2-135M-Instruct + LoRA r16"
    return "\n".join([
        START,
        "## Learning in the known-optimum environment (SIMULATED executor)",
        "",
        f"Command: `python scripts/learn_known_optimum.py {argv}`"
        f"{' (evaluated with --from-runs)' if args.from_runs else ''}. Machine: "
        f"{platform.machine()}, CPU only, Python {platform.python_version()}, torch "
        f"{torch.__version__}. Policy: {model}, config `{args.config}`, "
        f"{runs[0]['steps']} steps, seeds {' '.join(str(r['seed']) for r in runs)}. Held-out: "
        f"{args.eval_n} test problems × {args.eval_k} sampled workflows, scored by the SIMULATED "
        "executor (accuracies from a model of operators, not an LLM); E[acc] and regret are "
        "exact expectations of the workflows written, pass@1 the simulated runs' outcome. The "
        "same numbers per run: `flowgrpo eval --adapter RUN/checkpoint-N --executor simulated "
        f"--n {args.eval_n} --k {args.eval_k}`.",
        "",
        table(start, runs),
        "",
        f"![known_optimum]({figure.relative_to(Path(args.out))})",
        "",
        f"Raw runs (not committed): `{args.runs_dir}/seed<N>/`; numbers: `known_optimum.json`.",
        END,
    ])  # fmt: skip


def write(args, start: dict, runs: list[dict]) -> Path:
    out = Path(args.out)
    text_section = section(args, start, runs, plot(runs, out / "figures"))
    path = out / "RESULTS.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Results\n"
    if START in text and END in text:
        text = text[: text.index(START)] + text_section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + text_section + "\n"
    path.write_text(text, encoding="utf-8")
    data = {"start": start, "runs": runs}
    (out / "known_optimum.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def main(argv=None) -> None:
    args = parse_args(argv)
    base = base_model(config_of(args, None))
    start = start_eval(args, base)
    print(f"start: {start}", flush=True)
    runs = []
    for seed in args.seeds:
        runs.append(train_and_eval(args, seed, base))
        print(f"seed {seed}: {runs[-1]['eval']}", flush=True)
    print(f"wrote {write(args, start, runs)}")


if __name__ == "__main__":
    main()
