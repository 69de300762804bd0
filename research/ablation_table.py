"""Ablation rows of the learning study (issue 20) from ``learn_known_optimum.py``'s JSON files.

Each file (``OUT/known_optimum-TAG.json``, one setting, several worlds x seeds, SIMULATED
executor) becomes one row per world: held-out valid-only regret start -> trained (mean, 95%
t-interval over seeds), seeds lower than the start, seeds whose most-written held-out workflow is
within 0.02 of the best expected reward, the held-out share of the best workflow, validity, final
training entropy, alert steps (deadlock / entropy_low, summed over seeds), runs whose last 3 steps
raised deadlock or collapse (the issue's "no run ends in deadlock or collapse") and, apart, runs
whose last 3 steps raised entropy_low (reported, not a target), and minutes per seed: wall
clock, and CPU time of the process (both cores; "–" for files without it).
``--targets`` adds the issue's "done when" verdict per world:

    python research/ablation_table.py runs/screen/known_optimum-*.json
    python research/ablation_table.py research/records/ablations/*.json --targets
    python research/ablation_table.py --merge NAME a.json b.json
    python research/ablation_table.py new.json --against base-a.json base-b.json

``--merge`` joins files of one setting run in parts (other seeds, other sessions) into one row;
the worlds' starts must agree, a seed may appear once per world, and overrides that differ
between the files are listed on stderr (the user decides they are the same setting).
``--against`` compares each file with a base setting (its files merged), seed by seed: per world,
the seeds both ran, their valid-only regret, the paired difference (mean, 95% t-interval) and
the mode-near-best counts; a world or seed only one side ran is left out and named on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from studylib.study import mean_interval

from flowgrpo.files import read_text, replace_text
from flowgrpo.trainer.reports.diagnose import read_jsonl

HEADER = (
    "| setting | world | valid-only regret start → trained | seeds lower | mode near best "
    "| best share | held-out validity | final entropy | deadlock / entropy_low steps "
    "| runs ending in deadlock / collapse | runs ending in entropy_low | min per seed "
    "| CPU-min per seed |"
)
TARGET_HEADER = (
    " ≤ 50% of start | reduction CI > 0 | ≥ 4/5 lower | mode near best ≥ 3/5 "
    "| validity ≥ 0.95 | no end in deadlock / collapse |"
)
END_WINDOW = 3  # "ends in deadlock or collapse": an alert in the last 3 steps


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="known_optimum-TAG.json files")
    p.add_argument("--targets", action="store_true", help="add the issue's per-world verdict")
    p.add_argument("--merge", metavar="NAME", help="one row from all files (seeds joined)")
    p.add_argument("--against", nargs="+", metavar="BASE", help="compare with this setting, "
                   "seed by seed (its files merged)")  # fmt: skip
    p.add_argument("--save", metavar="DIR", help="also copy each file here with its deadlock "
                   "steps replayed (a copy that reads the same without the raw runs)")  # fmt: skip
    return p.parse_args(argv)


def _f(value) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def _ci(values) -> str:
    mean, half = mean_interval(values)
    return _f(mean) + ("" if half != half else f" ± {half:.3f}")


def _mean_or_dash(values) -> str:
    return "–" if None in values or not values else f"{sum(values) / len(values):.1f}"


def setting_of(data: dict) -> str:
    """The row label: the tag and its overrides."""
    overrides = ", ".join(f"`{o}`" for o in data.get("overrides") or [])
    return f"{data.get('tag') or 'baseline'}" + (f" ({overrides})" if overrides else "")


def ended_in_alert(run: dict, steps: int, kinds=("deadlock", "collapse")) -> bool:
    """Whether one of the alerts ``kinds`` fired in the run's last END_WINDOW steps."""
    fired = [s for kind in kinds for s in run["alerts"].get(kind, [])]
    return any(s is not None and s > steps - END_WINDOW for s in fired)


COLLAPSE_CHECKS = ("update_collapse", "fallback_high")  # prose, not a faster step


def _metrics(run: dict) -> list[dict] | None:
    path = Path(run.get("checkpoint") or "").parent / "metrics.jsonl"
    if not path.is_file():
        return None
    return read_jsonl(path)  # a torn last line (an interrupted run) is skipped, as diagnose does


def _deadlocks_in(lines: list[dict]) -> list[int]:
    from flowgrpo.trainer.monitoring.health import HealthConfig, get_check

    check, config = get_check("deadlock"), HealthConfig()
    return [lines[i]["step"] for i in range(len(lines)) if check(lines[: i + 1], config)]


def _collapses_in(lines: list[dict]) -> list[int]:
    named = [(line["step"], a.get("check") or a.get("name") if isinstance(a, dict) else a)
             for line in lines for a in line.get("alerts") or []]  # fmt: skip
    return sorted({step for step, name in named if name in COLLAPSE_CHECKS})


def replayed_deadlocks(run: dict) -> list[int] | None:
    """The deadlock steps under the CURRENT rule, replayed on the run's metrics.jsonl (beside
    its checkpoint) when it is still on disk, so rows trained under an older rule compare; None
    when the file is gone (the stored steps are used)."""
    lines = _metrics(run)
    return None if lines is None else _deadlocks_in(lines)


