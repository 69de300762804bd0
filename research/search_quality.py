"""How close does ``flowgrpo search`` get to the best single workflow? Worlds x budgets x seeds.

For each world file, budget (executor calls) and seed: ``flowgrpo search`` over the default
candidates (the canonical space a 12-call run can write) with the SIMULATED executor of
``configs/known-optimum.yaml`` set to the world, then the exact expected reward of its pick on
the arithmetic task's mix of kinds against the exact best single workflow's (its regret), with
the calls spent and the seconds. Writes ``OUT/search_quality.json`` and prints a Markdown table
(the numbers are from a model of operators, not from an LLM)::

    python research/search_quality.py --world configs/worlds/*.yaml --budget 1000000 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

NEAR = 0.02


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", dest="worlds", nargs="+", required=True, metavar="FILE")
    p.add_argument("--budget", dest="budgets", type=int, nargs="+", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--out", default="research/records")
    return p.parse_args(argv)


def one(args, world, budget: int, seed: int) -> dict:
    """One search and its exact regret against the best single workflow."""
    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.operators.simulation import analyze, expected_reward
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.operators.simulation.oracle import arithmetic_mix, oracle
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.search.run import search

    sets = [f"executor.options.params={json.dumps(dict(world.simulation))}"]
    sets += [f"executor.options.seed={seed}"]
    sets += [f"rewards.weights.{k}={v}" for k, v in world.reward_weights.items()]
    cfg = load_config(args.config, tuple(sets))
    started = time.perf_counter()
    result = search(cfg, budget, seed=seed)
    seconds = time.perf_counter() - started
    limits = executor_limits(cfg.executor)
    tradeoff = regret_settings(cfg, limits).tradeoff  # the rule search ranks by (sim/regret's)
    mix = arithmetic_mix(world.params)
    best = oracle(world.params, mix, None, limits, tradeoff).single
    pick = result.best.workflow
    exact = expected_reward(analyze(pick, world.params, mix, limits), tradeoff)
    return {"world": world.name, "budget": budget, "seed": seed, "calls": result.calls,
            "pick": pick, "measured": result.best.mean, "ci95": result.best.ci95,
            "exact": exact, "best": best.reward, "regret": best.reward - exact,
            "seconds": seconds}  # fmt: skip


def table(rows: list[dict]) -> str:
    lines = ["| world | budget | seed | calls spent | pick's exact E[reward] | best single | "
             "regret | within 0.02 |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['world']} | {r['budget']:,} | {r['seed']} | {r['calls']:,} | "
                     f"{r['exact']:.3f} | {r['best']:.3f} | {r['regret']:.3f} | "
                     f"{'yes' if r['regret'] <= NEAR else 'no'} |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> None:
    from flowgrpo.operators.simulation.worlds import load_world

    args = parse_args(argv)
    worlds = [load_world(w) for w in args.worlds]
    rows = []
    for budget in args.budgets:
        for seed in args.seeds:
            for world in worlds:
                rows.append(one(args, world, budget, seed))
                print(f"{rows[-1]['world']} {budget} seed {seed}: regret "
                      f"{rows[-1]['regret']:.3f}", flush=True)  # fmt: skip
    out = Path(args.out) / "search_quality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1), encoding="utf-8")
    print(table(rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
