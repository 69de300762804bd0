"""Does a run learn each kind's own workflow while it trains? (issue 40, SIMULATED executor)

For each block of ``--window`` steps and each problem kind (difficulty, with ``/template``
where the world sets skills per template): how many training samples, their mean exact expected
reward minus the best single workflow's on that kind, the oracle's margin over the best single
workflow on that kind (what a policy that chooses per kind could gain there), and the first
operators written most. A policy that reads the problem moves each kind's margin towards the
oracle's; one that writes one workflow for all kinds moves them together.

    python research/kind_trajectory.py runs/known_optimum/adaptive-base/adaptive-checks/seed0

The run's own config.yaml gives the world, the call budget, the reward weights and the training
problems; samples.jsonl gives the workflows. Exact: studylib.choice scores each workflow.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from studylib.choice import exact_reward

from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.simulation.metrics import regret_settings
from flowgrpo.operators.simulation.oracle import kind_mix, oracle
from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.reports.diagnose import read_jsonl


def kind_trajectory(sim, problems: dict, rows: list[dict], window: int) -> dict:
    """``{block: {kind: {n, vs_single, oracle_vs_single, first_ops}}}``; block b holds steps
    ``b * window + 1 .. (b + 1) * window``. ``problems`` maps problem id -> Problem; a row is a
    samples.jsonl line (``step``, ``problem_id``, ``canonical``, ``valid``, ``fallback``)."""
    params = sim.params
    mix = kind_mix(params, list(problems.values()))
    best = oracle(params, mix, None, sim.limits, sim.tradeoff)
    margins, firsts = (
        defaultdict(lambda: defaultdict(list)),
        defaultdict(lambda: defaultdict(Counter)),
    )
    for row in rows:
        kind = params.kind_of(problems[row["problem_id"]])
        block = (row["step"] - 1) // window
        workflow = row["canonical"] if row["valid"] and not row["fallback"] else None
        margins[block][kind].append(exact_reward(sim, workflow, kind) - best.single_by_kind[kind])
        firsts[block][kind][(workflow or "-").split(" ")[0]] += 1
    return {
        block: {
            kind: {
                "n": len(values),
                "vs_single": statistics.mean(values),
                "oracle_vs_single": best.per_kind[kind].reward - best.single_by_kind[kind],
                "first_ops": dict(firsts[block][kind].most_common(3)),
            }
            for kind, values in sorted(kinds.items())
        }
        for block, kinds in sorted(margins.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory of the SIMULATED executor")
    parser.add_argument("--window", type=int, default=10, help="steps per block")
    args = parser.parse_args()
    for name in ("config.yaml", "samples.jsonl"):
        if not (args.run / name).is_file():
            parser.error(f"{args.run / name} not found: pass a run directory")
    try:
        cfg = load_config(args.run / "config.yaml")
        rows = read_jsonl(args.run / "samples.jsonl")  # a torn last line is skipped
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    sim = regret_settings(cfg, executor_limits(cfg.executor))
    if sim is None:
        raise SystemExit(f"{args.run}: not a run of the SIMULATED executor")
    r = cfg.rollout  # the training problems, as the run loaded them
    problems = load_task(r.task, n=r.train_size, seed=r.seed, split="train")
    for block, kinds in kind_trajectory(
        sim, {p.id: p for p in problems}, rows, args.window
    ).items():
        print(f"steps {block * args.window + 1}-{(block + 1) * args.window}:")
        for kind, v in kinds.items():
            print(f"  {kind:16s} n={v['n']:4d}  vs single {v['vs_single']:+.3f}  oracle vs single "
                  f"{v['oracle_vs_single']:+.3f}  first operators {v['first_ops']}")  # fmt: skip


if __name__ == "__main__":
    main()