def logged_collapses(run: dict) -> list[int] | None:
    """The steps whose metrics line carries a prose-collapse alert (:data:`COLLAPSE_CHECKS`),
    read from metrics.jsonl when on disk: files written before ``learn_known_optimum`` kept
    ``step_time_collapse`` apart counted it as a collapse. None when the file is gone."""
    lines = _metrics(run)
    return None if lines is None else _collapses_in(lines)


def with_current_deadlocks(run: dict) -> dict:
    """The run with its deadlock and collapse steps re-read from metrics.jsonl (read once)
    when it is on disk; unchanged otherwise."""
    lines = _metrics(run)
    if lines is None:
        return run
    alerts = {**run["alerts"], "deadlock": _deadlocks_in(lines), "collapse": _collapses_in(lines)}
    return {**run, "alerts": alerts}


def world_stats(world: dict) -> dict:
    """The numbers of one world's runs (see the module docstring)."""
    start, runs = world["start"], [with_current_deadlocks(r) for r in world["runs"]]
    # None: a run with no valid held-out sample has no valid regret; left out of the interval
    trained = [r["eval"]["sim/valid_regret"] for r in runs]
    s0 = start["sim/valid_regret"]
    scored = [t for t in trained if t is not None] if s0 is not None else []
    reduction = mean_interval([s0 - t for t in scored])
    return {
        "start": s0,
        "trained": trained,
        "reduction": reduction,
        "lower": sum(t < s0 for t in scored),
        "near": sum(bool(r["eval"].get("near_best")) for r in runs),
        "best_share": [r["eval"]["sim/best_share"] or 0.0 for r in runs],
        "validity": [r["eval"]["validity_rate"] for r in runs],
        "entropy": [r["series"]["entropy"][-1] for r in runs if r["series"]["entropy"]],
        "deadlock": sum(len(r["alerts"].get("deadlock", [])) for r in runs),
        "entropy_low": sum(len(r["alerts"].get("entropy_low", [])) for r in runs),
        "ended": sum(ended_in_alert(r, r["steps"]) for r in runs),
        "ended_low": sum(ended_in_alert(r, r["steps"], ("entropy_low",)) for r in runs),
        "minutes": [r["wall_minutes"] for r in runs],
        "cpu_minutes": [r.get("cpu_minutes") for r in runs],
        "n": len(runs),
    }


def verdict(st: dict) -> str:
    """The issue's per-world targets: mean <= 50% of the start, the reduction's interval above
    0, lower in >= 4 of 5 seeds (scaled: >= 80%), the mode near best in >= 3 of 5 (>= 60%),
    held-out validity >= 0.95 in every run, no run ending in deadlock or collapse."""
    mean = mean_interval(st["trained"])[0]  # NaN when no run has a valid regret: "no"
    red_mean, red_half = st["reduction"]
    ok = (
        st["start"] is not None and mean <= 0.5 * st["start"],
        red_half == red_half and red_mean - red_half > 0,
        st["lower"] >= 0.8 * st["n"],
        st["near"] >= 0.6 * st["n"],
        min(st["validity"]) >= 0.95,
        st["ended"] == 0,
    )
    return " " + " | ".join("yes" if o else "no" for o in ok) + " |"


def rows(data: dict, targets: bool) -> list[str]:
    out, label = [], setting_of(data)
    for name, world in data["worlds"].items():
        if not world["runs"]:  # a study still running saves each world's start first
            print(f"note: {data['tag']}: world {name} has no seed run yet; no row", file=sys.stderr)
            continue
        st = world_stats(world)
        n = st["n"]
        row = (
            f"| {'' if out else label} | {name} | {_f(st['start'])} → {_ci(st['trained'])} "
            f"| {st['lower']}/{n} | {st['near']}/{n} | {_ci(st['best_share'])} "
            f"| {_ci(st['validity'])} | {_ci(st['entropy'])} "
            f"| {st['deadlock']} / {st['entropy_low']} | {st['ended']}/{n} | {st['ended_low']}/{n} "
            f"| {sum(st['minutes']) / n:.1f} | {_mean_or_dash(st['cpu_minutes'])} |"
        )
        out.append(row + (verdict(st) if targets else ""))
    return out


PAIRED_HEADER = (
    "| setting | world | seeds paired | valid-only regret, base → this | paired difference "
    "(this − base) | mode near best, base → this |"
)


def _paired_seeds(base: dict, data: dict) -> dict[str, tuple[list, list]]:
    """Per world both settings ran: (base evals, this setting's evals) over the seeds both ran."""
    out = {}
    for name, world in data["worlds"].items():
        if name not in base["worlds"]:
            print(f"note: {data['tag']}: world {name} is not in the base; no row", file=sys.stderr)
            continue
        mine = {r["seed"]: r["eval"] for r in world["runs"]}
        theirs = {r["seed"]: r["eval"] for r in base["worlds"][name]["runs"]}
        seeds = sorted(set(mine) & set(theirs))
        if set(mine) ^ set(theirs):
            print(f"note: {name}: seeds {sorted(set(mine) ^ set(theirs))} unpaired, left out",
                  file=sys.stderr)  # fmt: skip
        if seeds:
            out[name] = ([theirs[s] for s in seeds], [mine[s] for s in seeds])
    return out


