"""A run's logged workflows judged again under other call budgets (issue 41's one call budget).

    python research/budget_revalidate.py runs/default runs/default-s1 --budgets 12 20

Per run directory (its samples.jsonl) and per block of steps: how many logged completions the
reward parsed into a workflow, how many of those are valid under each budget in --budgets, and
how many change between the first budget and each other one. A workflow's calls are counted as
the executor counts them with the default operator settings (MdEnsemble's votes and
Programmer's retry included: ``executor_limits(ExecutorConfig(max_calls=N)).static_limits()``).
It answers whether a run's validity moved because the budget judged its workflows differently.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowgrpo.dsl import validate
from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.trainer.reports.diagnose import read_jsonl


def judge(rows: list[dict], budgets: list[int], domain: str) -> dict:
    """Counts over ``rows`` (samples.jsonl lines): ``samples``, ``parsed`` (a canonical
    workflow), ``valid`` (a list: valid under each budget), ``changed`` (a list: parsed
    workflows whose verdict under each budget differs from the first budget's)."""
    limits = [executor_limits(ExecutorConfig(max_calls=b)).static_limits() for b in budgets]
    n = len(budgets)
    out = {"samples": len(rows), "parsed": 0, "valid": [0] * n, "changed": [0] * n}
    for row in rows:
        text = row.get("canonical")
        if not text:
            continue
        out["parsed"] += 1
        verdicts = [validate(text, domain=domain, limits=lim).ok for lim in limits]
        for i, ok in enumerate(verdicts):
            out["valid"][i] += ok
            out["changed"][i] += ok != verdicts[0]
    return out


def blocks(rows: list[dict], size: int) -> list[tuple[int, int, list[dict]]]:
    """(first step, last step, rows) for consecutive blocks of ``size`` steps."""
    if not rows:
        return []
    last = max(r["step"] for r in rows)
    return [
        (a, min(a + size - 1, last), [r for r in rows if a <= r["step"] < a + size])
        for a in range(1, last + 1, size)
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--budgets", nargs="+", type=int, default=[12, 20], help="call budgets")
    p.add_argument("--block", type=int, default=10, help="steps per block")
    p.add_argument("--domain", default="math", help="the task's domain (arithmetic: math)")
    args = p.parse_args(argv)
    if any(b < 1 for b in args.budgets):
        print("error: --budgets takes whole numbers >= 1")
        return 2
    samples = {}
    for run_dir in args.run_dirs:  # all read before the table starts
        path = run_dir / "samples.jsonl"
        samples[run_dir] = read_jsonl(path) if path.is_file() else []
        if not samples[run_dir]:
            print(f"error: {path} not found or empty: pass run directories (with samples.jsonl)")
            return 2
    head = " | ".join(f"valid at {b}" for b in args.budgets)
    changed = " | ".join(f"changed at {b}" for b in args.budgets[1:])
    print(f"| run | steps | samples | parsed | {head} | {changed} |")
    print("|---" * (4 + 2 * len(args.budgets) - 1) + "|")
    for run_dir in args.run_dirs:
        for first, last, rows in blocks(samples[run_dir], args.block):
            c = judge(rows, args.budgets, args.domain)
            cells = [str(v) for v in c["valid"]] + [str(v) for v in c["changed"][1:]]
            print(f"| {run_dir} | {first}-{last} | {c['samples']} | {c['parsed']} | "
                  + " | ".join(cells) + " |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
