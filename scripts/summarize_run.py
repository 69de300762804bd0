"""Write a run's trajectory (fallback rate, validity, reward, entropy per step) as a Markdown page.

    python scripts/summarize_run.py runs/default --out research/records --name default-run \
        --command "flowgrpo train"

Writes ``OUT/NAME.md`` (replaced whole; OUT defaults to the run directory) and
``OUT/figures/NAME.png``; a doc that shows it links the file (no doc is edited in place).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

from flowgrpo.files import replace_text
from flowgrpo.trainer.reports.diagnose import diagnose
from flowgrpo.trainer.reports.plots import save


def _figure(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in history]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for key in ("fallback_rate", "validity_rate", "reward"):
        axes[0].plot(steps, [m.get(key) for m in history], marker="o", ms=3, label=key)
    axes[0].set_xlabel("step")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3)
    axes[1].plot(steps, [m.get("entropy") for m in history], marker="o", ms=3, color="C3")
    axes[1].axhline(0.1, ls="--", color="gray", lw=1)
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("token entropy (nats)")
    axes[1].grid(alpha=0.3)
    save(fig, path, dpi=110)  # marked: a user's file or a link under its name is refused
    plt.close(fig)


def _window(history: list[dict], key: str, part: slice) -> float:
    values = [m[key] for m in history[part] if m.get(key) is not None]
    return statistics.mean(values) if values else float("nan")


KEYS = (
    "fallback_rate",
    "validity_rate",
    "reward",
    "entropy",
    "distinct_workflows",
    "frac_reward_zero_std",
    "step_time",
)


def _thirds_table(history: list[dict]) -> list[str]:
    n = len(history)
    third = max(n // 3, 1)
    first, last = slice(0, third), slice(n - third, n)
    rows = ["| metric | first third of the run | last third |", "|---|---|---|"]
    return rows + [
        f"| {k} | {_window(history, k, first):.3f} | {_window(history, k, last):.3f} |"
        for k in KEYS
    ]


def _per_step_table(history: list[dict]) -> list[str]:
    rows = [
        "| step | fallback | valid | reward | entropy | distinct | rollback | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return rows + [
        f"| {m['step']} | {m['fallback_rate']:.2f} | {m['validity_rate']:.2f} | "
        f"{m['reward']:.3f} | {m.get('entropy') or float('nan'):.2f} | "
        f"{m['distinct_workflows']} | {'yes' if m.get('rollback') else ''} | "
        f"{m['step_time']:.0f} |"
        for m in history
    ]


#: What every step of a run logs and the per-step table reads.
STEP_KEYS = ("step", "fallback_rate", "validity_rate", "reward", "distinct_workflows", "step_time")


def section(run_dir: Path, name: str, command: str, out: Path) -> str:
    report = diagnose(run_dir)  # reads metrics.jsonl: a missing or damaged file says so
    history = list(report.history)
    if not history:
        raise ValueError(f"{run_dir / 'metrics.jsonl'} holds no steps: nothing to summarize")
    for number, row in enumerate(history, 1):
        missing = [k for k in STEP_KEYS if not isinstance(row.get(k), (int, float))]
        if missing:
            raise ValueError(
                f"{run_dir / 'metrics.jsonl'}, row {number}: no number for {', '.join(missing)}; "
                "summarize a run directory that flowgrpo train wrote"
            )
    fig = out / "figures" / f"{name}.png"
    _figure(history, fig)
    n = len(history)
    rows, per_step = _thirds_table(history), _per_step_table(history)
    alerts = (
        ", ".join(
            f"{c.name} (first at step {c.steps[0]}, {len(c.steps)} steps)"
            for c in report.checks
            if c.steps
        )
        or "none"
    )
    wall = sum(m["step_time"] for m in history)
    return "\n".join(
        [
            f"# `{command}`",
            "",
            f"Measured on {platform.machine()}, {os.cpu_count()} CPU cores, Python "
            f"{platform.python_version()}: "
            f"{n} steps, {wall / 60:.1f} minutes of step time. Collapse detector: "
            f"{report.collapses} of {report.updates} updates ({report.collapse_rate:.0%}); "
            f"rollbacks: {report.rollbacks}; alerts: {alerts}.",
            "",
            *rows,
            "",
            f"![{name}](figures/{name}.png)",
            "",
            "<details><summary>every step</summary>",
            "",
            *per_step,
            "",
            "</details>",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", help="default: the run directory")
    parser.add_argument("--name", default="default-run")
    parser.add_argument("--command", default="flowgrpo train")
    args = parser.parse_args()
    if Path(args.name).name != args.name or args.name in ("", ".", ".."):
        parser.error(f"--name {args.name!r}: a file name, not a path (the page is OUT/NAME.md)")
    out = Path(args.out or args.run_dir)
    try:
        text = section(Path(args.run_dir), args.name, args.command, out)
        path = out / f"{args.name}.md"
        replace_text(path, text + "\n")  # a link there is replaced, not written through
    except (OSError, ValueError) as exc:  # a missing or damaged run directory, an unwritable OUT
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
