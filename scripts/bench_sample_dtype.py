"""Benchmark: does ``rollout.sample_dtype: bfloat16`` pay on this machine? One rollout in the
model's float32 against the same rollout on bf16 weights, alternated round by round.

SmolLM2-135M-Instruct (the embedded default) with a fresh LoRA adapter of the run's default
shape (``lora``: r16 on q/k/v/o), ``--problems`` arithmetic problems x ``--k`` completions of
``--tokens`` new tokens at temperature 1 (the adapter is fresh, so the rows are prose and run
their full length: the same work in both dtypes). Reports the median seconds of each, their
ratio, and whether torch sees bf16 matrix units on this CPU (``torch.cpu.get_capabilities``):
where it does not, bf16 is emulated and the ratio is above 1.

    python scripts/bench_sample_dtype.py --threads 1 --rounds 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from flowgrpo.operators.models import bf16_emulated, cpu_capabilities, load_model
from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.config import LoraSettings
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.loop.rollout import generate_rollout

ARMS = {"float32": None, "bfloat16": torch.bfloat16}


def bench(problems: int, k: int, tokens: int, rounds: int) -> dict[str, list[float]]:
    model, tokenizer = load_model("default", dtype="float32", device="cpu")
    model = wrap_lora(model, LoraSettings())  # the run's default adapter shape
    batch = load_task("arithmetic", n=problems)
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    for round_ in range(rounds + 1):  # the first round warms both arms up
        for name, dtype in ARMS.items():
            torch.manual_seed(round_)
            start = time.perf_counter()
            generate_rollout(model, tokenizer, batch, k, 1.0, 1.0, tokens, dtype=dtype)
            if round_:
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=1)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = f"{platform.machine()} {cpu_capabilities().get('cpu_name', '?')}"
    threads = torch.get_num_threads()
    print(f"machine: {cpu}, torch {torch.__version__}, {threads} thread(s); "
          f"bf16 emulated here: {bf16_emulated('cpu')}")  # fmt: skip
    times = bench(args.problems, args.k, args.tokens, args.rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:9s}: median {med[name]:6.2f} s  ({', '.join(f'{x:.2f}' for x in t)})")
    print(f"bfloat16 / float32 = {med['bfloat16'] / med['float32']:.2f}")


if __name__ == "__main__":
    main()
