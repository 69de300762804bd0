"""Benchmark: drawing the next token, generate's ``torch.multinomial`` against flowgrpo's
inverse-CDF draw (trainer/loop/sampler.py), on softmax probabilities of SmolLM2's vocabulary.

Both draw from the same scores (random logits, ``--rows`` x ``--vocab``), alternated round by
round in one process; the time of each includes the softmax each one needs (multinomial: the
probabilities generate computes; inverse CDF: its own softmax and cumulative sum). Reports the
median milliseconds per draw of all rows and the ratio.

    python scripts/bench_sampler.py --rows 8 16 250 --threads 1
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from flowgrpo.trainer.loop.sampler import InverseCdfSampler


def _multinomial(scores: torch.Tensor) -> torch.Tensor:
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1)


def _inverse_cdf(scores: torch.Tensor) -> torch.Tensor:
    return InverseCdfSampler()(None, scores).argmax(-1)


def bench(rows: int, vocab: int, rounds: int, draws: int) -> dict[str, float]:
    scores = torch.randn(rows, vocab) * 3
    times: dict[str, list[float]] = {"multinomial": [], "inverse_cdf": []}
    for _ in range(rounds):
        for name, draw in (("multinomial", _multinomial), ("inverse_cdf", _inverse_cdf)):
            draw(scores)  # warm
            start = time.perf_counter()
            for _ in range(draws):
                draw(scores)
            times[name].append((time.perf_counter() - start) / draws * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[8, 16, 250])
    p.add_argument("--vocab", type=int, default=49_152, help="SmolLM2's vocabulary size")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--draws", type=int, default=20)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    for name in ("vocab", "rounds", "draws"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if min(args.rows) < 1:
        p.error(f"--rows must be >= 1, got {args.rows}")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), vocabulary {args.vocab}")  # fmt: skip
    for rows in args.rows:
        ms = bench(rows, args.vocab, args.rounds, args.draws)
        old, new = ms["multinomial"], ms["inverse_cdf"]
        print(f"rows {rows:4d}: multinomial {old:7.2f} ms, inverse CDF {new:6.2f} ms, "
              f"ratio {new / old:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
