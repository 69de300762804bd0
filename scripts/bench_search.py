"""Benchmark: ``flowgrpo search`` over the SIMULATED executor, process CPU seconds per search.

Runs :func:`flowgrpo.trainer.search.run.search` on a world's config (the known-optimum config
with the world's simulation parameters and reward weights, as ``research/search_quality.py``
builds it) ``--repeats`` times and prints one JSON line per run: which flowgrpo ran (its path),
the CPU seconds of the search alone (config and world loading excluded), the pick and the calls
made. To compare two revisions side by side, run it in turn with each on ``PYTHONPATH`` (a
revision installed with ``pip install --no-deps --target DIR``)::

    python scripts/bench_search.py --world configs/worlds/adaptive-checks.yaml --budget 150000
    PYTHONPATH=/tmp/base-site python scripts/bench_search.py --world ... --budget 150000
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import flowgrpo
from flowgrpo.operators.simulation.worlds import load_world
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.search.run import search

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=Path, default=ROOT / "configs/worlds/adaptive-checks.yaml")
    p.add_argument("--config", type=Path, default=ROOT / "configs/known-optimum.yaml")
    p.add_argument("--budget", type=int, default=150_000, help="executor calls per search")
    p.add_argument("--repeats", type=int, default=1)
    return p.parse_args(argv)


def world_config(config: Path, world_path: Path):
    world = load_world(world_path)
    sets = [f"rewards.weights.{k}={v}" for k, v in world.reward_weights.items()]
    params = json.dumps(dict(world.simulation))
    return load_config(config, (f"executor.options.params={params}", *sets))


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = world_config(args.config, args.world)
    for _ in range(args.repeats):
        start = time.process_time()
        result = search(cfg, args.budget)
        row = {
            "flowgrpo": str(Path(flowgrpo.__file__).parent),
            "cpu_s": round(time.process_time() - start, 2),
            "pick": result.best.workflow,
            "calls": result.calls,
            "world": args.world.stem,
            "machine": platform.processor() or platform.machine(),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
