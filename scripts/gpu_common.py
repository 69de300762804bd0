"""What the parts of ``scripts/gpu_check.py`` share: the two profiles (the GPU one and the tiny
CPU one), synchronised clocks, memory readings, and the training config of the shipped 7B
setting with a random model of its architecture and the SIMULATED executor."""

from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from flowgrpo.trainer.config import load_config

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "configs" / "qwen2.5-7b.yaml"
GIB = 1024**3


@dataclass(frozen=True)
class Profile:
    """One shape of the check: the models, the step and the grids it measures."""

    name: str
    device: str
    big: str  # the production shape (every part but trl)
    trl_models: tuple[str, ...]  # the side-by-side with TRL's GRPOTrainer
    problems_per_step: int  # the shipped 8
    num_generations: int  # K, the shipped 16
    max_new_tokens: int  # the shipped 64
    steps: int  # timed steps after one warm-up step
    capacity_rows: tuple[int, ...]  # generation batches (K x problems) tried
    capacity_k: tuple[int, ...]  # training micro-batches (one group of K) tried
    gen_batches: tuple[int, ...]  # decode throughput at these batch sizes
    eval_n: int
    trl_steps: int


GPU = Profile(
    name="gpu",
    device="cuda",
    big="random:qwen2.5-7b",
    trl_models=("random:smollm2-135m", "random:qwen2.5-1.5b"),
    problems_per_step=8,
    num_generations=16,
    max_new_tokens=64,
    steps=3,
    capacity_rows=(256, 512, 1024),
    capacity_k=(32, 64),
    gen_batches=(1, 128),
    eval_n=32,
    trl_steps=4,
)
TINY = Profile(
    name="tiny",
    device="cpu",
    big="random:tiny-qwen2",
    trl_models=("random:tiny-qwen2",),
    problems_per_step=2,
    num_generations=8,
    max_new_tokens=12,
    steps=1,
    capacity_rows=(16,),
    capacity_k=(16,),
    gen_batches=(1, 4),
    eval_n=2,
    trl_steps=2,
)
PROFILES = {p.name: p for p in (GPU, TINY)}


def train_config(profile: Profile, out_dir: Path, steps: int, extra: tuple[str, ...] = ()):
    """The shipped 7B config (LoRA r32 on every projection, bf16, gradient checkpointing, gdpo,
    dynamic sampling) with the profile's model and sizes, the arithmetic task (no data set
    travels to the device), the SIMULATED executor, no tensorboard, no periodic save, no
    rollback guard and no stop alert (a random model's run must not end or undo a step early:
    every step is timed)."""
    overrides = (
        f"model.name_or_path={profile.big}",
        "rollout.task=arithmetic",
        "rollout.train_size=2000",
        f"rollout.problems_per_step={profile.problems_per_step}",
        f"rollout.num_generations={profile.num_generations}",
        f"rollout.max_new_tokens={profile.max_new_tokens}",
        "rollout.cache_path=null",
        "executor.kind=simulated",
        f"logging.output_dir={out_dir}",
        "logging.tensorboard=false",
        "logging.save_every=0",
        f"optim.max_steps={steps}",
        "optim.warmup_steps=0",
        "health.guard=off",
        "health.stop_on:=[]",
        *extra,
    )
    return load_config(SHIPPED, overrides)


def cuda() -> bool:
    return torch.cuda.is_available()


def sync() -> None:
    if cuda():
        torch.cuda.synchronize()


def reset_peak() -> None:
    if cuda():
        sync()
        torch.cuda.reset_peak_memory_stats()


def peak() -> dict:
    """Peak GPU memory since the last :func:`reset_peak` (GiB), or the process's peak RSS."""
    if cuda():
        return {
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2),
        }
    return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2)}


def release() -> None:
    """Give back what the part before held (its models are out of scope)."""
    gc.collect()
    if cuda():
        torch.cuda.empty_cache()


class Clock:
    """Seconds of a block, the device synchronised at both ends (kernels are asynchronous)."""

    def __enter__(self):
        sync()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync()
        self.seconds = time.perf_counter() - self.start
        return False


def device_info() -> dict:
    """The machine the numbers were taken on."""
    import platform

    import peft
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
    if cuda():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / GIB, 1))
    return info
