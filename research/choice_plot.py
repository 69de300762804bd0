"""Policy vs best single workflow vs ``flowgrpo search``, against executor calls: one figure per
world of a per-label study (issue 40, item 3), from the study's JSON.

For each world of the given ``learn_known_optimum.py`` JSON files (runs of one world merged
across files), on the study's held-out problems (``--eval-n``, the study's default 40), every
reward exact (the SIMULATED executor's analysis, a model of operators, not an LLM):

- the best single workflow and the oracle (each kind its own best): horizontal lines;
- each seed's trained policy at the calls it cost: the start's per-label search plus the RL
  run's own executor calls;
- the per-label search's table used as it is, at its calls;
- ``flowgrpo search``'s pick at the RL run's calls (what the study records), and a curve of the
  pick's reward at ``--budgets`` calls (mean and range over ``--search-seeds``), searched here.

Writes ``OUT/figures/choice-WORLD.png`` and ``OUT/choice_curves.json`` (the curve's numbers)::

    python research/choice_plot.py \\
        research/records/ablations/known_optimum-labelsearch-top1-review{,-s234}.json \\
        --budgets 10000 30000 100000 300000 --search-seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from flowgrpo.files import read_text, replace_text
from flowgrpo.trainer.reports.plots import check_replaceable, save


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("studies", nargs="+", metavar="JSON", help="learn_known_optimum.py output")
    p.add_argument("--world-dir", default="configs/worlds",
                   help="where WORLD.yaml is found for each world name")  # fmt: skip
    p.add_argument("--world", dest="worlds", nargs="*", default=[], metavar="FILE",
                   help="world files outside --world-dir (drawn worlds)")  # fmt: skip
    p.add_argument("--budgets", type=int, nargs="*", default=[10_000, 30_000, 100_000, 300_000])
    p.add_argument("--search-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--start-calls", type=int, default=None,
                   help="the start's search calls, for studies whose JSON does not record its "
                   "table (a start built by hand); a recorded table's calls win")  # fmt: skip
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--eval-n", type=int, default=40, help="held-out problems (as the study)")
    p.add_argument("--out", default="research/records")
    return p.parse_args(argv)


def merged_worlds(paths) -> dict[str, dict]:
    """World name -> {"start": the start's eval, "runs": every seed's run} over the files; a
    file that does not read, or holds no worlds (not a study's JSON), ends the script."""
    worlds: dict[str, dict] = {}
    for path in paths:
        try:
            data = json.loads(read_text(path))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: {path}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("worlds"), dict):
            raise SystemExit(f"error: {path}: no worlds in it; give the JSON a study wrote "
                             "(learn_known_optimum.py's known_optimum[-TAG].json)")  # fmt: skip
        for name, world in data["worlds"].items():
            into = worlds.setdefault(name, {"start": world.get("start"), "runs": {}})
            for run in world.get("runs") or []:
                into["runs"][run["seed"]] = run
    return worlds


def points(world: dict, start_calls: int | None = None) -> dict:
    """The figure's measured points and lines from a study's records of one world;
    ``start_calls``: the start's search calls where the study did not record its table."""
    start = (world["start"] or {}).get("choice") or {}
    table = start.get("table") or {}
    runs = [r["eval"]["choice"] for _, r in sorted(world["runs"].items()) if "choice" in r["eval"]]
    if not runs:
        raise SystemExit("no run with a choice report (issue 40's study): nothing to plot")
    start_calls = table.get("calls") or start_calls or 0
    return {
        "start_calls": start_calls,
        "single": runs[0]["single_reward"],
        "oracle": runs[0]["oracle_reward"],
        "table": (table["calls"], table["reward"]) if table else None,
        "policy": [
            (start_calls + (c["search"] or {}).get("calls", 0), c["policy_reward"]) for c in runs
        ],
        "search_same": [
            (c["search"]["calls"], c["search"]["reward"]) for c in runs if c.get("search")
        ],
    }


def search_curve(args, world_file: Path, budgets, seeds) -> list[dict]:
    """``flowgrpo search``'s pick at each budget and seed, scored on the held-out problems."""
    from learn_known_optimum import scoring, world_overrides
    from studylib.choice import pick_reward

    from flowgrpo.operators.simulation.worlds import load_world
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.search.run import search

    world = load_world(world_file)
    cfg = load_config(args.config, ("rollout.cache_path=null", *world_overrides(world)))
    sim, problems = scoring(cfg, args)
    out = []
    for budget in budgets:
        rewards = []
        for seed in seeds:
            pick = search(cfg, budget, seed=seed).best.workflow
            rewards.append(pick_reward(sim, problems, pick))
        out.append({"budget": budget, "rewards": rewards})
    return out


def plot(name: str, found: dict, curve: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.axhline(found["oracle"], color="tab:green", ls=":", label="oracle (each kind its best)")
    ax.axhline(found["single"], color="black", ls="--", label="best single workflow (exact)")
    if curve:
        xs = [c["budget"] for c in curve]
        ax.plot(xs, [statistics.mean(c["rewards"]) for c in curve], "-o", color="tab:gray",
                label="search's pick (mean of seeds)")  # fmt: skip
        ax.fill_between(xs, [min(c["rewards"]) for c in curve], [max(c["rewards"]) for c in curve],
                        color="tab:gray", alpha=0.2)  # fmt: skip
    if found["search_same"]:
        ax.scatter(*zip(*found["search_same"]), marker="x", color="tab:red",
                   label="search at the RL run's calls")  # fmt: skip
    if found["table"]:
        ax.scatter(*found["table"], marker="s", color="tab:orange", label="per-label table as is")
    what = "start's search + RL" if found["start_calls"] else "RL only: the start's calls unknown"
    ax.scatter(*zip(*found["policy"]), marker="o", color="tab:blue",
               label=f"trained policy ({what})")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("executor calls")
    ax.set_ylabel("held-out expected reward (exact)")
    ax.set_title(f"{name} (SIMULATED executor)")
    ax.legend(fontsize=7, loc="lower right")
    path = save(fig, out / f"choice-{name}.png", dpi=110)  # a user's file there is refused
    plt.close(fig)
    return path


def world_file(args, name: str) -> Path:
    for given in map(Path, args.worlds):
        if given.stem == name:
            return given
    path = Path(args.world_dir) / f"{name}.yaml"
    if not path.exists():
        raise SystemExit(f"{name}: no world file {path}; pass it with --world FILE")
    return path


def main(argv=None) -> None:
    args = parse_args(argv)
    worlds = merged_worlds(args.studies)
    try:  # before the searches: a user's file under a figure's name is refused, not replaced
        for name in worlds:
            check_replaceable(Path(args.out) / "figures" / f"choice-{name}.png")
    except FileExistsError as exc:
        raise SystemExit(f"error: {exc}") from None
    curves = {}
    for name, world in sorted(worlds.items()):
        found = points(world, args.start_calls)
        curve = search_curve(args, world_file(args, name), args.budgets, args.search_seeds)
        curves[name] = {**found, "curve": curve}
        print(f"{name}: {plot(name, found, curve, Path(args.out) / 'figures')}")
    path = Path(args.out) / "choice_curves.json"
    replace_text(path, json.dumps(curves, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()
