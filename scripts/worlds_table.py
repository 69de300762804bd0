"""The best workflows of each world of the SIMULATED executor, as Markdown tables.

For every world file (default: configs/worlds/*.yaml), on the arithmetic task's mix of problem
kinds (a difficulty and a template drawn uniformly; a kind is the difficulty, with the template
where the world overrides it: operators/simulation/oracle.py):

* the best **single** workflow, its exact expected accuracy, reward and calls under the world's
  trade-off and the run's call budget, and how many workflows are within 0.02 of it (the "near
  best" set the learning study counts);
* the **oracle**'s expected reward (each kind's own best workflow) and the **gap** to the best
  single workflow: what choosing per problem can be worth (0 when one workflow is best for
  every kind);
* then, per world, each kind's best workflow against the single one.

The candidates are the workflows of the simulation's space (operators/simulation/space.py) that a
run with the call budget can write (``--space writable``, 1,773 of 2,275 at 12 calls), or the
whole space as the records before 0.3 scored it (``--space all``):

    python scripts/worlds_table.py                      # every world in configs/worlds/
    python scripts/worlds_table.py configs/worlds/cheap.yaml --max-calls 12 --space all
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from flowgrpo.dsl import DEFAULT_MAX_CALLS
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.simulation import analyze
from flowgrpo.operators.simulation.oracle import arithmetic_mix, oracle, writable_space
from flowgrpo.operators.simulation.space import Tradeoff, expected_reward, workflow_space
from flowgrpo.operators.simulation.worlds import load_world

NEAR = 0.02


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("worlds", nargs="*", help="world files (default: configs/worlds/*.yaml)")
    p.add_argument(
        "--max-calls",
        type=int,
        default=DEFAULT_MAX_CALLS,
        help="the run's call budget (executor.max_calls; also the cost score's normaliser)",
    )
    p.add_argument("--accuracy-weight", type=float, default=1.0)
    p.add_argument(
        "--cost-max-calls",
        type=int,
        default=None,
        help="the cost score's normaliser (default: --max-calls; the records before 0.3 used 20)",
    )
    p.add_argument(
        "--space",
        choices=("writable", "all"),
        default="writable",
        help="candidates: the workflows a run with --max-calls can write, or the whole space",
    )
    args = p.parse_args(argv)
    for name in ("max_calls", "cost_max_calls"):  # 0 or less: no budget to score against
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not math.isfinite(args.accuracy_weight) or args.accuracy_weight < 0:
        p.error(f"--accuracy-weight must be a number >= 0, got {args.accuracy_weight}")
    return args


def scored(world, args):
    """(limits, reward trade-off, candidates, the Oracle) of ``world``."""
    limits = executor_limits(ExecutorConfig(max_calls=args.max_calls))  # the one builder
    cost = float(world.reward_weights.get("cost", 0.0))
    scale = args.max_calls if args.cost_max_calls is None else args.cost_max_calls
    tradeoff = Tradeoff(args.accuracy_weight, cost, scale)
    space = writable_space(limits) if args.space == "writable" else workflow_space()
    best = oracle(world.params, arithmetic_mix(world.params), space, limits, tradeoff)
    return limits, tradeoff, space, best


def row(world, args) -> tuple[str, object]:
    """The world's line of the main table, and its Oracle (for the per-kind table)."""
    limits, tradeoff, space, best = scored(world, args)
    single = best.single
    mix, params = best.mix, world.params
    rewards = [expected_reward(analyze(t, params, mix, limits), tradeoff) for t in space]
    near = sum(r >= single.reward - NEAR for r in rewards)
    line = (
        f"| {world.name} | {world.summary} | `{single.workflow}` | {single.stats.accuracy:.3f} | "
        f"{single.reward:.3f} | {single.stats.expected_calls:.2f} | {near} | {min(rewards):.3f} | "
        f"{best.reward:.3f} | {best.gap:.3f} |"
    )
    return line, best


def kind_table(name: str, best) -> list[str]:
    """Each kind's best workflow against the best single one, for one world."""
    lines = [
        "",
        f"{name}: each kind's best (single: `{best.single.workflow}`)",
        "",
        "| kind | share | best workflow of the kind | its E[reward] | single's E[reward] |",
        "|---|---|---|---|---|",
    ]
    for kind, share in best.mix.items():
        own = best.per_kind[kind]
        lines.append(
            f"| {kind} | {share:.3f} | `{own.workflow}` | {own.reward:.3f} | "
            f"{best.single_by_kind[kind]:.3f} |"
        )
    return lines


def main(argv=None) -> None:
    args = parse_args(argv)
    paths = args.worlds or sorted(str(p) for p in Path("configs/worlds").glob("*.yaml"))
    print("| world | what wins | best single workflow | E[acc] | E[reward] | E[calls] | "
          "within 0.02 | worst E[reward] | oracle E[reward] | gap |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    details = []
    for path in paths:
        try:
            world = load_world(path)
        except ValueError as exc:  # a missing file, not YAML, not a world (the message says)
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        line, best = row(world, args)
        print(line, flush=True)
        details += kind_table(world.name, best)
    print("\n".join(details))


if __name__ == "__main__":
    main()
