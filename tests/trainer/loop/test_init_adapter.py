"""model.init_adapter: the policy starts from a saved LoRA adapter of the configured shape."""

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.policy import wrap_lora

CONFIG = "configs/tiny-known-optimum.yaml"


def saved_adapter(tmp_path, r=4, alpha=8):
    """A tiny-model adapter with non-zero B (a fresh one would equal the base model)."""
    cfg = load_config(CONFIG, (f"lora.r={r}", f"lora.alpha={alpha}"))
    model, _ = build_tiny_model(seed=cfg.optim.seed)
    peft_model = wrap_lora(model, cfg.lora)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    path = tmp_path / "adapter"
    peft_model.save_pretrained(str(path))
    return path, {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n}


def test_the_policy_starts_from_the_saved_adapter_and_trains_it(tmp_path):
    path, saved = saved_adapter(tmp_path)
    cfg = load_config(CONFIG, (f"model.init_adapter={path}",))
    model, _ = setup.policy(cfg)
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[n].detach(), saved[n]) for n in saved)
    assert all(p.requires_grad for p in loaded.values()), "the loaded adapter must be trainable"
    fresh, _ = setup.policy(load_config(CONFIG))
    b = [p for n, p in fresh.named_parameters() if "lora_B" in n]
    fresh_adapter = all(float(p.detach().abs().sum()) == 0 for p in b)
    assert fresh_adapter, "without init_adapter: a fresh adapter"


def test_a_checkpoint_folder_holding_adapter_is_accepted(tmp_path):
    saved_adapter(tmp_path)  # tmp_path/adapter: pass its parent like a checkpoint
    model, _ = setup.policy(load_config(CONFIG, (f"model.init_adapter={tmp_path}",)))
    assert any("lora_B" in n for n, _ in model.named_parameters())


def test_a_shape_mismatch_names_both_shapes_and_the_fix(tmp_path):
    path, _ = saved_adapter(tmp_path, r=8, alpha=16)
    cfg = load_config(CONFIG, (f"model.init_adapter={path}",))  # lora r=4, alpha=8
    with pytest.raises(ValueError, match=r"model.init_adapter: .*lora.r: adapter 8 vs config 4"):
        setup.policy(cfg)
    cfg = load_config(CONFIG, (f"model.init_adapter={path}", "lora.r=8", "lora.alpha=16",
                               "lora.target_modules=[q_proj, v_proj]"))  # fmt: skip
    with pytest.raises(ValueError, match=r"lora\.target_modules"):
        setup.policy(cfg)


def test_a_missing_adapter_says_how_to_make_one(tmp_path):
    cfg = load_config(CONFIG, (f"model.init_adapter={tmp_path / 'nothing'}",))
    with pytest.raises(FileNotFoundError, match=r"flowgrpo sft --config CONFIG"):
        setup.policy(cfg)


def _logits(model, ctx):
    ids = torch.tensor([[5, 9, 11, 3, 7, 2]])
    with torch.no_grad(), ctx:
        return model(input_ids=ids).logits


def test_a_checkpoint_keeps_the_trained_adapter_only(tmp_path):
    from flowgrpo.trainer.loop.checkpoint import save_checkpoint

    path, _ = saved_adapter(tmp_path)
    on = (f"model.init_adapter={path}", "algorithm.loss.beta=0.1")
    cfg = load_config(CONFIG, on)
    model, _ = setup.policy(cfg)
    optimizer, scheduler = setup.optimizer(cfg, model)
    (tmp_path / "run").mkdir()
    saved = save_checkpoint(tmp_path / "run", 1, model, optimizer, scheduler, {})
    assert (saved / "adapter" / "adapter_model.safetensors").is_file()
    assert not (saved / "adapter" / "reference").exists()


def test_the_kl_anchors_to_the_base_weights_not_to_the_start_adapter(tmp_path):
    import json

    from flowgrpo.trainer.loop.trainer import Trainer

    path, _ = saved_adapter(tmp_path)
    cfg = load_config(CONFIG, (
        f"model.init_adapter={path}", "algorithm.loss.beta=0.1",
        "optim.max_steps=1",
        f"logging.output_dir={tmp_path / 'run'}", "rollout.dynamic_sampling=false",
    ))  # fmt: skip
    Trainer(cfg).train()
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    # the policy before its first update IS the start adapter; the reference is the base
    # weights with the adapter off (TRL's GRPOTrainer with PEFT), so the KL is already > 0
    assert line["kl"] > 1e-6
