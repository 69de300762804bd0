"""Draw random worlds of the SIMULATED executor, to check settings outside the project's worlds.

Issue 20 asks that the learning settings hold in worlds the project does not contain. The four
worlds of ``configs/worlds/`` were written by hand; this script draws others from a seeded
generator, every operator probability uniform in a wide range (per-difficulty rates fall from
easy to hard), a cost weight in a quarter of them, so no draw is chosen by looking at a run::

    python scripts/draw_worlds.py --n 3 --seed 2026 --out runs/unseen-worlds
    python scripts/worlds_table.py runs/unseen-worlds/*.yaml

The files are ordinary world files (configs/worlds/README.md). They are simulations: their
numbers say whether the RL finds the better workflow, not how well an LLM solves problems.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import yaml

from flowgrpo.operators.simulation.worlds import world_from_dict

#: (low, high) of the easy rate of each per-difficulty field; medium and hard each fall by
#: 0.02-0.12 from the one before (floored at 0.02).
FALLING = {
    "custom_correct": (0.45, 0.92),
    "answer_generate_correct": (0.45, 0.92),
    "programmer_correct": (0.40, 0.95),
    "custom_fix": (0.05, 0.50),
    "review_detect": (0.35, 0.95),
    "revise_fix": (0.08, 0.75),
    "revise_fix_blind": (0.01, 0.15),
}
#: (low, high) of each single-number field.
FLAT = {
    "programmer_crash": (0.0, 0.25),
    "custom_keep": (0.80, 0.99),
    "review_false_alarm": (0.02, 0.25),
    "revise_break": (0.02, 0.25),
    "revise_break_blind": (0.01, 0.08),
    "ensemble_tie_skill": (0.0, 0.8),
    "latent_spread": (0.5, 4.0),
}
COST_SHARE = 0.25  # a quarter of the worlds also weigh the executor calls (reward weight)


def draw_world(rng: random.Random, name: str) -> dict:
    """One world file's data (rounded to 3 decimals)."""
    simulation: dict = {}
    for field, (low, high) in FALLING.items():
        rates = [rng.uniform(low, high)]
        for _ in range(2):
            rates.append(max(0.02, rates[-1] - rng.uniform(0.02, 0.12)))
        simulation[field] = [round(x, 3) for x in rates]
    for field, (low, high) in FLAT.items():
        simulation[field] = round(rng.uniform(low, high), 3)
    data = {"name": name, "summary": "Drawn at random (scripts/draw_worlds.py).",
            "simulation": simulation}  # fmt: skip
    if rng.random() < COST_SHARE:
        data["rewards"] = {"weights": {"cost": round(rng.uniform(0.2, 1.0), 3)}}
    world_from_dict(data, name=name)  # the same checks as a world file gets
    return data


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="worlds to draw")
    p.add_argument("--seed", type=int, required=True, help="the generator's seed")
    p.add_argument("--out", required=True, help="folder for the world files (created)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    for i in range(args.n):
        name = f"drawn-{args.seed}-{i}"
        path = out / f"{name}.yaml"
        path.write_text(yaml.safe_dump(draw_world(rng, name), sort_keys=False), encoding="utf-8")
        print(path)


if __name__ == "__main__":
    main()
