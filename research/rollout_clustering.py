"""How much a rollout's rates cluster by problem, and what that does to the collapse guard.

    python research/rollout_clustering.py runs/default runs/default-s1 --draws 20000

The guard's z-test (``flowgrpo.trainer.monitoring.collapse``) treats a rollout's completions as
independent draws of one rate. A rollout is G problems x K completions, and completions of one
problem share its difficulty: their validity and fallback are correlated within the group. The
variance of the rollout's rate is then larger by the design effect ``D = 1 + (K - 1) * icc``
(Kish, *Survey Sampling*, 1965, ch. 5), and the test fires on noise more often than ``alpha``.

Per run directory (its samples.jsonl): the pooled one-way ANOVA intraclass correlation of each
rate with the problems of a step as groups, steps as strata (so a policy that changes between
steps does not count as clustering), and the design effect. Then, for the run's own rollout
shape, the rate at which the library's rule (:func:`decide`, default :class:`CollapseRule`)
fires when nothing changed: two rollouts drawn from the same beta-binomial (mean ``p``,
intraclass correlation ``icc``), for ``icc`` 0 (the rule's assumption) and the one measured.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from flowgrpo.trainer.monitoring.collapse import CollapseRule, Rollout, decide
from flowgrpo.trainer.reports.diagnose import read_jsonl


def groups_by_step(rows: list[dict], key: str) -> dict[int, list[tuple[int, int]]]:
    """Per step, one (completions, hits) pair per problem: ``hits`` counts rows whose ``key``
    (``valid`` or ``fallback``) is true."""
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        cell = counts[(row["step"], row["problem_id"])]
        cell[0] += 1
        cell[1] += bool(row.get(key))
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (step, _), (n, x) in sorted(counts.items()):
        out[step].append((n, x))
    return dict(out)


def pooled_icc(strata: list[list[tuple[int, int]]]) -> tuple[float, float]:
    """(icc, mean group size) of binary outcomes by one-way ANOVA, pooled over strata.

    Each stratum is a list of (n, x) groups. Sums of squares within and between groups are
    added over strata, with ``G - 1`` and ``N - G`` degrees of freedom a stratum; icc =
    (MSB - MSW) / (MSB + (m - 1) MSW) with m the mean group size. NaN when undefined (no
    stratum with two groups, or both mean squares 0)."""
    ssb = ssw = dfb = dfw = 0.0
    sizes = []
    for groups in strata:
        if len(groups) < 2:
            continue
        n_total = sum(n for n, _ in groups)
        x_total = sum(x for _, x in groups)
        ssb += sum(x * x / n for n, x in groups) - x_total * x_total / n_total
        ssw += sum(x * (n - x) / n for n, x in groups)
        dfb += len(groups) - 1
        dfw += n_total - len(groups)
        sizes += [n for n, _ in groups]
    if dfb == 0 or dfw == 0:
        return float("nan"), float("nan")
    msb, msw, m = ssb / dfb, ssw / dfw, float(np.mean(sizes))
    if msb + (m - 1) * msw == 0:
        return float("nan"), m
    return (msb - msw) / (msb + (m - 1) * msw), m


def draw_rates(rng: np.random.Generator, p: float, icc: float, groups: int, k: int, size: int):
    """``size`` rates of rollouts of ``groups`` x ``k`` completions: each group's own rate from
    Beta(mean p, intraclass correlation icc), binomial within it (icc <= 0: plain binomial)."""
    if icc <= 0 or p in (0.0, 1.0):
        rates = np.full((size, groups), p)
    else:
        total = 1.0 / icc - 1.0
        rates = rng.beta(p * total, (1 - p) * total, size=(size, groups))
    return rng.binomial(k, rates).sum(axis=1) / (groups * k)


def false_alarms(p: float, icc: float, groups: int, k: int, draws: int, seed: int = 0) -> float:
    """Share of ``draws`` pairs of same-policy rollouts on which the default rule fires on
    the validity test (the fallback test is the same test on another rate). Only pairs whose
    validity fell by the rule's effect size can fire, so only those are handed to it."""
    rng = np.random.default_rng(seed)
    rule, n = CollapseRule(), groups * k
    before = draw_rates(rng, p, icc, groups, k, draws)
    after = draw_rates(rng, p, icc, groups, k, draws)
    fired = 0
    for v1, v2 in zip(before, after, strict=True):
        if v1 - v2 >= rule.validity_drop - 1e-9:
            pair = Rollout(0, 0.0, float(v1), n), Rollout(1, 0.0, float(v2), n)
            fired += decide(*pair, rule).collapse
    return fired / draws


def run_row(label: str, rows: list[dict]) -> tuple[list[str], float]:
    """The ICC table's cells for one run's samples, and its validity icc."""
    cells = [label, str(len({r["step"] for r in rows})), str(len(rows))]
    iccs = []
    for key in ("valid", "fallback"):
        icc, m = pooled_icc(list(groups_by_step(rows, key).values()))
        design = float("nan") if math.isnan(icc) else 1 + (m - 1) * max(icc, 0.0)
        cells += [f"{icc:.3f}", f"{design:.2f}"]
        iccs.append(icc)
    return cells, iccs[0]


def rollout_shape(rows: list[dict]) -> tuple[int, int]:
    """(problems, completions per problem) of the run's largest rollout."""
    by_step = groups_by_step(rows, "valid")
    shape = max(by_step.values(), key=len)
    return len(shape), shape[0][0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--rates", nargs="+", type=float, default=[0.2, 0.4, 0.6], help="validity")
    p.add_argument("--draws", type=int, default=20000, help="simulated pairs of rollouts")
    args = p.parse_args(argv)
    if args.draws < 1 or any(not 0 < r < 1 for r in args.rates):
        print("error: --draws takes a whole number >= 1, --rates numbers in (0, 1)")
        return 2
    runs = []
    for run_dir in args.run_dirs:
        if not (run_dir / "samples.jsonl").is_file():
            print(f"error: {run_dir / 'samples.jsonl'} not found: pass run directories")
            return 2
        rows = read_jsonl(run_dir / "samples.jsonl")
        if not rows:  # no rollout to measure (a run stopped before its first step)
            print(f"error: {run_dir / 'samples.jsonl'} holds no samples")
            return 2
        runs.append((str(run_dir), rows))
    print("| run | steps | samples | validity icc | design effect | fallback icc | design effect |")
    print("|---" * 7 + "|")
    for label, rows in runs:
        print("| " + " | ".join(run_row(label, rows)[0]) + " |")
    pooled = [dict(r, step=(i, r["step"])) for i, (_, rows) in enumerate(runs) for r in rows]
    cells, icc = run_row("all runs pooled", pooled)
    print("| " + " | ".join(cells) + " |")
    groups, k = rollout_shape(runs[0][1])
    rho = 0.0 if math.isnan(icc) else max(icc, 0.0)  # no estimate: the test's assumption
    print(f"\nThe default rule's false alarms on validity, {groups} x {k} completions a rollout,")
    print(f"{args.draws} simulated pairs of same-policy rollouts each:\n")
    print(f"| validity | icc 0 (the test's assumption) | icc {rho:.3f} (pooled) |")
    print("|---|---|---|")
    for rate in args.rates:
        a, b = (false_alarms(rate, r, groups, k, args.draws) for r in (0.0, rho))
        print(f"| {rate:.2f} | {a:.4f} | {b:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
