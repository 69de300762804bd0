"""The LR schedule (transformers.get_scheduler): the LR of every optimizer step, by hand."""

import math

import pytest
import torch

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import setup

C1, C3 = 0.5 * (1 + math.cos(math.pi / 4)), 0.5 * (1 + math.cos(3 * math.pi / 4))


def lrs(scheduler: str, warmup: int, max_steps: int, num_iterations: int, floor=0.0) -> list:
    """The LR each optimizer step runs with (one scheduler step after each)."""
    cfg = load_config(
        "configs/tiny.yaml",
        (
            "optim.lr=0.1",
            f"optim.scheduler={scheduler}",
            f"optim.warmup_steps={warmup}",
            f"optim.max_steps={max_steps}",
            f"algorithm.num_iterations={num_iterations}",
            f"optim.min_lr_rate={floor}",
        ),
    )
    model = torch.nn.Linear(2, 1)
    opt, sched = setup.optimizer(cfg, model)
    out = []
    for _ in range(max_steps * num_iterations):
        out.append(opt.param_groups[0]["lr"])
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize(
    ("scheduler", "warmup", "max_steps", "iterations", "factors"),
    [
        ("constant", 0, 3, 1, [1, 1, 1]),
        ("constant", 2, 3, 2, [0, 1 / 2, 1, 1, 1, 1]),
        # 6 optimizer steps: warmup 0, 1/2; then cos over 4 steps: 1, C1, 1/2, C3
        ("cosine", 2, 3, 2, [0, 1 / 2, 1, C1, 1 / 2, C3]),
        ("cosine", 0, 4, 1, [1, C1, 1 / 2, C3]),
        ("cosine", 3, 5, 1, [0, 1 / 3, 2 / 3, 1, 1 / 2]),
    ],
)
def test_lr_of_each_step(scheduler, warmup, max_steps, iterations, factors):
    assert lrs(scheduler, warmup, max_steps, iterations) == pytest.approx(
        [0.1 * f for f in factors], abs=1e-12
    )


@pytest.mark.parametrize(
    ("warmup", "max_steps", "floor"),
    [(0, 4, 0.25), (2, 6, 0.1), (0, 30, 0.5)],
)
def test_cosine_floor(warmup, max_steps, floor):
    """``optim.min_lr_rate`` m: after warmup the factor is m + (1 - m) * the plain cosine's,
    computed here from the formula, not from transformers."""
    span = max_steps - warmup
    cos = [0.5 * (1 + math.cos(math.pi * s / span)) for s in range(span)]
    factors = [s / warmup for s in range(warmup)] + [floor + (1 - floor) * c for c in cos]
    got = lrs("cosine", warmup, max_steps, 1, floor)
    assert got == pytest.approx([0.1 * f for f in factors], abs=1e-12)
    assert min(got[warmup:]) > 0.1 * floor  # the last step is above the floor, never below


def test_floor_zero_is_the_plain_cosine():
    assert lrs("cosine", 1, 5, 1, 0.0) == lrs("cosine", 1, 5, 1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("optim.min_lr_rate=0.1",), r"optim\.min_lr_rate.*optim\.scheduler=cosine"),
        (("optim.scheduler=cosine", "optim.min_lr_rate=1.5"), r"optim\.min_lr_rate.*\[0, 1\]"),
        (("optim.scheduler=cosine", "optim.min_lr_rate=-0.1"), r"optim\.min_lr_rate.*\[0, 1\]"),
    ],
)
def test_floor_misconfigured(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/tiny.yaml", overrides)
