"""rollout.sample_dtype: sampling on bf16 copies of the merged weights, the float32 policy
given back bit for bit; the logits those of peft's own merge cast to bf16."""

import copy
import json

import pytest
import torch
from test_rollout import PROBLEMS, lora_model

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.policy import merged_adapter, parameters_as
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.trainer import Trainer


def test_inside_the_block_every_parameter_is_bf16_and_after_it_the_same_tensor_again():
    model, _ = lora_model()
    before = {n: (p, p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    with parameters_as(model, torch.bfloat16):
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    for name, p in model.named_parameters():
        param, ptr, value = before[name]
        assert p is param and p.dtype == torch.float32
        assert p.data_ptr() == ptr and torch.equal(p, value), name


def test_none_leaves_the_parameters_untouched():
    model, _ = lora_model()
    ptrs = [p.data_ptr() for p in model.parameters()]
    with parameters_as(model, None):
        assert [p.data_ptr() for p in model.parameters()] == ptrs


def test_the_parameters_come_back_when_the_block_raises():
    model, _ = lora_model()
    with pytest.raises(RuntimeError, match="boom"), parameters_as(model, torch.bfloat16):
        raise RuntimeError("boom")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def _bf16_reference(model):
    """The independent computation: peft merges the adapter into a float32 copy
    (``merge_and_unload``), whose parameters (not its float32 rotary buffers) are cast to bf16."""
    reference = copy.deepcopy(model).merge_and_unload()
    for p in reference.parameters():
        p.data = p.data.to(torch.bfloat16)
    return reference


def test_the_sampling_weights_give_exactly_the_logits_of_peft_merge_cast_to_bf16():
    model, _ = lora_model()
    reference = _bf16_reference(model)
    ids_NT = torch.tensor([[5, 6, 7, 8, 9], [3, 4, 5, 6, 7]])
    with torch.no_grad():
        fp32_NTV = model(ids_NT).logits
        with merged_adapter(model), parameters_as(model, torch.bfloat16):
            ours_NTV = model(ids_NT).logits
        theirs_NTV = reference(ids_NT).logits
    assert ours_NTV.dtype == torch.bfloat16 and torch.equal(ours_NTV, theirs_NTV)
    assert not torch.allclose(fp32_NTV, ours_NTV.float(), atol=1e-4), "bf16 rounding shows"


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_rollout_decodes_in_the_asked_dtype_and_gives_the_float32_policy_back(dtype):
    model, tok = lora_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = set()
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: seen.add(out.dtype)
    )
    generate_rollout(model, tok, PROBLEMS, 2, 1.0, 1.0, 6, dtype=dtype)
    hook.remove()
    assert seen == {dtype or torch.float32}
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_the_config_rejects_an_unknown_sample_dtype_and_names_the_field():
    with pytest.raises(ConfigError, match=r"rollout\.sample_dtype"):
        load_config("configs/tiny.yaml", ("rollout.sample_dtype=float16",))


def test_a_training_step_samples_in_bf16_and_trains_the_float32_adapter(tmp_path, monkeypatch):
    seen = []
    real = step_mod.generate_rollout

    def spy(model, *args, **kwargs):
        seen.append(kwargs.get("dtype"))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(step_mod, "generate_rollout", spy)
    out = tmp_path / "run"
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={out}", "optim.max_steps=1", "rollout.sample_dtype=bfloat16"),
    )
    trainer = Trainer(cfg, executor=ScriptedBackend(lambda request: "5"))
    trainer.train()
    assert seen and set(seen) == {torch.bfloat16}
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["step"] == 1
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
