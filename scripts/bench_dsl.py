"""Benchmark: validate() throughput on distinct workflows (cache misses) and on a repeating stream.

Targets (issue 2): >= 15,000 validations/s uncached and >= 200,000/s on a stream where 20 distinct
workflows repeat, on a 2-core CPU. Usage::

    python scripts/bench_dsl.py [--distinct 20000] [--stream 400000] [--repeats 3]

Beside them, validation against a bare Lark parse of the same texts (the grammar file, LALR,
contextual lexer, no transformer, no checks: the floor any Lark-based validator stands on),
interleaved round by round in one process; the median ratio is reported (target >= 0.8x).
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from flowgrpo.dsl import canonical, validate
from flowgrpo.dsl.generate import random_workflow
from flowgrpo.dsl.validate import clear_caches


def bare_lark():
    """The workflow grammar as a plain Lark LALR parser: no transformer, no AST, no checks."""
    from importlib.resources import files

    from lark import Lark

    grammar = files("flowgrpo.dsl").joinpath("workflow.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual")


def versus_lark(texts: list[str], rounds: int) -> list[float]:
    """Per round: (validations/s uncached) / (bare Lark parses/s), the two interleaved."""
    parser, ratios = bare_lark(), []
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            parser.parse(text)
        lark_rate = len(texts) / (time.perf_counter() - start)
        ratios.append(bench_uncached(texts) / lark_rate)
    return ratios


def _distinct_texts(n: int, seed: int) -> list[str]:
    rng, seen = random.Random(seed), {}
    while len(seen) < n:
        text = canonical(random_workflow(rng, max_steps=6, max_depth=2))
        seen.setdefault(text, None)
    return list(seen)


def bench_uncached(texts: list[str]) -> float:
    clear_caches()
    start = time.perf_counter()
    for text in texts:
        validate(text)
    return len(texts) / (time.perf_counter() - start)


def bench_stream(texts: list[str], n: int, seed: int) -> float:
    rng = random.Random(seed)
    stream = [rng.choice(texts) for _ in range(n)]
    clear_caches()
    start = time.perf_counter()
    for text in stream:
        validate(text)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distinct", type=int, default=20_000)
    parser.add_argument("--stream", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lark-rounds", type=int, default=7)
    args = parser.parse_args()
    for name in ("distinct", "stream", "repeats", "lark_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    texts = _distinct_texts(args.distinct, seed=0)
    mean_len = sum(map(len, texts)) / len(texts)
    uncached = [bench_uncached(texts) for _ in range(args.repeats)]
    stream = [bench_stream(texts[:20], args.stream, seed=r) for r in range(args.repeats)]
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    print(f"distinct workflows: {len(texts)} (mean {mean_len:.0f} chars)")
    print(f"uncached validate/s: best {max(uncached):,.0f}  runs {[f'{x:,.0f}' for x in uncached]}")
    print(
        f"20-workflow stream validate/s: best {max(stream):,.0f}  runs "
        f"{[f'{x:,.0f}' for x in stream]}"
    )
    ratios = sorted(versus_lark(texts, args.lark_rounds))
    median = ratios[len(ratios) // 2]
    print(
        f"validate / bare Lark parse, interleaved: median {median:.2f}x  rounds "
        f"{[f'{x:.2f}' for x in ratios]} ({'met' if median >= 0.8 else 'NOT met'}: >= 0.8x)"
    )
    print(
        f"targets: uncached >= 15,000/s: {'met' if max(uncached) >= 15_000 else 'NOT met'}; "
        f"stream >= 200,000/s: {'met' if max(stream) >= 200_000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
