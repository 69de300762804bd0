"""Benchmark: format SFT, seconds per optimizer step and peak memory, flowgrpo vs TRL's
SFTTrainer on the same pairs.

Same setting for both: ``configs/known-optimum.yaml``'s model (SmolLM2-135M-Instruct, embedded
GGUF, float32 on the CPU), LoRA (r16, alpha 32, q/k/v/o), batch of 8 pairs, AdamW at the
config's ``sft.lr``; the pairs are the config's own (``sft.data: grammar``: a training problem
rendered with the policy prompt -> one stratified workflow, the end token appended), loss on the
completion tokens only (TRL: ``completion_only_loss``). Each side runs in its own subprocess
(clean peak RSS), alternating, ``--repeats`` times; the first step of each run is warm-up and
not counted. flowgrpo's side is ``run_sft`` itself with its held-out checks shrunk to one sample
(``sft.eval_problems=1``, ``sft.eval_k=1``), so the step times are the product's own.

    python scripts/bench_sft.py --steps 12 --repeats 2      # needs: pip install trl
    python scripts/bench_sft.py --impl ours --steps 12       # one side only
    python scripts/bench_sft.py --impl ours --set sft.micro_batch_size=4   # any config override

TRL is an optional benchmark dependency only (not a flowgrpo requirement).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench_child import report, spawn  # scripts/ is on sys.path when a script runs

from flowgrpo.trainer.config import load_config

#: The config of the start this benchmarks, found from the script (any working directory).
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "known-optimum.yaml"


def _config(steps: int, overrides: tuple[str, ...] = ()):
    return load_config(
        CONFIG,
        (
            *overrides,
            f"sft.max_steps={steps}",
            "sft.target_validity=null",
            f"sft.eval_every={steps}",
            f"sft.eval_from={steps}",
            "sft.eval_problems=1",
            "sft.eval_k=1",
            "model.init_adapter=null",
        ),
    )


def run_ours(steps: int, out: Path, overrides: tuple[str, ...] = ()) -> dict:
    from flowgrpo.trainer.loop.sft import run_sft

    times: list[float] = []
    started = time.perf_counter()

    def on_step(line: dict) -> None:
        if line["step"]:
            times.append(line["seconds"])

    run_sft(_config(steps, overrides), out, on_step)
    return {"step_times": times, "total_seconds": time.perf_counter() - started}


def _pairs(cfg, tokenizer) -> list[dict]:
    """The config's (prompt text, workflow) pairs, as TRL's prompt-completion rows."""
    from flowgrpo.trainer.loop.environment import build_environment
    from flowgrpo.trainer.loop.sft import grammar_pairs

    prompt = build_environment(cfg, with_executor=False, with_problems=False).prompt
    problems, workflows = grammar_pairs(cfg, prompt)
    return [
        {"prompt": prompt.render(p, tokenizer), "completion": w}
        for p, w in zip(problems, workflows, strict=True)
    ]


def run_trl(steps: int, out: Path, overrides: tuple[str, ...] = ()) -> dict:
    # optional: trl and datasets, only for the side-by-side run
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from flowgrpo.operators.models import load_model

    cfg = _config(steps, overrides)
    started = time.perf_counter()
    model, tok = load_model(cfg.model.name_or_path, dtype="float32", device="cpu")
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

    args = SFTConfig(
        output_dir=str(out), per_device_train_batch_size=cfg.sft.batch_size, max_steps=steps,
        learning_rate=cfg.sft.lr, lr_scheduler_type="constant", warmup_steps=0,
        completion_only_loss=True, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", dataloader_num_workers=0, seed=cfg.sft.seed,
    )  # fmt: skip
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(_pairs(cfg, tok)),
        processing_class=tok, peft_config=lora, callbacks=[Timer()],
    )  # fmt: skip
    trainer.train()
    return {"step_times": times, "total_seconds": time.perf_counter() - started}


def _child(impl: str, steps: int, overrides: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = run_ours if impl == "ours" else run_trl
        result = run(steps, Path(tmp) / "out", overrides)
    report(result)


def _spawn(impl: str, steps: int, overrides: list[str]) -> dict:
    sets = [arg for o in overrides for arg in ("--set", o)]
    return spawn(__file__, impl, ["--steps", str(steps), *sets])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--impl", choices=["ours", "trl", "all"], default="all")
    parser.add_argument("--child", choices=["ours", "trl"])
    parser.add_argument("--set", action="append", default=[], help="a config override")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.steps, tuple(args.set))
        return
    impls = ["ours", "trl"] if args.impl == "all" else [args.impl]
    results: dict[str, list[dict]] = {i: [] for i in impls}
    for _ in range(args.repeats):
        for impl in impls:
            results[impl].append(_spawn(impl, args.steps, args.set))
    print(
        f"machine: {platform.machine()}, {platform.python_version()}; "
        f"configs/{CONFIG.name}'s SFT setting {args.set or ''}; "
        f"steps/run {args.steps} (first is warm-up), runs {args.repeats}"
    )
    summary = {}
    for impl, runs in results.items():
        summary[impl] = statistics.median(t for r in runs for t in r["step_times"][1:])
        print(
            f"{impl:5s} median step {summary[impl]:6.2f} s  peak RSS "
            f"{max(r['peak_rss_gb'] for r in runs):.2f} GB  whole run "
            f"{statistics.mean(r['total_seconds'] for r in runs):.0f} s"
        )
    if len(summary) == 2:
        print(f"ours / trl = {summary['ours'] / summary['trl']:.2f}")


if __name__ == "__main__":
    main()
