"""Draw random worlds of the SIMULATED executor, to check settings outside the project's worlds.

Issue 20 asks that the learning settings hold in worlds the project does not contain. The four
worlds of ``configs/worlds/`` were written by hand; this script draws others from a seeded
generator, every operator probability uniform in a wide range (per-difficulty rates fall from
easy to hard), a cost weight in a quarter of them, so no draw is chosen by looking at a run::

    python scripts/draw_worlds.py --n 3 --seed 2026 --out runs/unseen-worlds
    python scripts/worlds_table.py runs/unseen-worlds/*.yaml

``--adaptive`` draws worlds whose best workflow depends on the problem (issue 40): on top of a
world drawn as above, one to three templates each get one to three operator probabilities drawn
afresh from the same ranges (``simulation.templates``), and a draw is kept only when its oracle
gap (the best workflow per kind against the best single one, on the arithmetic task's mix, at
``--max-calls``) is at least ``--min-gap``; the draws before it are discarded, which the seed
still fixes. The gap is a property of the world, computed exactly, not of any run::

    python scripts/draw_worlds.py --adaptive --n 3 --seed 2028 --out runs/unseen-adaptive

The files are ordinary world files (configs/worlds/README.md). They are simulations: their
numbers say whether the RL finds the better workflow, not how well an LLM solves problems.
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import yaml

from flowgrpo.dsl import DEFAULT_MAX_CALLS
from flowgrpo.files import replace_text
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.simulation.oracle import arithmetic_mix, oracle
from flowgrpo.operators.simulation.space import Tradeoff
from flowgrpo.operators.simulation.worlds import world_from_dict
from flowgrpo.operators.tasks.arithmetic import TEMPLATES

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
#: The fields a drawn template override may set apart (those that decide which workflow wins).
TEMPLATE_DRAW = (
    "custom_correct",
    "answer_generate_correct",
    "programmer_correct",
    "programmer_crash",
    "review_detect",
    "revise_fix",
    "review_false_alarm",
    "revise_break",
)
MAX_TRIES = 60  # adaptive draws per world before giving up with a message


def _falling(rng: random.Random, low: float, high: float) -> list[float]:
    rates = [rng.uniform(low, high)]
    for _ in range(2):
        rates.append(max(0.02, rates[-1] - rng.uniform(0.02, 0.12)))
    return [round(x, 3) for x in rates]


def draw_world(rng: random.Random, name: str) -> dict:
    """One world file's data (rounded to 3 decimals)."""
    simulation: dict = {}
    for field, (low, high) in FALLING.items():
        simulation[field] = _falling(rng, low, high)
    for field, (low, high) in FLAT.items():
        simulation[field] = round(rng.uniform(low, high), 3)
    data = {"name": name, "summary": "Drawn at random (scripts/draw_worlds.py).",
            "simulation": simulation}  # fmt: skip
    if rng.random() < COST_SHARE:
        data["rewards"] = {"weights": {"cost": round(rng.uniform(0.2, 1.0), 3)}}
    world_from_dict(data, name=name)  # the same checks as a world file gets
    return data


def draw_templates(rng: random.Random) -> dict:
    """One to three templates, each with one to three fields of :data:`TEMPLATE_DRAW` drawn
    afresh from the ranges above."""
    overrides = {}
    for template in rng.sample(sorted(TEMPLATES), rng.randint(1, 3)):
        fields = rng.sample(TEMPLATE_DRAW, rng.randint(1, 3))
        overrides[template] = {
            f: _falling(rng, *FALLING[f]) if f in FALLING else round(rng.uniform(*FLAT[f]), 3)
            for f in sorted(fields)
        }
    return overrides


def draw_adaptive(rng: random.Random, name: str, min_gap: float, max_calls: int) -> dict:
    """A world with template overrides whose oracle gap is at least ``min_gap`` (redrawn up to
    :data:`MAX_TRIES` times; ``SystemExit`` saying so after that)."""
    for _ in range(MAX_TRIES):
        data = draw_world(rng, name)
        data["simulation"]["templates"] = draw_templates(rng)
        gap = oracle_gap(data, name, max_calls)
        if gap >= min_gap:
            data["summary"] = (f"Drawn at random (scripts/draw_worlds.py --adaptive); oracle gap "
                               f"{gap:.3f} at {max_calls} calls.")  # fmt: skip
            return data
    raise SystemExit(f"no world with an oracle gap >= {min_gap} in {MAX_TRIES} draws; lower "
                     "--min-gap")  # fmt: skip


def oracle_gap(data: dict, name: str, max_calls: int) -> float:
    """The exact oracle gap of a world's data at a call budget (its own cost weight)."""
    world = world_from_dict(data, name=name)
    limits = executor_limits(ExecutorConfig(max_calls=max_calls))
    cost = float(world.reward_weights.get("cost", 0.0))
    mix = arithmetic_mix(world.params)
    found = oracle(world.params, mix, None, limits, Tradeoff(1.0, cost, max_calls))
    return found.gap


#: The first line of every world file this script draws: a file without it is not replaced.
MARK = "# drawn by scripts/draw_worlds.py (a SIMULATED executor world)\n"


def _ours(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline() == MARK
    except (OSError, UnicodeDecodeError):
        return False


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="worlds to draw")
    p.add_argument("--seed", type=int, required=True, help="the generator's seed")
    p.add_argument("--out", required=True, help="folder for the world files (created)")
    p.add_argument("--adaptive", action="store_true", help="draw template overrides too, and "
                   "keep worlds whose oracle gap is at least --min-gap")  # fmt: skip
    p.add_argument("--min-gap", type=float, default=0.03, help="(--adaptive) in reward units")
    p.add_argument("--max-calls", type=int, default=DEFAULT_MAX_CALLS,
                   help="(--adaptive) the call budget the gap is measured at")  # fmt: skip
    args = p.parse_args(argv)
    if args.n < 1:
        p.error(f"--n {args.n}: draw at least one world")
    if args.max_calls < 1 or not math.isfinite(args.min_gap):
        p.error(f"--max-calls must be >= 1 and --min-gap a number, got {args.max_calls} and "
                f"{args.min_gap}")  # fmt: skip
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        p.error(f"--out {out} is a file: give a folder for the world files")
    names = [f"{'adaptive' if args.adaptive else 'drawn'}-{args.seed}-{i}" for i in range(args.n)]
    theirs = [p for p in (out / f"{n}.yaml" for n in names) if p.exists() and not _ours(p)]
    if theirs:  # a file of the same name this script did not draw is the user's
        p.error(f"{theirs[0]} exists and this script did not draw it; move it or choose --out")
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    for i in range(args.n):
        name = f"{'adaptive' if args.adaptive else 'drawn'}-{args.seed}-{i}"
        if args.adaptive:
            data = draw_adaptive(rng, name, args.min_gap, args.max_calls)
        else:
            data = draw_world(rng, name)
        path = out / f"{name}.yaml"
        replace_text(path, MARK + yaml.safe_dump(data, sort_keys=False))
        print(path)


if __name__ == "__main__":
    main()
