"""Benchmark: seeds of the known-optimum study one after another vs two at once (``--jobs``).

Runs ``research/learn_known_optimum.py`` on the same seeds, steps and held-out size with
``--jobs 1`` (one process, torch on every core) and ``--jobs 2`` (two worker processes, the
cores shared), alternating A B A B so that a drift of the machine's speed hits both, and
reports per arm the wall seconds and the CPU seconds of the whole process tree (the script and
its workers, from ``getrusage(RUSAGE_CHILDREN)``), their ratio pair by pair, and the per-seed
wall and CPU minutes the study itself records. The start policy's held-out numbers are computed
once in an uncounted warm-up (the study caches them), so both arms time training + eval only.
SIMULATED executor, as in the study::

    python research/bench_jobs.py --seeds 0 1 --steps 6 --eval-n 8 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from studylib.args import refuse_below_one

SCRIPT = Path(__file__).with_name("learn_known_optimum.py")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--world", action="append", default=[], help="world files (default: none)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--eval-n", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2, help="A/B pairs counted")
    p.add_argument("--jobs", type=int, nargs=2, default=[1, 2], metavar=("A", "B"))
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args(argv)
    refuse_below_one(p, args, ("steps", "eval_n", "repeats"))  # before the warm-up study
    return args


def study(args, jobs: int, out: Path, tag: str, seeds=None, steps=None, script=SCRIPT, env=None,
          extra=()):  # fmt: skip
    """One study command (``script``, with ``env`` added to the environment and the ``extra``
    overrides after ``--set``'s); its wall and process-tree CPU seconds and the per-seed
    records."""
    cmd = [sys.executable, str(script), "--config", args.config, "--no-write",
           "--out", str(out), "--runs-dir", str(out / "runs"), "--tag", tag,
           "--jobs", str(jobs), "--eval-n", str(args.eval_n),
           "--steps", str(steps or args.steps),
           "--seeds", *map(str, seeds or args.seeds)]  # fmt: skip
    for world in args.world:
        cmd += ["--world", world]
    for override in (*args.overrides, *extra):
        cmd += ["--set", override]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"study failed (--jobs {jobs}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = json.loads((out / f"known_optimum-{tag}.json").read_text(encoding="utf-8"))
    runs = [run for world in data["worlds"].values() for run in world["runs"]]
    return {"wall_s": wall, "cpu_s": cpu, "runs": runs}


def median_text(values) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def report(args, results: dict[int, list[dict]]) -> None:
    a, b = args.jobs
    seeds = len(args.seeds) * max(1, len(args.world))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; {seeds} seeds x {args.steps} steps + eval of "
          f"{args.eval_n} problems x 4 per arm, {args.repeats} pairs")  # fmt: skip
    for jobs in args.jobs:
        rows = results[jobs]
        per_seed = [run for row in rows for run in row["runs"]]
        print(f"--jobs {jobs}: wall s {median_text([r['wall_s'] for r in rows])}; "
              f"process-tree CPU s {median_text([r['cpu_s'] for r in rows])}; per seed (study's "
              f"own record) wall min {median_text([r['wall_minutes'] for r in per_seed])}, CPU min "
              f"{median_text([r['cpu_minutes'] for r in per_seed])}, torch threads "
              f"{sorted({r.get('torch_threads') for r in per_seed})}")  # fmt: skip
    pairs = list(zip(results[b], results[a], strict=True))
    print(f"ratio --jobs {b} / --jobs {a}, pair by pair: wall "
          f"{median_text([x['wall_s'] / y['wall_s'] for x, y in pairs])}, CPU "
          f"{median_text([x['cpu_s'] / y['cpu_s'] for x, y in pairs])}")  # fmt: skip


def main(argv=None) -> None:
    args = parse_args(argv)
    results: dict[int, list[dict]] = {jobs: [] for jobs in args.jobs}
    with tempfile.TemporaryDirectory(prefix="bench_jobs-") as tmp:
        out = Path(tmp)
        study(args, 1, out, "warmup", seeds=args.seeds[:1], steps=1)  # caches the start's eval
        for repeat in range(args.repeats):
            for jobs in args.jobs:
                row = study(args, jobs, out, f"j{jobs}-{repeat}")
                results[jobs].append(row)
                print(f"pair {repeat}, --jobs {jobs}: {row['wall_s']:.1f} s wall, "
                      f"{row['cpu_s']:.1f} s CPU", flush=True)  # fmt: skip
    report(args, results)


if __name__ == "__main__":
    main()
