"""What sampling calls share: the LoRA merge computed beside the base weights (bit for bit
peft's), the frozen layers' packed copies, and a step's shared prompt prefix."""

import copy

import pytest
import torch

from flowgrpo.trainer.loop.policy import merged_adapter, merged_lora_weights, sampling_policy
from flowgrpo.trainer.loop.rollout import generate_rollout, prefill_prompts
from flowgrpo.trainer.loop.sampling_cache import SamplingCache
from tests.trainer.loop.test_rollout import PROBLEMS, lora_model

pytestmark = pytest.mark.skipif(  # the build, not the function under test, decides
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN (mkldnn)"
)


def _logits(model, ids):
    return model(input_ids=ids).logits


def test_the_merged_weights_are_peft_merge_bit_for_bit_and_leave_the_base_alone():
    model, _ = lora_model()
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merged_lora_weights(model)
    reference = copy.deepcopy(model)
    reference.merge_adapter()
    layers = dict(reference.named_modules())
    assert merged and len(merged) == 4  # q_proj and v_proj of two layers
    for name, module in model.named_modules():
        if module in merged:
            assert torch.equal(merged[module], layers[name].get_base_layer().weight)
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters())


def test_sampling_without_merging_into_the_model_computes_what_the_merged_model_does():
    """The packed block with the merge beside the weights gives the very logits of merging into
    the weights and packing those (the path without it), and the model is untouched."""
    model, _ = lora_model()
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    before = {n: (p.data_ptr(), p._version) for n, p in model.named_parameters()}
    with sampling_policy(model, True, None, 1, True) as count:
        fused = _logits(model, ids)
        assert count > 0
    assert {n: (p.data_ptr(), p._version) for n, p in model.named_parameters()} == before
    with torch.no_grad(), merged_adapter(model), sampling_policy(model, False, None, 1, True):
        in_place = _logits(model, ids)
    assert torch.equal(fused, in_place)


def test_a_disabled_adapter_is_not_merged_beside_the_weights_either():
    model, _ = lora_model()
    with model.disable_adapter():
        assert merged_lora_weights(model) is None


def test_a_reused_sampling_cache_gives_the_rollout_a_fresh_one_gives():
    model, tok = lora_model()
    reuse = SamplingCache()
    plain = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 12)
    first = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 12, reuse=reuse)
    second = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 12, reuse=reuse)
    assert len(reuse.packs) > 0, "the frozen layers' packed copies are kept"
    for r in (first, second):
        assert torch.equal(r.completion_ids_NT, plain.completion_ids_NT)


def _prefix_forwards(model, tok, reuse, problems):
    """How many prefix forwards (the shared tokens) a prefill of ``problems`` runs."""
    ids = [torch.tensor(tok(f"Q: {p.question}\nA:")["input_ids"]) for p in problems]
    seen = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    with torch.no_grad():
        prefill_prompts(model, ids, 2, 0, reuse, ("setting",))
    hook.remove()
    return len(seen) - len(problems)  # one forward per prompt's own tokens, besides


def test_the_prefix_is_reused_only_while_tokens_and_weights_are_the_same():
    model, tok = lora_model()
    reuse = SamplingCache()
    assert _prefix_forwards(model, tok, reuse, PROBLEMS) == 1
    assert _prefix_forwards(model, tok, reuse, PROBLEMS[::-1]) == 0, "same prefix, same weights"
    lora = next(p for n, p in model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora.data.add_(0.5)  # a write that bumps no version counter (a restored checkpoint)
    assert _prefix_forwards(model, tok, reuse, PROBLEMS) == 1, "the values are compared"
    frozen = next(p for n, p in model.named_parameters() if not p.requires_grad)
    with torch.no_grad():
        frozen.mul_(1.0)
    assert _prefix_forwards(model, tok, reuse, PROBLEMS) == 1, "an in-place write to the base"
