"""Benchmark: the rollout's decoding loop, which stops computing a row once it has ended,
against ``generate``, which runs every row until the last one ends; alternated call by call.

SmolLM2-135M-Instruct (the embedded default), with ``--adapter`` (e.g. the known-optimum format
start) or a fresh LoRA adapter of the run's default shape, grammar-constrained sampling as in the
known-optimum config: ``--problems`` arithmetic problems x ``--k`` completions of at most
``--tokens`` new tokens at ``--temperature`` (0: greedy, as the held-out eval), each of
``--calls`` batches of problems once per round. The rows end where their workflows do, so what
the loop saves depends on how unequal the lengths are: reported with the seconds. Both arms must
write the same tokens (checked at every call: a difference stops the benchmark).

    python scripts/bench_decode.py --threads 1 --adapter runs/format-sft-lr1e3/adapter
    python scripts/bench_decode.py --threads 1 --problems 16 --temperature 0 --calls 2
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from flowgrpo.operators.models import cpu_capabilities, load_model
from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.config import LoraSettings
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.sampling_cache import SamplingCache

ARMS = {"generate": False, "decode": True}


def policy(adapter: str | None):
    model, tokenizer = load_model("default", dtype="float32", device="cpu")
    if adapter:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, adapter), tokenizer
    return wrap_lora(model, LoraSettings()), tokenizer


def bench(args) -> tuple[dict[str, list[float]], list[float]]:
    """(seconds of each arm's rounds, the share of row-steps after a row's end per call)."""
    model, tokenizer = policy(args.adapter)
    problems = load_task("arithmetic", n=args.problems * args.calls, split="train")
    reuse = SamplingCache()
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    idle: list[float] = []
    for round_ in range(args.rounds + 1):  # the first round warms both arms up
        spent = dict.fromkeys(ARMS, 0.0)
        for call in range(args.calls):
            batch = problems[call * args.problems : (call + 1) * args.problems]
            out = {}
            arms = list(ARMS.items())
            for name, drop in arms if call % 2 == 0 else arms[::-1]:  # each arm first in turn
                torch.manual_seed(1000 * round_ + call)
                start = time.perf_counter()
                out[name] = generate_rollout(
                    model, tokenizer, batch, args.k, args.temperature, 1.0, args.tokens,
                    constrained="grammar", reuse=reuse, drop_ended=drop,
                )  # fmt: skip
                spent[name] += time.perf_counter() - start
            if not torch.equal(out["generate"].completion_ids_NT, out["decode"].completion_ids_NT):
                raise SystemExit(f"round {round_} call {call}: the two loops wrote other tokens")
            mask_NT = out["decode"].mask_NT
            idle.append(1.0 - float(mask_NT.mean()))
        if round_:
            for name in ARMS:
                times[name].append(spent[name])
    return times, idle


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter", default=None, help="a LoRA adapter folder (default: fresh)")
    p.add_argument("--problems", type=int, default=4)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = f"{platform.machine()} {cpu_capabilities().get('cpu_name', '?')}"
    print(f"machine: {cpu}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    times, idle = bench(args)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:8s}: median {med[name]:6.2f} s a round of {args.calls} calls  "
              f"({', '.join(f'{x:.2f}' for x in t)})")  # fmt: skip
    print(
        f"row-steps after a row's end under generate: {statistics.mean(idle):.0%} (mean of "
        f"{len(idle)} calls); the same tokens in every call"
    )
    print(f"decode / generate = {med['decode'] / med['generate']:.2f}")


if __name__ == "__main__":
    main()
