"""SFT pairs for a start that already varies by kind of problem (issue 40, a diagnostic).

For every training problem of the run, one of its kind's ``--top`` best workflows (exact, from the
SIMULATED executor's analysis of the world: ``operators.simulation``), taken in turn. The start
trained on them (``flowgrpo sft --set sft.data=jsonl:PAIRS``) writes good candidates *for each
kind*; the RL run from it shows whether the update keeps, sharpens or collapses a choice that
differs by problem. It reads the kinds from the simulation, which a real task does not expose:
an upper bound on what a per-kind start can give, not a method to ship.

    python research/kind_start_pairs.py --world configs/worlds/adaptive-checks.yaml \
        --top 3 --out runs/kind-start/checks-pairs.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from learn_known_optimum import world_overrides
from studylib.choice import exact_reward


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--world", required=True, help="a world file (configs/worlds/*.yaml)")
    p.add_argument("--top", type=int, default=3, help="best workflows per kind, used in turn")
    p.add_argument("--examples", type=int, default=None, help="default: the config's sft.examples")
    p.add_argument("--out", required=True, help="the JSONL file of pairs to write")
    return p.parse_args(argv)


def ranked_by_kind(sim, kinds, top: int) -> dict[str, list[tuple[str, float]]]:
    """Each kind's ``top`` workflows of the writable space, best first, with their exact
    expected rewards (the run's limits and trade-off, as the study scores them)."""
    from flowgrpo.operators.simulation.oracle import writable_space

    space = writable_space(sim.limits)
    out = {}
    for kind in sorted(set(kinds)):
        scored = [(exact_reward(sim, w, kind), w) for w in space]
        scored.sort(key=lambda rw: (-rw[0], rw[1]))
        out[kind] = [(w, r) for r, w in scored[:top]]
    return out


def main(argv=None) -> None:
    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.operators.simulation.worlds import load_world
    from flowgrpo.operators.tasks import load_task
    from flowgrpo.trainer.config import load_config

    args = parse_args(argv)
    cfg = load_config(args.config, tuple(world_overrides(load_world(args.world))))
    sim = regret_settings(cfg, executor_limits(cfg.executor))
    n = args.examples or cfg.sft.examples
    problems = load_task(cfg.rollout.task, n=n, seed=cfg.rollout.seed, split="train")
    kinds = [sim.params.kind_of(p) for p in problems]
    ranked = ranked_by_kind(sim, kinds, args.top)
    seen: Counter = Counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for problem, kind in zip(problems, kinds):
            workflow, _ = ranked[kind][seen[kind] % len(ranked[kind])]
            seen[kind] += 1
            row = {"question": problem.question, "workflow": workflow, "domain": problem.domain}
            f.write(json.dumps(row) + "\n")
    for kind, rows in ranked.items():
        print(kind, seen[kind], "; ".join(f"{w} ({r:.3f})" for w, r in rows))
    print(f"{len(problems)} pairs written to {out}")


if __name__ == "__main__":
    main()
