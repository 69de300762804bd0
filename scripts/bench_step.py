"""Benchmark: seconds per GRPO optimizer step and peak memory, flowgrpo vs TRL's GRPOTrainer.

Same setting for both (the DESIGN.md one): SmolLM2-135M-Instruct (embedded GGUF), LoRA r16 on
q/k/v/o, K=8 completions of one arithmetic prompt per step (the few-shot workflow prompt),
32 new tokens, temperature 1.0, beta 0, reward = flowgrpo's validity score, no executor.
Each implementation runs in its own subprocess (clean peak RSS), alternating, ``--repeats``
times; the first step of each run is warm-up and not counted.

    python scripts/bench_step.py --steps 6 --repeats 2        # needs: pip install trl
    python scripts/bench_step.py --impl pair --steps 6 --repeats 2   # without TRL's checkpointing
    python scripts/bench_step.py --impl ours --steps 6         # one side only
    python scripts/bench_step.py --impl grammar --steps 6 --repeats 3   # the mask's cost
    python scripts/bench_step.py --impl bf16 --steps 6 --repeats 2   # the bf16 arms, both sides
    python scripts/bench_step.py --impl packed --steps 6 --repeats 2   # packed weights or not
    python scripts/bench_step.py --model random:qwen2.5-1.5b --device cuda --dtype bfloat16

``--model``/``--device``/``--dtype`` run the same setting on another model (a ``random:<shape>``
of a real architecture where no weights can be downloaded) and device; on a GPU the peak
allocated memory of each side is reported too (``scripts/gpu_check.py`` runs it so).

``grammar`` is flowgrpo with ``rollout.constrained=grammar`` beside ``ours`` (the same run
unconstrained, alternating): besides the step time it times, inside the run, what the mask adds
(the matchers' set-up, every ``GrammarMask`` call during sampling, and the mask unpacking of the
update), as a share of the step. ``ours_bf16`` is flowgrpo sampling on bf16 copies of the merged
weights (``rollout.sample_dtype=bfloat16``; the update in float32); ``ours_mixed`` also runs the
update's forward passes on bf16 copies of the frozen weights (``optim.bf16=true``); ``trl_bf16``
is TRL with ``bf16=True`` (its mixed precision: float32 weights under bf16 autocast), the
like-for-like baseline of those two. ``ours_unpacked`` samples with torch's default CPU kernel
instead of oneDNN-packed weights (``rollout.packed_weights=false``), flowgrpo before packing.

TRL is an optional benchmark dependency only (not a flowgrpo requirement).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench_child import report, spawn  # scripts/ is on sys.path when a script runs
from peft import LoraConfig

from flowgrpo.operators.models import load_model
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards.components import get_component
from flowgrpo.rewards.sample import make_sample
from flowgrpo.rewards.spec import RewardOptions
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.prompt import build_messages
from flowgrpo.trainer.loop.trainer import Trainer

K, NEW_TOKENS, LR, TEMPERATURE = 8, 32, 1e-5, 1.0


def _timed(totals: dict, name: str, fn):
    """``fn``, adding the seconds spent in it to ``totals[name]`` (a plain function, so it
    binds as a method too)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - start

    return wrapper


def _time_the_mask(totals: dict) -> None:
    """Time every place the grammar mask costs something (set-up, sampling, update)."""
    from flowgrpo.trainer.loop import constrain, rollout, update

    rollout.make_matchers = _timed(totals, "matchers", rollout.make_matchers)
    rollout.grammar_tokenizer = _timed(totals, "matchers", rollout.grammar_tokenizer)
    constrain.GrammarMask.__call__ = _timed(totals, "sampling", constrain.GrammarMask.__call__)
    update.unpack_allowed = _timed(totals, "update", update.unpack_allowed)


#: Which model, device and dtype both sides run (``--model``, ``--device``, ``--dtype``).
CPU_DEFAULT = {"model": "default", "device": "cpu", "dtype": "float32"}