def _paired_cells(a_evals: list, b_evals: list) -> tuple[str, str, str, int, int]:
    a = [e["sim/valid_regret"] for e in a_evals]
    b = [e["sim/valid_regret"] for e in b_evals]
    near_a = sum(bool(e.get("near_best")) for e in a_evals)
    near_b = sum(bool(e.get("near_best")) for e in b_evals)
    diff = _ci([y - x for x, y in zip(a, b, strict=True)])
    return f"{_ci(a)} → {_ci(b)}", diff, f"{near_a}/{len(a)} → {near_b}/{len(b)}", near_a, near_b


def paired_rows(base: dict, data: dict) -> list[str]:
    """One row per world both settings ran, the seeds both ran compared pairwise; with two or
    more worlds, a pooled row: every (world, seed) pair as one sample (worlds with more seeds
    weigh more) and the worlds whose mode is near the best in >= 60% of seeds (the issue's
    "3 of 5")."""
    out, label = [], setting_of(data)
    pairs = _paired_seeds(base, data)
    met_a = met_b = 0
    for name, (a_evals, b_evals) in pairs.items():
        regrets, diff, near, near_a, near_b = _paired_cells(a_evals, b_evals)
        n = len(a_evals)
        met_a, met_b = met_a + (5 * near_a >= 3 * n), met_b + (5 * near_b >= 3 * n)
        out.append(f"| {'' if out else label} | {name} | {n} | {regrets} | {diff} | {near} |")
    if len(pairs) > 1:
        a_all = [e for a_evals, _ in pairs.values() for e in a_evals]
        b_all = [e for _, b_evals in pairs.values() for e in b_evals]
        regrets, diff, near, _, _ = _paired_cells(a_all, b_all)
        out.append(
            f"| | all {len(pairs)} worlds, pooled | {len(a_all)} | {regrets} | {diff} "
            f"| {near} (worlds ≥ 3/5: {met_a} → {met_b}) |"
        )
    return out


def merged(files: list[tuple[str, dict]], name: str) -> dict:
    """One setting from several files: each world's runs joined (its start must agree)."""
    first = files[0][1]
    out = {"tag": name, "overrides": first.get("overrides") or [], "worlds": {}}
    for path, data in files:
        differ = sorted(set(data.get("overrides") or []) ^ set(out["overrides"]))
        if differ:
            print(f"note: {path}: overrides differ from {files[0][0]}: {differ}", file=sys.stderr)
        for world_name, world in data["worlds"].items():
            into = out["worlds"].setdefault(world_name, {"start": world["start"], "runs": []})
            a, b = into["start"]["sim/valid_regret"], world["start"]["sim/valid_regret"]
            if abs(a - b) > 1e-9:
                sys.exit(f"{path}: world {world_name}: start {b} differs from {a}; not one setting")
            seeds = {r["seed"] for r in into["runs"]}
            for run in world["runs"]:
                if run["seed"] in seeds:
                    sys.exit(f"{path}: world {world_name}: seed {run['seed']} is in two files")
                into["runs"].append(run)
    return out


def check_save(folder: str, paths: list[str]) -> None:
    """Before anything is saved: two files of one name would overwrite each other's copy, and a
    file there that is not a study's JSON (no worlds) is the user's, not replaced."""
    names = [Path(p).name for p in paths]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        sys.exit(f"--save: two files named {twice[0]}; their copies would overwrite each other")
    for name in names:
        out = Path(folder) / name
        try:
            data = json.loads(read_text(out)) if out.is_file() else None
            ours = isinstance(data, dict) and "worlds" in data
        except (OSError, ValueError):
            ours = False
        if out.exists() and not ours:
            sys.exit(f"--save: {out} exists and is not a study's JSON; move it or save elsewhere")


def read(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"{path}: cannot read it as a learn_known_optimum JSON file ({exc})")
    if "worlds" not in data:
        sys.exit(f"{path}: no 'worlds' key; pass a known_optimum-TAG.json file")
    return data


def main(argv=None) -> None:
    args = parse_args(argv)
    header = PAIRED_HEADER if args.against else HEADER + (TARGET_HEADER if args.targets else "")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    files = [(path, read(path)) for path in args.files]
    if args.against:
        base = merged([(path, read(path)) for path in args.against], "base")
        for _, data in files:
            lines += paired_rows(base, data)
    elif args.merge:
        lines += rows(merged(files, args.merge), args.targets)
    else:
        for _, data in files:
            lines += rows(data, args.targets)
    if args.save:
        check_save(args.save, [path for path, _ in files])
    for path, data in files if args.save else ():
        for world in data["worlds"].values():
            world["runs"] = [with_current_deadlocks(r) for r in world["runs"]]
        out = Path(args.save) / Path(path).name
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_text(out, json.dumps(data, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
