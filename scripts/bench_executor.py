"""Benchmark: the workflow interpreter on the HF backend, batched vs one workflow at a time,
and the execution cache's hit rate on a realistic stream where few workflows repeat.

    python scripts/bench_executor.py [--model default] [--workflows 4] [--problems 4]

Part 1 runs N workflows x M problems twice: all pairs through one ``run_workflows`` call (LLM
calls of a stage batched into one ``generate``), then each pair through its own call. Part 2
replays a stream of 64 (workflow, problem) samples drawn the way real runs look (a few distinct
workflows, K=8 samples per problem) through the cache and reports the hit rate.
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.executor import ExecutorConfig, build_executor
from flowgrpo.operators.interpreter import run_workflows
from flowgrpo.operators.ops import OpSettings
from flowgrpo.operators.tasks import load_task

WORKFLOWS = [
    "Custom -> Format",
    "AnswerGenerate -> Format",
    "Custom -> Review ? Revise : done",
    "[Custom, AnswerGenerate] -> ScEnsemble",
    "Programmer",
    "Custom -> Programmer -> Review ? Revise : done",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--workflows", type=int, default=4)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    section = ExecutorConfig(
        kind="hf", model=args.model, max_new_tokens=args.max_new_tokens, max_calls=24
    )
    ops = OpSettings(max_new_tokens=(("default", args.max_new_tokens),))
    llm, limits = build_executor(section, ops=ops)
    problems = load_task("arithmetic", n=args.problems, seed=0, split="test")
    pairs = [(w, p) for w in WORKFLOWS[: args.workflows] for p in problems]

    start = time.perf_counter()
    batched = run_workflows(pairs, llm, limits)
    t_batched = time.perf_counter() - start
    start = time.perf_counter()
    single = [run_workflows([pair], llm, limits)[0] for pair in pairs]
    t_single = time.perf_counter() - start
    calls = sum(r.calls for r in batched)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; model {args.model}")
    print(
        f"{len(pairs)} pairs ({args.workflows} workflows x {args.problems} problems), "
        f"{calls} LLM calls, max_new_tokens {args.max_new_tokens}"
    )
    print(
        f"batched: {t_batched:.1f} s; one at a time: {t_single:.1f} s; "
        f"ratio {t_single / t_batched:.2f}x"
    )
    print(
        f"same answers batched and single: "
        f"{sum(a.answer == b.answer for a, b in zip(batched, single))}/{len(pairs)}"
    )

    rng = random.Random(0)
    weights = [8, 4, 2, 1, 1, 1][: len(WORKFLOWS)]
    stream = [
        (rng.choices(WORKFLOWS, weights)[0], problems[g % len(problems)])
        for g in range(8)
        for _ in range(8)
    ]
    cache = ExecutionCache()
    start = time.perf_counter()
    for g in range(8):
        run_workflows(stream[g * 8 : (g + 1) * 8], llm, limits, cache=cache)
    distinct = len(set(stream))
    print(
        f"stream: {len(stream)} samples, {distinct} distinct (workflow, problem) pairs, "
        f"{time.perf_counter() - start:.1f} s; cache hits {cache.hits}, misses {cache.misses} "
        f"(hit rate {cache.hit_rate:.2f}; identical pairs inside one call run once and are "
        f"not counted as hits)"
    )


if __name__ == "__main__":
    main()
