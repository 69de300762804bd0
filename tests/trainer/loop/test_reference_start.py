"""algorithm.reference: start: the KL's reference is the adapter the run started from (frozen),
not the base weights: zero KL while the policy is the start, growing as it moves away."""

import json

import pytest
import torch
from test_init_adapter import CONFIG, saved_adapter

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.policy import parameters_from, trainable_values, wrap_lora
from flowgrpo.trainer.loop.trainer import Trainer


def _kl_per_step(tmp_path, reference: str, steps: int = 2) -> list:
    path, _ = saved_adapter(tmp_path)
    out = tmp_path / f"run-{reference}"
    cfg = load_config(CONFIG, (
        f"model.init_adapter={path}", f"algorithm.reference={reference}",
        "algorithm.loss.beta=0.1", f"optim.max_steps={steps}", "optim.lr=5e-3",
        "rollout.constrained=grammar",
        f"logging.output_dir={out}", "rollout.dynamic_sampling=false",
    ))  # fmt: skip
    Trainer(cfg).train()  # the config's SIMULATED executor: rewards differ, the policy moves
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [line["kl"] for line in lines]


def test_the_kl_to_the_start_is_zero_at_the_start_and_grows_as_the_policy_moves(tmp_path):
    start = _kl_per_step(tmp_path, "start")
    assert start[0] == 0.0  # the policy is its own reference before any update
    assert start[1] > 0.0


def test_the_kl_to_the_base_weights_is_not_zero_at_a_trained_start(tmp_path):
    assert _kl_per_step(tmp_path, "base", steps=1)[0] > 1e-4


def test_reference_start_needs_an_init_adapter():
    with pytest.raises(ConfigError, match=r"algorithm\.reference"):
        load_config(CONFIG, ("algorithm.reference=start",))
    with pytest.raises(ConfigError, match=r"algorithm\.reference"):
        load_config(CONFIG, ("algorithm.reference=initial",))


def test_parameters_from_swaps_the_values_in_and_gives_each_its_own_tensor_back():
    model, _ = build_tiny_model(seed=1)
    model = wrap_lora(model, load_config(CONFIG).lora)
    start = trainable_values(model)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    with parameters_from(model, start):
        live = dict(model.named_parameters())
        assert all(torch.equal(live[n], v) for n, v in start.items())
    for name, p in model.named_parameters():
        assert p.data_ptr() == before[name][0] and torch.equal(p, before[name][1]), name
    with (
        pytest.raises(ValueError, match="no parameter"),
        parameters_from(model, {"nowhere.weight": torch.zeros(1)}),
    ):
        pass
