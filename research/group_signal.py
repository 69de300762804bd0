"""Where the learning signal of known-optimum runs comes from (SIMULATED executor).

    python research/group_signal.py runs/known_optimum/c-ex32-4x4/drawn-2026-0/seed*

Per run directory (its samples.jsonl and config.yaml) and pooled over all of them: the share of
"familiar" groups (mean accuracy >= 0.95: every workflow solved the problem), the informative
groups per step, the advantage mass the familiar groups carry, and per block of steps the share
of training completions within 0.02 of the best workflow of the run's own simulated world.
See research/studylib/group_signal.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studylib.group_signal import (
    FAMILIAR,
    UNIFORM_MIX,
    group_signal,
    near_best_by_block,
)

from flowgrpo.trainer.reports.diagnose import read_jsonl


def regret_of(run_dir: Path):
    """The run's world as a function canonical text -> regret, or None (not simulated)."""
    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.operators.simulation import regret
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.trainer.config import load_config

    cfg = load_config(run_dir / "config.yaml", ())
    sim = regret_settings(cfg, executor_limits(cfg.executor))
    if sim is None:
        return None
    return lambda text: (
        regret(text, sim.params, UNIFORM_MIX, limits=sim.limits, tradeoff=sim.tradeoff).regret
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--familiar", type=float, default=FAMILIAR)
    p.add_argument("--block", type=int, default=5, help="steps per near-best block")
    args = p.parse_args(argv)
    pooled = []
    for run_dir in args.run_dirs:
        path = run_dir / "samples.jsonl"
        if not path.is_file():
            print(f"error: {path} not found: pass run directories (with samples.jsonl)")
            return 2
        rows = read_jsonl(path)
        pooled += [{**r, "step": (str(run_dir), r["step"])} for r in rows]  # steps per run
        s = group_signal(rows, args.familiar)
        line = (f"{run_dir}: {s.groups} groups over {s.steps} steps, familiar "
                f"{s.familiar_share:.0%} (advantage mass {s.familiar_advantage_mass:.0%}), "
                f"informative {s.informative_per_step:.2f}/step")  # fmt: skip
        regret_fn = regret_of(run_dir)
        if regret_fn is not None:
            blocks = near_best_by_block(rows, regret_fn, args.block)
            line += "; near-best share (its mean advantage) " + ", ".join(
                f"{b.share:.2f} ({b.advantage:+.3f})" for b in blocks
            )
        print(line)
    if len(args.run_dirs) > 1:
        s = group_signal(pooled, args.familiar)
        print(f"pooled: familiar {s.familiar_share:.0%} of {s.groups} groups (advantage mass "
              f"{s.familiar_advantage_mass:.0%}), informative {s.informative_per_step:.2f}/step "
              "(the runs' steps added up)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