def run_ours(
    steps: int, out: Path, constrained: str = "off", where: dict = CPU_DEFAULT, extra=()
) -> dict:
    mask: dict[str, float] = {}
    if constrained != "off":
        _time_the_mask(mask)
    cfg = load_config(
        None,
        (
            f"rollout.constrained={constrained}",
            f"model.name_or_path={where['model']}",
            f"model.dtype={where['dtype']}",
            f"logging.output_dir={out}",
            f"optim.max_steps={steps}",
            f"optim.lr={LR}",
            "rollout.problems_per_step=1",
            f"rollout.num_generations={K}",
            f"rollout.max_new_tokens={NEW_TOKENS}",
            f"rollout.temperature={TEMPERATURE}",
            "rollout.execute=false",
            "rollout.dynamic_sampling=false",
            "rollout.cache_path=null",
            "rewards.weights:={validity: 1.0}",  # replace: validity only
            "logging.save_every=0",
            *extra,
        ),
    )
    Trainer(cfg, overwrite=True).train()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "step_times": [m["step_time"] for m in lines],
        "gen_times": [m["gen_time"] for m in lines],
        "mean_length": statistics.mean(m["completions/mean_length"] for m in lines),
        "total_seconds": sum(m["step_time"] for m in lines),
        "mask_seconds": mask,
    }


def _trl_args(steps: int, out: Path, where: dict = CPU_DEFAULT, extra: dict | None = None):
    """TRL's config of the shared setting, with an arm's own ``GRPOConfig`` fields (``TRL``)."""
    from trl import GRPOConfig  # optional: trl, only for the side-by-side run

    shared = dict(
        output_dir=str(out),
        per_device_train_batch_size=K,
        num_generations=K,
        max_completion_length=NEW_TOKENS,
        max_steps=steps,
        learning_rate=LR,
        beta=0.0,
        temperature=TEMPERATURE,
        logging_steps=1,
        report_to="none",
        use_cpu=where["device"] == "cpu",
        gradient_checkpointing=False,  # TRL's default is on; ``trl_gc`` turns it on
        save_strategy="no",
        bf16=where["dtype"] == "bfloat16",
        disable_dropout=True,
        dataloader_num_workers=0,
    )
    return GRPOConfig(**{**shared, **(extra or {})})


def _validity_reward(problems):
    """TRL reward function: flowgrpo's validity component on each completion."""
    validity, options = get_component("validity"), RewardOptions()

    def reward(prompts, completions, pid, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        group = [make_sample(problems[i], t) for i, t in zip(pid, texts)]
        return [float(x) for x in validity(group, options, None)]

    return reward


def run_trl(steps: int, out: Path, where: dict = CPU_DEFAULT, extra: dict | None = None) -> dict:
    # optional: trl and datasets, only for the side-by-side run
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    model, tok = load_model(where["model"], dtype=where["dtype"], device=where["device"])
    problems = load_task("arithmetic", n=64, seed=0, split="train")
    data = Dataset.from_list(
        [{"prompt": build_messages(p), "pid": i} for i, p in enumerate(problems)]
    )
    times, lengths = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    args = _trl_args(steps, out, where, extra)
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[_validity_reward(problems)],
        args=args,
        train_dataset=data,
        processing_class=tok,
        peft_config=lora,
        callbacks=[Timer()],
    )
    trainer.train()
    return {
        "step_times": times,
        "gen_times": [],
        "mean_length": statistics.mean(lengths) if lengths else float("nan"),
    }


#: flowgrpo's arms and the config overrides each adds to the shared setting.
OURS = {
    "ours": (),
    "grammar": (),
    "ours_bf16": ("rollout.sample_dtype=bfloat16",),
    "ours_mixed": ("rollout.sample_dtype=bfloat16", "optim.bf16=true"),
    "ours_unpacked": ("rollout.packed_weights=false",),
}
#: TRL's arms and the ``GRPOConfig`` fields each sets over the shared setting; ``trl_bf16``: HF
#: Trainer's mixed precision (float32 weights under bf16 autocast), the TRL side of ``ours_mixed``.
TRL = {
    "trl": {},
    "trl_gc": {"gradient_checkpointing": True},
    "trl_bf16": {"bf16": True},
}
CHILDREN = [*OURS, *TRL]


