"""The dry-run memory estimate against counts taken from a real model and a hand-computed table."""

from __future__ import annotations

from flowgrpo.operators.models import load_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.policy import count_parameters, wrap_lora
from flowgrpo.trainer.reports.estimate import estimate

ALL = "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"


def test_parameter_counts_match_the_built_model():
    cfg = load_config(None, ("model.name_or_path=random:tiny-qwen2", f"lora.target_modules={ALL}"))
    est = estimate(cfg)
    model, _ = load_model("random:tiny-qwen2")
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)  # no biases, norms
    assert est["parameters"] == matrices
    peft_model = wrap_lora(model, cfg.lora)
    trainable, _ = count_parameters(peft_model)
    assert est["lora_parameters"] == trainable


def test_the_7b_estimate_is_the_larger_of_sampling_and_training():
    est = estimate(load_config("configs/qwen2.5-7b.yaml"))
    gib = est["gib"]
    # by hand: 28 layers x (2 x 3584^2 + 2 x 3584 x 512 + 3 x 3584 x 18944) = 6,525,288,448
    # adapted bf16 weights, 13,050,576,896 bytes = 12.15 GiB kept while sampling merged
    assert gib["merge_stash"] == 12.15
    assert est["sampling_gib"] == round(
        gib["weights"] + gib["lora_and_adam"] + gib["generation_kv_cache"] + gib["merge_stash"], 1
    )
    assert est["training_gib"] == round(
        gib["weights"] + gib["lora_and_adam"] + gib["activations_per_group"], 1
    )
    assert est["total_gib_estimate"] == max(est["sampling_gib"], est["training_gib"]) == 31.5


def test_attention_only_lora_stashes_only_the_attention_weights():
    est = estimate(
        load_config("configs/qwen2.5-7b.yaml", ("lora.target_modules=[q_proj, v_proj]",))
    )
    # 28 x (3584^2 + 3584 x 512) x 2 bytes = 822,083,584 bytes = 0.77 GiB
    assert est["gib"]["merge_stash"] == 0.77
