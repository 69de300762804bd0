"""Rollout generation: prefix prefill equals plain generation; masks; merged weights restored."""

from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache, StaticCache

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.algorithms.logprobs import common_prefix_length
from flowgrpo.trainer.loop.policy import merged_adapter, wrap_lora
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import completion_mask, generate_rollout, prefill_prompts

LORA = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))
PROBLEMS = [
    Problem("a", "math", "What is 2 + 2?", "4"),
    Problem("b", "math", "Tom has 3 apples and buys 12 more. How many now?", "15"),
]


def lora_model():
    model, tok = build_tiny_model(seed=1)
    model.generation_config.eos_token_id = None  # always generate the full budget
    peft = wrap_lora(model, LORA)
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    return peft, tok


def test_prefilling_each_prompt_once_gives_the_same_greedy_completions():
    model, tok = lora_model()
    fast = generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 12, prefill_once=True)
    slow = generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 12, prefill_once=False)
    assert torch.equal(fast.completion_ids_NT, slow.completion_ids_NT)
    assert fast.texts == slow.texts
    assert len(fast.prompt_ids[0]) != len(fast.prompt_ids[1]), "prompts of different lengths"


def test_groups_are_consecutive_and_sampling_varies_within_a_group():
    model, tok = lora_model()
    torch.manual_seed(3)
    rollout = generate_rollout(model, tok, PROBLEMS, 4, 1.5, 1.0, 10)
    assert rollout.completion_ids_NT.shape[0] == 8
    assert len(set(rollout.texts[:4])) > 1, "temperature sampling gives different completions"


def test_generation_on_merged_weights_leaves_the_base_weights_bit_identical():
    model, tok = lora_model()
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    with merged_adapter(model):
        merged = {n: p.detach().clone() for n, p in model.named_parameters() if ".base_layer." in n}
    assert any(not torch.equal(merged[n], base[n]) for n in merged), "merging changed W"
    generate_rollout(model, tok, PROBLEMS, 2, 1.0, 1.0, 6)
    after = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    assert all(torch.equal(base[n], after[n]) for n in base)


def test_completion_mask_stops_after_the_first_eos_and_flags_truncation():
    ids = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 0, 0, 0]])
    mask, truncated = completion_mask(ids, [2])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


@pytest.mark.parametrize("max_new", [0, 8])
def test_the_prefill_runs_the_shared_prefix_once_and_caches_what_a_full_prompt_would(max_new):
    """prefill_prompts: every prompt's keys and values equal those of running that prompt alone
    (left-padded), while the tokens every prompt starts with ran once, not once per prompt; with
    ``max_new_tokens`` in a StaticCache with room for the last prompt token and the new ones."""
    model, tok = lora_model()
    prompt = PolicyPrompt()
    ids = [torch.tensor(tok(prompt.render(p, tok), add_special_tokens=False)["input_ids"])
           for p in PROBLEMS]  # fmt: skip
    shared = common_prefix_length([i[:-1] for i in ids])
    assert shared > 20, "the built-in prompt's instruction and few-shot turns are shared"
    seen = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    with torch.no_grad():
        cache = prefill_prompts(model, ids, group_size=2, max_new_tokens=max_new)
    hook.remove()
    assert seen == [shared] + [len(i) - 1 - shared for i in ids]
    width = max(len(i) for i in ids) - 1
    assert int(cache.get_seq_length()) == width
    assert isinstance(cache, StaticCache if max_new else DynamicCache)
    if max_new:
        assert all(layer.keys.shape[-2] == width + 1 + max_new for layer in cache.layers)
    for b, i in enumerate(ids):
        with torch.no_grad():
            alone = model(input_ids=i[None, :-1], use_cache=True).past_key_values
        pad = width - (len(i) - 1)
        for layer, ref in zip(cache.layers, alone.layers):
            for got, want in ((layer.keys, ref.keys), (layer.values, ref.values)):
                rows = got[2 * b : 2 * b + 2, :, pad:width]
                assert torch.allclose(rows, want.expand_as(rows), atol=1e-5)
                assert not got[2 * b : 2 * b + 2, :, :pad].any(), "the left padding is zeros"


def test_packed_weights_give_the_same_greedy_completions():
    """rollout.packed_weights samples on oneDNN-packed copies of the Linear weights: the same
    products to rounding, so the same greedy tokens on the tiny model (merged LoRA included)."""
    model, tok = lora_model()
    packed = generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 12, packed=True)
    plain = generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 12, packed=False)
    assert torch.equal(packed.completion_ids_NT, plain.completion_ids_NT)


def test_the_packed_switch_reaches_the_sampling_block(monkeypatch):
    """``packed`` is what decides: the block is asked to pack with the rows of the call, or not."""
    import flowgrpo.trainer.loop.policy as policy_module

    seen = []
    real = policy_module.packed_linears

    def spy(model, rows, enabled=True, weights=None, cache=None):
        seen.append((rows, enabled))
        return real(model, rows, enabled, weights, cache)

    monkeypatch.setattr(policy_module, "packed_linears", spy)
    model, tok = lora_model()
    generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 4, packed=False)
    generate_rollout(model, tok, PROBLEMS, 3, 0.0, 1.0, 4)
    assert seen == [(6, False), (6, True)]


def test_with_the_adapter_disabled_the_base_model_is_sampled():
    """peft unmerges a disabled layer inside its own forward; merging (and packing the merged
    weights) under ``disable_adapter()`` would sample the adapter in the base model."""
    model, tok = lora_model()
    base, _ = build_tiny_model(seed=1)
    base.generation_config.eos_token_id = None
    plain = generate_rollout(base, tok, PROBLEMS, 2, 0.0, 1.0, 12)
    adapted = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 12)
    with model.disable_adapter():
        disabled = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 12)
    assert not torch.equal(adapted.completion_ids_NT, plain.completion_ids_NT), "B is not 0"
    assert torch.equal(disabled.completion_ids_NT, plain.completion_ids_NT)
