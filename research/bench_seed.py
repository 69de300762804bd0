"""Benchmark: what one seed of the known-optimum study costs, this checkout against a revision.

Runs ``research/learn_known_optimum.py`` (one seed, ``--steps`` steps, the held-out eval of
``--eval-n`` problems x 4, SIMULATED executor) in turn for each arm, A B C A B C ..., so a drift
of the machine's speed hits every arm, and reports per arm the wall and process CPU seconds
(``getrusage(RUSAGE_CHILDREN)``), the per-seed minutes the study records, and each arm's ratio
to the first, pair by pair. Arms: this checkout with ``--threads`` torch threads each (set
through ``OMP_NUM_THREADS``), this checkout with each ``--variant`` override, and with
``--baseline REV`` the same command at git revision REV (checked out into a temporary worktree
and installed there with ``pip install --no-deps --target``, so its own scripts and package
run), the last two with the first thread count::

    python research/bench_seed.py --world configs/worlds/review-loops.yaml --baseline HEAD~1 \\
        --threads 2 1 --steps 6 --repeats 2

The start policy's held-out eval is computed in an uncounted warm-up per arm (the study caches
it), so every counted run times training + the final checkpoint's eval.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_jobs import SCRIPT, median_text, study
from studylib.args import refuse_below_one

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--world", action="append", default=[], help="one world file (default: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--eval-n", type=int, default=40)
    p.add_argument("--repeats", type=int, default=2, help="rounds of every arm counted")
    p.add_argument("--threads", type=int, nargs="+", default=[2, 1], help="arms of this checkout")
    p.add_argument("--baseline", help="a git revision, run as one more arm (first thread count)")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--variant", action="append", default=[],
                   help="one more arm of this checkout (first thread count) with this override, "
                        "e.g. rollout.spare_problems=2")  # fmt: skip
    p.add_argument("--start-cache", type=Path,
                   help="a study --out folder holding the start's cached eval (start-*.json): "
                        "copied to every arm instead of the warm-up run")  # fmt: skip
    args = p.parse_args(argv)
    refuse_below_one(p, args, ("steps", "eval_n", "repeats"))  # before the warm-up study
    if min(args.threads) < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    return args


def warm_up(args, out: Path, arm: dict) -> None:
    """The start policy's held-out eval in ``out``: copied from ``--start-cache`` or computed by
    a one-step study (not counted)."""
    out.mkdir(parents=True, exist_ok=True)
    cached = sorted(args.start_cache.glob("start-*.json")) if args.start_cache else []
    for path in cached:
        shutil.copy(path, out / path.name)
    if not cached:
        study(args, 1, out, "warmup", steps=1, **arm)


def install_revision(rev: str, where: Path) -> dict:
    """The study script and PYTHONPATH of ``rev``, checked out and installed under ``where``."""
    tree, target = where / "tree", where / "site"
    added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                           capture_output=True, text=True)  # fmt: skip
    if added.returncode:  # git's own words: an unknown revision, a tree in the way
        sys.exit(f"--baseline {rev}: {added.stderr.strip() or 'git worktree add failed'}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(tree)], check=True, capture_output=True)  # fmt: skip
    # the study lives in research/ since issue 41, in scripts/ at revisions before it
    script = tree / "research" / SCRIPT.name
    script = script if script.exists() else tree / "scripts" / SCRIPT.name
    return {"script": script, "env": {"PYTHONPATH": str(target)}}


def main(argv=None) -> None:
    args = parse_args(argv)
    args.seeds = [args.seed]
    arms = {f"this checkout, {n} thread(s)": {"env": {"OMP_NUM_THREADS": str(n)}}
            for n in args.threads}  # fmt: skip
    for override in args.variant:
        arms[f"this checkout + {override}, {args.threads[0]} thread(s)"] = {
            "env": {"OMP_NUM_THREADS": str(args.threads[0])}, "extra": [override]}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_seed-") as tmp:
        tmp = Path(tmp)
        try:
            if args.baseline:
                base = install_revision(args.baseline, tmp / "baseline")
                base["env"]["OMP_NUM_THREADS"] = str(args.threads[0])
                arms[f"{args.baseline}, {args.threads[0]} thread(s)"] = base
            results = {name: [] for name in arms}
            for i, arm in enumerate(arms.values()):  # the start's eval, cached and uncounted
                warm_up(args, tmp / f"arm{i}", arm)
            for repeat in range(args.repeats):
                for i, (name, arm) in enumerate(arms.items()):
                    row = study(args, 1, tmp / f"arm{i}", f"r{repeat}", **arm)
                    results[name].append(row)
                    print(f"round {repeat}, {name}: {row['wall_s']:.1f} s wall, "
                          f"{row['cpu_s']:.1f} s CPU", flush=True)  # fmt: skip
        finally:
            if args.baseline:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tmp / "baseline" / "tree")], capture_output=True)  # fmt: skip
    report(args, results)


def report(args, results: dict[str, list[dict]]) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; seed {args.seed}, {args.steps} steps + eval of "
          f"{args.eval_n} problems x 4, {args.repeats} rounds; {args.world}")  # fmt: skip
    first = next(iter(results))
    for name, rows in results.items():
        runs = [run for row in rows for run in row["runs"]]
        ratio = [r["cpu_s"] / f["cpu_s"] for r, f in zip(rows, results[first], strict=True)]
        wall = [r["wall_s"] / f["wall_s"] for r, f in zip(rows, results[first], strict=True)]
        print(f"{name}: wall s {median_text([r['wall_s'] for r in rows])}; CPU s "
              f"{median_text([r['cpu_s'] for r in rows])}; study's record per seed: wall min "
              f"{median_text([r['wall_minutes'] for r in runs])}, CPU min "
              f"{median_text([r['cpu_minutes'] for r in runs])}, torch threads "
              f"{sorted({r.get('torch_threads') for r in runs})}; against '{first}': wall "
              f"{median_text(wall)}, CPU {median_text(ratio)}")  # fmt: skip


if __name__ == "__main__":
    main()
