"""The best workflow of each world of the SIMULATED executor, as a Markdown table.

For every world file (default: configs/worlds/*.yaml) the best workflow of the simulation's
space (operators/simulation/space.py, 2,275 workflows) on the arithmetic task's difficulty mix
(easy, medium, hard, equally likely), its exact expected accuracy and reward under the world's
trade-off and the run's call budget, the runner-up of another kind, and how many workflows are
within 0.02 of the best reward (the "near best" set the learning study counts):

    python scripts/worlds_table.py                      # every world in configs/worlds/
    python scripts/worlds_table.py configs/worlds/cheap.yaml --max-calls 12
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flowgrpo.dsl import DEFAULT_MAX_CALLS
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.simulation import analyze
from flowgrpo.operators.simulation.space import expected_reward, workflow_space
from flowgrpo.operators.simulation.worlds import load_world

MIX = {"easy": 1, "medium": 1, "hard": 1}
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
    return p.parse_args(argv)


def ranked(world, args) -> list[tuple[float, float, float, str]]:
    """(reward, accuracy, expected calls, workflow) of the whole space, best first."""
    limits = executor_limits(ExecutorConfig(max_calls=args.max_calls))  # the one builder
    cost = float(world.reward_weights.get("cost", 0.0))
    rows = []
    for text in workflow_space():
        stats = analyze(text, world.params, MIX, limits)
        reward = expected_reward(
            stats, args.accuracy_weight, cost, args.cost_max_calls or args.max_calls
        )
        rows.append((reward, stats.accuracy, stats.expected_calls, text))
    return sorted(rows, key=lambda r: (-r[0], r[3]))


def row(world, args) -> str:
    rows = ranked(world, args)
    reward, accuracy, calls, best = rows[0]
    near = sum(r[0] >= reward - NEAR for r in rows)
    worst = rows[-1]
    return (
        f"| {world.name} | {world.summary} | `{best}` | {accuracy:.3f} | {reward:.3f} | "
        f"{calls:.2f} | {near} | {worst[0]:.3f} |"
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    paths = args.worlds or sorted(str(p) for p in Path("configs/worlds").glob("*.yaml"))
    print("| world | what wins | best workflow (difficulty mix) | E[acc] | E[reward] | "
          "E[calls] | within 0.02 | worst E[reward] |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        print(row(load_world(path), args))


if __name__ == "__main__":
    main()
