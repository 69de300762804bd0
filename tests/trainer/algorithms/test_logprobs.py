"""Shared-prompt scoring equals the full forward: log-probs, entropies and LoRA gradients."""

from types import SimpleNamespace

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.algorithms.logprobs import group_logprobs
from flowgrpo.trainer.loop.policy import wrap_lora


@pytest.fixture
def policy():
    model, tok = build_tiny_model(seed=2)
    lora = SimpleNamespace(
        r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    peft = wrap_lora(model, lora)
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    prompt = torch.tensor(tok("<|user|>Tom has 3 apples.\n<|assistant|>")["input_ids"])
    completions = torch.randint(4, 90, (4, 7))
    mask = torch.ones(4, 7)
    mask[1, 4:] = 0
    mask[3, 1:] = 0  # a completion of one token
    return peft, prompt, completions, mask


def _run(model, prompt, completions, mask, mode):
    model.zero_grad()
    logp, entropy = group_logprobs(model, prompt, completions, mask, mode)
    ((logp * mask).sum() + (entropy * mask).sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    return logp.detach(), entropy.detach(), grads


def test_shared_prompt_matches_the_full_forward(policy):
    model, prompt, completions, mask = policy
    lp_s, ent_s, g_s = _run(model, prompt, completions, mask, "shared_prompt")
    lp_f, ent_f, g_f = _run(model, prompt, completions, mask, "full")
    assert torch.allclose(lp_s * mask, lp_f * mask, atol=1e-5)
    assert torch.allclose(ent_s * mask, ent_f * mask, atol=1e-5)
    assert (g_s - g_f).norm() / g_f.norm() < 1e-4
    assert g_f.norm() > 0


def test_log_probs_are_normalised_and_entropy_non_negative(policy):
    model, prompt, completions, mask = policy
    with torch.no_grad():
        logp, entropy = group_logprobs(model, prompt, completions, mask)
    assert (logp <= 0).all() and (entropy >= 0).all()
    assert logp.shape == completions.shape


def test_unknown_mode_is_rejected(policy):
    model, prompt, completions, mask = policy
    with pytest.raises(ValueError, match="shared_prompt"):
        group_logprobs(model, prompt, completions, mask, mode="fast")
