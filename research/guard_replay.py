"""The collapse guard's rule at other significance levels, replayed on runs that were made.

    python research/guard_replay.py runs/default runs/default-s1 --alphas 0.01 0.001
    python research/guard_replay.py --collapse-study research/records/collapse_study.json

Per run directory (its metrics.jsonl): the updates the rule decided and, for each alpha in
--alphas, the steps at which it fires (z and p of each, at the first alpha). A run whose guard
rolled back is replayed only up to its first rollback: what came after depends on it. A run
made with ``health.guard: warn`` (or one the rule never fired on) replays whole, and where the
rule at another alpha fires nowhere in it, that run *is* the run a guard in ``rollback`` mode
at that alpha would have made (the modes differ only after an event).

With --collapse-study: the K=2 collapse study's recorded histories (every run its guard left
alone): at each alpha, the runs without a collapse it fires on, their updates it fires on, the
collapsed runs it detects and the delay after onset (the same truth as the study's guard
table, ``studylib.study.guard_rates``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from studylib.study import guard_rates

from flowgrpo.trainer.monitoring.collapse import CollapseRule, collapse_decisions
from flowgrpo.trainer.reports.diagnose import read_jsonl


def until_rollback(history: list[dict]) -> tuple[list[dict], int | None]:
    """The lines up to and including the first rolled-back one, and its step (None: none)."""
    for i, line in enumerate(history):
        if line.get("rollback"):
            return history[: i + 1], line.get("step")
    return history, None


def events(history: list[dict], alpha: float) -> list:
    """The decisions the default rule at ``alpha`` counts as collapses."""
    rule = CollapseRule(alpha=alpha)
    return [d for d in collapse_decisions(history, rule) if d.collapse]


def run_table(run_dirs: list[Path], alphas: list[float]) -> list[str]:
    """One row per run directory: decided updates, rollback, events at each alpha."""
    head = " | ".join(f"events at alpha {a:g}" for a in alphas)
    out = [
        f"| run | steps | decided updates | first rollback | {head} |",
        "|---" * (4 + len(alphas)) + "|",
    ]
    for run_dir in run_dirs:
        history, rolled = until_rollback(read_jsonl(run_dir / "metrics.jsonl"))
        decided = [d for d in collapse_decisions(history, CollapseRule()) if d.decided]
        first = [f"{d.step} (z {d_z(d):.2f}, p {d.p:.4f})" for d in events(history, alphas[0])]
        cells = [", ".join(first) or "none"]
        for alpha in alphas[1:]:
            cells.append(", ".join(str(d.step) for d in events(history, alpha)) or "none")
        row = [str(run_dir), str(len(history)), str(len(decided)), str(rolled or "none"), *cells]
        out.append("| " + " | ".join(row) + " |")
    return out


def d_z(decision) -> float:
    """The z of the test that fired (the larger of the two)."""
    return max(z for z in (decision.fallback_z, decision.validity_z) if z is not None)


def study_table(path: Path, alphas: list[float]) -> list[str]:
    """The collapse study's guard table at each alpha (runs its guard left alone)."""
    data = json.loads(path.read_text())
    if not isinstance(data, list) or not all(isinstance(r, dict) and "history" in r for r in data):
        raise SystemExit(f"error: {path}: not a collapse study's runs (collapse_study.json, "
                         "written by research/reproduce_collapse.py)")  # fmt: skip
    runs = [r for r in data if not r.get("rollbacks")]
    out = [
        "| alpha | runs without collapse it fired on | their updates it fired on | collapsed runs "
        "it detected | delay after onset (steps) |",
        "|---|---|---|---|---|",
    ]
    for alpha in alphas:
        g = guard_rates([r["history"] for r in runs], CollapseRule(alpha=alpha))
        delays = ", ".join(map(str, g.delays)) or "–"
        out.append(
            f"| {alpha:g} | {g.ok_runs_flagged}/{g.ok_runs} | {g.ok_updates_flagged}/"
            f"{g.ok_updates} | {g.collapsed_detected}/{g.collapsed_runs} | {delays} |"
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="*", type=Path)
    p.add_argument("--alphas", nargs="+", type=float, default=[0.01, 0.001])
    p.add_argument("--collapse-study", type=Path, help="the collapse study's JSON record")
    args = p.parse_args(argv)
    if any(not 0 < a <= 0.5 for a in args.alphas):
        print("error: --alphas takes significance levels in (0, 0.5]")
        return 2
    for run_dir in args.run_dirs:
        if not (run_dir / "metrics.jsonl").is_file():
            print(f"error: {run_dir / 'metrics.jsonl'} not found: pass run directories")
            return 2
    if args.collapse_study and not args.collapse_study.is_file():
        print(f"error: {args.collapse_study} not found")
        return 2
    if args.run_dirs:
        print("\n".join(run_table(args.run_dirs, args.alphas)))
    if args.collapse_study:
        print("\n".join(study_table(args.collapse_study, args.alphas)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
