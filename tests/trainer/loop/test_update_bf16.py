"""``optim.bf16``: the update's forward passes under bfloat16 autocast. The LoRA gradient is the
float32 one up to bf16 rounding (close, yet not equal: the autocast is on), log-probs stay
float32, and the switch reaches the trainer's update from the config."""

import json

import pytest
import torch
from test_rollout import PROBLEMS, lora_model

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.algorithms.losses import LossConfig
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.policy import attention_as, frozen_linear_weights
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.loop.update import (
    UpdateBatch,
    UpdateSettings,
    _score_groups,
    accumulate_gradients,
)


def _lora_grad(model, rollout, adv_N, mode: str, bf16: bool) -> torch.Tensor:
    loss = LossConfig(max_new_tokens=8)
    settings = UpdateSettings(loss, logprob_mode=mode, temperature=1.0, bf16=bf16)
    accumulate_gradients(model, UpdateBatch(rollout, adv_N), settings)
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    model.zero_grad(set_to_none=True)
    return grad


@pytest.mark.parametrize("mode", ["shared_prompt", "full"])
def test_the_bf16_gradient_is_the_float32_one_up_to_rounding(mode):
    model, tok = lora_model()
    torch.manual_seed(0)
    rollout = generate_rollout(model, tok, PROBLEMS, 4, 1.0, 1.0, 8)
    adv_N = torch.tensor([1.0, -0.5, 0.2, -0.7, 0.9, -1.1, 0.4, -0.2])
    plain = _lora_grad(model, rollout, adv_N, mode, bf16=False)
    mixed = _lora_grad(model, rollout, adv_N, mode, bf16=True)
    gap = float((plain - mixed).norm() / plain.norm())
    assert plain.norm() > 0 and mixed.dtype == torch.float32
    assert 1e-6 < gap < 0.05, gap  # rounded (the autocast is on), yet the same direction
    cosine = torch.nn.functional.cosine_similarity(plain, mixed, dim=0)
    assert float(cosine) > 0.999


def test_scored_log_probs_stay_float32_and_near_the_float32_ones():
    model, tok = lora_model()
    torch.manual_seed(0)
    rollout = generate_rollout(model, tok, PROBLEMS, 2, 1.0, 1.0, 6)
    plain, _ = _score_groups(model, rollout, UpdateSettings(LossConfig()))
    mixed, _ = _score_groups(model, rollout, UpdateSettings(LossConfig(), bf16=True))
    m = rollout.mask_NT.bool()
    assert mixed.dtype == torch.float32
    diff = (plain - mixed).abs()[m]
    assert 0 < float(diff.max()) < 0.2


def test_the_config_switch_reaches_the_update(tmp_path):
    out = tmp_path / "run"
    sets = (f"logging.output_dir={out}", "optim.max_steps=1", "optim.bf16=true")
    trainer = Trainer(
        load_config("configs/tiny.yaml", sets), executor=ScriptedBackend(lambda r: "5")
    )
    assert trainer.update_settings.bf16 is True
    weights = trainer.update_settings.bf16_weights
    assert weights and all(w.dtype == torch.bfloat16 for w in weights.values())
    trainer.train()
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["step"] == 1


def test_a_bf16_that_is_not_a_bool_names_the_field():
    with pytest.raises(ConfigError, match=r"optim\.bf16"):
        load_config("configs/tiny.yaml", ("optim.bf16=maybe",))


def test_the_frozen_linear_weights_are_bf16_copies_of_the_base_projections_only():
    model, _ = lora_model()
    copies = frozen_linear_weights(model, torch.bfloat16)
    params = dict(model.named_parameters())
    # by name: every frozen *_proj weight (LoRA's targets through their base layer); no LoRA
    # factor, embedding (tied to the head) or norm
    expected = {n for n, p in params.items() if n.endswith("proj.weight") and not p.requires_grad}
    expected |= {n for n in params if n.endswith("base_layer.weight")}
    assert set(copies) == expected and len(expected) == 2 * 7
    for name, copy in copies.items():
        assert copy.dtype == torch.bfloat16 and torch.equal(copy, params[name].to(torch.bfloat16))
    assert frozen_linear_weights(model, torch.float32) == {}  # already that dtype: nothing


def test_attention_as_sets_the_implementation_in_the_block_and_back_after():
    model, _ = lora_model()
    config = model.get_base_model().config
    before = config._attn_implementation
    assert before != "eager"
    with attention_as(model, "eager"):
        assert config._attn_implementation == "eager"
    assert config._attn_implementation == before
    with attention_as(model, None):
        assert config._attn_implementation == before


def test_the_bf16_update_leaves_the_base_weights_and_attention_as_they_were():
    model, tok = lora_model()
    torch.manual_seed(0)
    rollout = generate_rollout(model, tok, PROBLEMS, 2, 1.0, 1.0, 6)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    attention = model.get_base_model().config._attn_implementation
    _lora_grad(model, rollout, torch.tensor([1.0, -1.0, 0.5, -0.5]), "shared_prompt", True)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert p.dtype == torch.float32 and torch.equal(p, before[name]), name
    assert model.get_base_model().config._attn_implementation == attention


def test_copies_made_once_give_the_gradient_of_copies_made_at_the_update():
    model, tok = lora_model()
    torch.manual_seed(0)
    rollout = generate_rollout(model, tok, PROBLEMS, 4, 1.0, 1.0, 8)
    batch = UpdateBatch(rollout, torch.tensor([1.0, -0.5, 0.2, -0.7, 0.9, -1.1, 0.4, -0.2]))
    grads = []
    for weights in (None, frozen_linear_weights(model, torch.bfloat16)):
        settings = UpdateSettings(LossConfig(max_new_tokens=8), bf16=True, bf16_weights=weights)
        accumulate_gradients(model, batch, settings)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
        model.zero_grad(set_to_none=True)
    assert grads[0].norm() > 0 and torch.equal(grads[0], grads[1])


def test_attention_as_leaves_a_module_without_the_setter_alone():
    module = torch.nn.Linear(2, 2)  # no config, no set_attn_implementation
    with attention_as(module, "eager"):
        assert not hasattr(module, "config")
