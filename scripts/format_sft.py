"""Format SFT: a partly format-trained LoRA adapter to start known-optimum runs from (issue 13).

The CPU default policy (SmolLM2-135M-Instruct) writes a valid workflow a few percent of the time at
the rollout temperature, so RL on it spends its first steps learning the format. This script
fine-tunes the LoRA adapter with plain cross-entropy on the completion tokens (torch only) on
(policy prompt of a training problem -> a workflow), measuring validity by sampling at the
rollout temperature on held-out (validation-split) problems, and stops as soon as validity
reaches ``--min-validity`` (0.45): a partly trained start with room to learn, not 100%.

Which workflows it imitates. Targets are drawn from the simulation's workflow grammar
(``operators.simulation.space``: a head of one generator or an ensemble of 2-3, then 0-2 tail
steps of Review/Revise checks, loops, re-generation, Revise or Format), STRATIFIED so that no
workflow dominates: head kind (single / ensemble), tail length (0, 1, 2) and each part uniform,
every draw validated for the math domain. The result is spread over hundreds of workflows whose
expected accuracies (under the SIMULATED executor) span the range; the script prints that the
targets' mean is well below the best workflow's and how rarely the best one appears, so the
SFT start does not already prefer it: RL must move the policy toward it.

Usage (the config gives model, lora, task, temperature and max_new_tokens, so the adapter has
the shape the run expects; its ``model.init_adapter`` is ignored here):

    python scripts/format_sft.py --config configs/known-optimum.yaml --out runs/format-sft/adapter
    python scripts/format_sft.py --smoke --out /tmp/sft      # tiny random model, seconds (CI)

Prints one line per evaluation and a final summary (validity, fallback rate, distinct workflows,
minutes); ``--json FILE`` writes it too. Saves the adapter with ``save_pretrained`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from flowgrpo.dsl import validate
from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.simulation import analyze, best_workflow
from flowgrpo.operators.simulation.space import ENSEMBLERS, GENERATORS, TAILS
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards import prepare_samples
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.prompt import render_prompt
from flowgrpo.trainer.loop.rollout import generate_rollout

SMOKE_CONFIG = "configs/tiny-known-optimum.yaml"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="run config (model, lora, rollout); default: the defaults")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="key=value")
    p.add_argument("--out", default="runs/format-sft/adapter", help="adapter directory")
    p.add_argument("--examples", type=int, default=400, help="(prompt, workflow) pairs")
    p.add_argument("--batch", type=int, default=8, help="examples per optimizer step")
    p.add_argument("--lr", type=float, default=5e-4, help="AdamW learning rate")
    p.add_argument("--max-steps", type=int, default=40, help="optimizer steps at most")
    p.add_argument("--eval-every", type=int, default=2, help="steps between validity checks")
    p.add_argument(
        "--eval-from", type=int, default=10, help="first step checked (SmolLM2 stays below 0.3 "
        "validity for about 12 steps at the default lr; checks cost CPU)",
    )  # fmt: skip
    p.add_argument(
        "--eval-problems", type=int, default=16, help="held-out problems per check (the last check "
        "is the reported validity)",
    )  # fmt: skip
    p.add_argument("--eval-k", type=int, default=4, help="samples per held-out problem")
    p.add_argument("--min-validity", type=float, default=0.45, help="stop at this validity")
    p.add_argument("--max-validity", type=float, default=0.7, help="warn above this validity")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", dest="json_out", help="also write the summary here")
    p.add_argument("--smoke", action="store_true", help="tiny random model, 3 steps (CI)")
    args = p.parse_args(argv)
    if args.smoke:  # char-level tokenizer: workflows need more tokens than characters / 3
        args.config = args.config or SMOKE_CONFIG
        args.overrides = [*args.overrides, "rollout.max_new_tokens=120"]
        args.examples, args.batch, args.max_steps = 12, 4, 3
        args.eval_every, args.eval_from, args.eval_problems, args.eval_k = 3, 0, 2, 2
    return args


# --------------------------------------------------------------------------- targets


def draw_workflow(rng: random.Random) -> str:
    """One workflow of the stratified distribution (module docstring), in canonical form."""
    while True:
        if rng.random() < 0.5:
            head = rng.choice(GENERATORS)
        else:
            branches = [rng.choice(GENERATORS) for _ in range(rng.choice((2, 3)))]
            head = f"[{', '.join(branches)}] -> {rng.choice(ENSEMBLERS)}"
        tail = [rng.choice(TAILS) for _ in range(rng.choice((0, 1, 2)))]
        if "Format" in tail[:-1]:
            continue
        report = validate(" -> ".join((head, *tail)), domain="math")
        if report.ok:
            return report.canonical


def describe_targets(workflows: list[str], limits: Limits) -> dict:
    """How good the targets are under the SIMULATED executor (mixed difficulty, default
    params): their mean expected accuracy against the best workflow's, and the best's share."""
    mix = {"easy": 1, "medium": 1, "hard": 1}
    best = best_workflow(None, mix, limits=limits)
    accuracy = [analyze(w, None, mix, limits).accuracy for w in workflows]
    return {
        "targets_distinct": len(set(workflows)),
        "targets_top_share": Counter(workflows).most_common(1)[0][1] / len(workflows),
        "targets_sim_expected_accuracy": sum(accuracy) / len(accuracy),
        "sim_best_workflow": best.workflow,
        "sim_best_expected_accuracy": best.stats.accuracy,
        "targets_best_share": sum(w == best.workflow for w in workflows) / len(workflows),
    }


def build_examples(tokenizer, problems, workflows, max_new_tokens: int) -> list[tuple]:
    """(prompt ids, completion ids + EOS) pairs; completions longer than the rollout's token
    budget are dropped (the policy could never finish them)."""
    eos = tokenizer.eos_token_id
    examples = []
    for problem, workflow in zip(problems, workflows):
        prompt = tokenizer(render_prompt(problem, tokenizer), add_special_tokens=False)
        completion = tokenizer(workflow, add_special_tokens=False)["input_ids"] + [eos]
        if len(completion) <= max_new_tokens:
            examples.append((prompt["input_ids"], completion))
    return examples


# --------------------------------------------------------------------------- training


def sft_loss(model, batch: list[tuple], pad_id: int) -> torch.Tensor:
    """Mean cross-entropy over the completion tokens of ``batch`` (prompt tokens masked)."""
    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (prompt, completion) in enumerate(batch):
        row = prompt + completion
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, len(prompt) : len(row)] = torch.tensor(completion)
        mask[i, : len(row)] = 1
    device = next(model.parameters()).device
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    return out.loss


def measure_validity(model, tokenizer, problems, k: int, temperature: float, budget: int):
    """Validity and fallback rates of ``k`` samples per problem at the rollout temperature,
    validated exactly as the reward does (extraction, grammar, domain rules)."""
    samples = []
    for i in range(0, len(problems), 4):
        chunk = problems[i : i + 4]
        rollout = generate_rollout(model, tokenizer, chunk, k, temperature, 1.0, budget)
        samples += prepare_samples(chunk, rollout.texts, k, execute=False)
    valid = [s.canonical for s in samples if s.valid]
    return {
        "validity": len(valid) / len(samples),
        "fallback": sum(s.fallback for s in samples) / len(samples),
        "distinct_valid": len(set(valid)),
        "samples": len(samples),
        "top_valid": Counter(valid).most_common(3),
    }


def report(head: str, measured: dict) -> None:
    print(
        f"{head} validity {measured['validity']:.2f} fallback {measured['fallback']:.2f} "
        f"distinct valid {measured['distinct_valid']} ({time.process_time() / 60:.1f} CPU-min)",
        flush=True,
    )


def train(args, cfg, model, tokenizer, examples, held_out) -> dict:
    """Optimizer steps until validity >= --min-validity (checked every --eval-every steps)."""
    r = cfg.rollout
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr)
    rng = random.Random(args.seed)
    order: list[int] = []
    pad = tokenizer.pad_token_id
    measured = measure_validity(model, tokenizer, held_out, args.eval_k, r.temperature,
                                r.max_new_tokens)  # fmt: skip
    report("step 0 (base)", measured)
    history, step = [{"step": 0, **measured}], 0
    while step < args.max_steps and measured["validity"] < args.min_validity:
        step += 1
        if len(order) < args.batch:
            order += rng.sample(range(len(examples)), len(examples))
        batch = [examples[order.pop()] for _ in range(args.batch)]
        model.train()
        loss = sft_loss(model, batch, pad)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        checked = step >= args.eval_from and step % args.eval_every == 0
        if checked or step == args.max_steps:
            measured = measure_validity(model, tokenizer, held_out, args.eval_k, r.temperature,
                                        r.max_new_tokens)  # fmt: skip
            history.append({"step": step, "loss": loss.item(), **measured})
            report(f"step {step}: loss {loss.item():.3f}", measured)
    return {"steps": step, "final": measured, "history": history}


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, (*args.overrides, "model.init_adapter=null"))
    torch.manual_seed(args.seed)
    model, tokenizer = setup.policy(cfg)  # a fresh LoRA adapter of the config's shape
    r = cfg.rollout
    rng = random.Random(args.seed)
    problems = load_task(r.task, n=args.examples, seed=r.seed, split="train")
    workflows = [draw_workflow(rng) for _ in problems]
    limits = executor_limits(cfg.executor)  # the run's call budget (executor.max_calls)
    targets = describe_targets(workflows, limits)
    print(json.dumps(targets))
    examples = build_examples(tokenizer, problems, workflows, r.max_new_tokens)
    if not examples:
        raise SystemExit(f"no target workflow fits rollout.max_new_tokens={r.max_new_tokens}")
    held_out = load_task(r.task, n=args.eval_problems, seed=r.seed, split="validation")
    result = train(args, cfg, model, tokenizer, examples, held_out)
    final = result["final"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    # beside the adapter, so `flowgrpo eval --adapter OUT` samples, executes and scores it as
    # the runs that start from it (the same config.yaml a training run writes)
    save_config(cfg, out / "config.yaml")
    summary = {
        "model": cfg.model.name_or_path, "adapter": str(out), "examples": len(examples),
        "steps": result["steps"], "validity": final["validity"], "fallback": final["fallback"],
        "distinct_valid": final["distinct_valid"], "eval_samples": final["samples"],
        "minutes": (time.perf_counter() - start) / 60, "cpu_minutes": time.process_time() / 60,
        "top_valid": final["top_valid"],
        "temperature": r.temperature, **targets, "history": result["history"],
    }  # fmt: skip
    print(
        f"format SFT of {summary['model']}: validity {final['validity']:.2f}, fallback "
        f"{final['fallback']:.2f} on {final['samples']} held-out samples at T={r.temperature} "
        f"after {result['steps']} steps ({summary['minutes']:.1f} min, "
        f"{summary['cpu_minutes']:.1f} CPU-min); adapter saved to {out}"
    )
    if final["validity"] > args.max_validity:
        print(f"warning: validity above {args.max_validity}: lower --lr or --eval-every")
    elif final["validity"] < args.min_validity and not args.smoke:
        print(f"warning: validity below {args.min_validity}: raise --max-steps or --lr")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
