"""Benchmark: reward components on a batch of 64 samples (8 groups of 8), warm caches.

Target (issue 4): validity + diversity for 64 samples well under 10 ms. Also times the whole
score_samples (default spec, no execution: accuracy and cost are NaN for valid samples) and
prepare_samples(execute=False) (extraction + validation, cached). Usage::

    python scripts/bench_rewards.py [--groups 8] [--group-size 8] [--repeats 300]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

from flowgrpo.dsl import canonical, validate
from flowgrpo.dsl.generate import random_workflow
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import (
    RewardOptions,
    RewardSpec,
    get_component,
    prepare_samples,
    score_samples,
)

_PROSE = "### Step 1: Analyze the problem\nWe add the numbers and get the result."


def _completions(n: int, seed: int) -> list[str]:
    """A mix like real rollouts: few distinct workflows, some fenced, some prose / broken."""
    rng = random.Random(seed)
    pool: list[str] = []
    while len(pool) < 12:  # distinct workflows valid for math
        text = canonical(random_workflow(rng, max_steps=5, max_depth=2))
        if text not in pool and validate(text, domain="math").ok:
            pool.append(text)
    out = []
    for _ in range(n):
        kind = rng.random()
        text = rng.choice(pool)
        if kind < 0.15:
            out.append(_PROSE)
        elif kind < 0.25:
            out.append(text + " ->")  # syntax error
        elif kind < 0.45:
            out.append(f"Here is the workflow:\n```\n{text}\n```")
        else:
            out.append(text)
    return out


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    for name in ("groups", "group_size", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    k, n = args.group_size, args.groups * args.group_size
    problems = [
        Problem(f"b/{g}", "math", f"What is {g} + 1?", str(g + 1)) for g in range(args.groups)
    ]
    completions = _completions(n, seed=0)

    def prepare():
        return prepare_samples(problems, completions, k, execute=False)

    prepare()  # warm the extraction and validation caches
    samples = prepare()
    groups = [samples[i : i + k] for i in range(0, n, k)]
    validity, diversity = get_component("validity"), get_component("diversity")

    def components(options):
        def call():
            for group in groups:
                validity(group, options, None)
                diversity(group, options, None)

        return call

    canonical_opts = RewardOptions()
    structural_opts = RewardOptions(diversity_metric="structural")
    spec = RewardSpec()
    results = {
        "validity + diversity (canonical)": _median_ms(components(canonical_opts), args.repeats),
        "validity + diversity (structural)": _median_ms(components(structural_opts), args.repeats),
        "score_samples, default spec, no execution": _median_ms(
            lambda: score_samples(samples, k, spec), args.repeats
        ),
        "prepare_samples(execute=False), warm cache": _median_ms(prepare, args.repeats),
    }
    valid = sum(s.valid for s in samples)
    fallback = sum(s.fallback for s in samples)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    print(f"batch: {n} samples = {args.groups} groups x {k}; {valid} valid, {fallback} fallbacks")
    for name, ms in results.items():
        print(f"{name}: {ms:.3f} ms per batch (median of {args.repeats})")
    target = results["validity + diversity (canonical)"]
    print(f"target validity + diversity < 10 ms: {'met' if target < 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
