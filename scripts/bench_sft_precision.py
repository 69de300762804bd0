"""Benchmark: one format-SFT step in float32 against the same step under bfloat16 autocast
(``sft.bf16``), side by side in one process.

The known-optimum config's model, LoRA and pairs (as ``scripts/bench_sft.py``); each round
draws one batch of ``sft.batch_size`` pairs and runs the loss's forward and backward on it in
both modes, one after the other (the order alternates every round), so machine load hits both
alike; the first round is warm-up. Prints the median seconds per step of each mode, their
ratio, and the two losses of the first batches (the rounding bf16 adds).

    python scripts/bench_sft_precision.py --rounds 8 --threads 2
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

CONFIG = "configs/known-optimum.yaml"


def _setup(overrides: tuple[str, ...]):
    # heavy: torch and the model, after argument parsing
    from flowgrpo.trainer.config import load_config
    from flowgrpo.trainer.loop.sft import prepare_sft

    cfg = load_config(CONFIG, ("model.init_adapter=null", *overrides))
    return cfg, prepare_sft(cfg)


def measure(rounds: int, overrides: tuple[str, ...] = ()) -> dict:
    """{mode: [seconds per step]} and {mode: [loss]} over ``rounds`` alternated rounds."""
    # heavy: torch
    from flowgrpo.trainer.algorithms.completion_loss import completion_backward

    cfg, run = _setup(overrides)
    model, tokenizer, pairs = run.model, run.tokenizer, run.pairs
    rng, s = random.Random(cfg.sft.seed), cfg.sft
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    losses: dict[str, list[float]] = {"fp32": [], "bf16": []}
    model.train()
    for i in range(rounds):
        batch = rng.sample(pairs, s.batch_size)
        for mode in ("fp32", "bf16") if i % 2 == 0 else ("bf16", "fp32"):
            model.zero_grad()
            started = time.perf_counter()
            loss = completion_backward(model, batch, tokenizer.pad_token_id, s.micro_batch_size,
                                       bf16=mode == "bf16")  # fmt: skip
            times[mode].append(time.perf_counter() - started)
            losses[mode].append(loss)
    return {"times": times, "losses": losses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="a config override")
    args = parser.parse_args()
    # heavy: torch, only once the arguments are read
    import torch

    torch.set_num_threads(args.threads)
    found = measure(args.rounds, tuple(args.set))
    median = {m: statistics.median(t[1:]) for m, t in found["times"].items()}
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{args.threads} thread(s), {args.rounds} rounds (first one warm-up)")  # fmt: skip
    for mode in ("fp32", "bf16"):
        first = ", ".join(f"{x:.4f}" for x in found["losses"][mode][:3])
        print(f"{mode}: median {median[mode]:.2f} s per step; losses {first}")
    print(f"bf16 / fp32 = {median['bf16'] / median['fp32']:.2f}")


if __name__ == "__main__":
    main()