def _child(impl: str, steps: int, where: dict = CPU_DEFAULT) -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        if impl in OURS:
            constrained = "grammar" if impl == "grammar" else "off"
            result = run_ours(steps, Path(tmp), constrained, where, OURS[impl])
        else:
            result = run_trl(steps, Path(tmp), where, TRL[impl])
    if torch.cuda.is_available():
        result["peak_cuda_allocated_gib"] = torch.cuda.max_memory_allocated() / 1024**3
        result["peak_cuda_reserved_gib"] = torch.cuda.max_memory_reserved() / 1024**3
    report(result)


def _spawn(impl: str, steps: int, where: dict = CPU_DEFAULT) -> dict:
    place = [f"--{key}={value}" for key, value in where.items()]
    return spawn(__file__, impl, ["--steps", str(steps), *place])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--impl",
        choices=[*CHILDREN, "pair", "bf16", "packed", "all"],
        default="all",
    )
    parser.add_argument("--child", choices=CHILDREN)
    for key, value in CPU_DEFAULT.items():
        parser.add_argument(f"--{key}", default=value)
    args = parser.parse_args()
    where = {key: getattr(args, key) for key in CPU_DEFAULT}
    if args.child:
        _child(args.child, args.steps, where)
        return
    groups = {
        "all": ["ours", "trl", "trl_gc"],
        "pair": ["ours", "trl"],
        "grammar": ["ours", "grammar"],
        "bf16": ["ours", "ours_bf16", "ours_mixed", "trl", "trl_bf16"],
        "packed": ["ours", "ours_unpacked", "trl"],
    }
    impls = groups.get(args.impl, [args.impl])
    results: dict[str, list[dict]] = {i: [] for i in impls}
    for _ in range(args.repeats):
        for impl in impls:
            results[impl].append(_spawn(impl, args.steps, where))
    print(
        f"machine: {platform.machine()}, {platform.python_version()}; steps/run "
        f"{args.steps} (first is warm-up), runs {args.repeats}"
    )
    summary = {}
    for impl, runs in results.items():
        times = [t for r in runs for t in r["step_times"][1:]]
        summary[impl] = statistics.median(times)
        print(
            f"{impl:10s} median step {summary[impl]:6.2f} s  peak RSS "
            f"{max(r['peak_rss_gb'] for r in runs):.2f} GB  mean completion length "
            f"{statistics.mean(r['mean_length'] for r in runs):.1f}"
        )
    for ours in ("ours", "ours_bf16", "ours_mixed", "ours_unpacked"):
        for base in TRL:
            if ours in summary and base in summary:
                print(f"{ours} / {base} = {summary[ours] / summary[base]:.2f}")
    if "ours_unpacked" in summary:
        print(f"ours / ours_unpacked = {summary['ours'] / summary['ours_unpacked']:.2f}")
    if "grammar" in summary:
        _print_mask_share(results["grammar"], summary)


def _print_mask_share(runs: list[dict], summary: dict) -> None:
    """The mask's own seconds as a share of the constrained run's total step time."""
    total = sum(r["total_seconds"] for r in runs)
    parts = {}
    for r in runs:
        for name, seconds in r["mask_seconds"].items():
            parts[name] = parts.get(name, 0.0) + seconds
    shares = ", ".join(f"{name} {100 * sec / total:.1f}%" for name, sec in sorted(parts.items()))
    print(f"grammar / ours = {summary['grammar'] / summary['ours']:.2f} (median step)")
    print(
        f"mask time as a share of the constrained steps: {shares}; "
        f"all {100 * sum(parts.values()) / total:.1f}%"
    )


if __name__ == "__main__":
    main()
