"""model.init_adapter: the policy starts from a saved LoRA adapter of the configured shape."""

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import ConfigError, load_config
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


def test_reference_init_adapter_is_the_frozen_start_while_the_policy_moves(tmp_path):
    from contextlib import nullcontext

    from flowgrpo.trainer.loop.policy import reference_policy

    path, _ = saved_adapter(tmp_path)
    on = (f"model.init_adapter={path}", "algorithm.loss.beta=0.1",
          "algorithm.loss.reference=init_adapter")  # fmt: skip
    model, _ = setup.policy(load_config(CONFIG, on))
    start, _ = setup.policy(load_config(CONFIG, (f"model.init_adapter={path}",)))  # independent
    model.eval(), start.eval()  # no LoRA dropout: exact comparisons
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer, _ = setup.optimizer(load_config(CONFIG, on), model)
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == sum(
        p.numel() for p in trained
    )  # the reference copy is not optimised
    with torch.no_grad():
        for p in trained:
            p.add_(0.2)  # the policy moves
    reference = _logits(model, reference_policy(model, "init_adapter"))
    assert torch.allclose(reference, _logits(start, nullcontext()), atol=1e-6)
    assert not torch.allclose(_logits(model, nullcontext()), reference, atol=1e-3)
    # after the switch back: the trained adapter is active and trainable, the reference frozen
    assert model.active_adapter == "default"
    assert [p for p in model.parameters() if p.requires_grad] == trained
    base = _logits(model, reference_policy(model, "base"))
    assert not torch.allclose(base, reference, atol=1e-3)  # base = adapter off, another policy


def test_reference_init_adapter_needs_an_init_adapter():
    with pytest.raises(ConfigError, match=r"algorithm\.loss\.reference: init_adapter anchors"):
        load_config(CONFIG, ("algorithm.loss.reference=init_adapter",))
    with pytest.raises(ConfigError, match=r"algorithm\.loss\.reference"):
        load_config(CONFIG, ("algorithm.loss.reference=start",))


def test_a_checkpoint_keeps_the_trained_adapter_only(tmp_path):
    from flowgrpo.trainer.loop.checkpoint import save_checkpoint

    path, _ = saved_adapter(tmp_path)
    on = (f"model.init_adapter={path}", "algorithm.loss.beta=0.1",
          "algorithm.loss.reference=init_adapter")  # fmt: skip
    cfg = load_config(CONFIG, on)
    model, _ = setup.policy(cfg)
    optimizer, scheduler = setup.optimizer(cfg, model)
    (tmp_path / "run").mkdir()
    saved = save_checkpoint(tmp_path / "run", 1, model, optimizer, scheduler, {})
    assert (saved / "adapter" / "adapter_model.safetensors").is_file()
    assert not (saved / "adapter" / "reference").exists()


@pytest.mark.parametrize(("reference", "first_kl_zero"), [("init_adapter", True), ("base", False)])
def test_the_first_steps_kl_is_zero_only_against_the_start_adapter(
    tmp_path, reference, first_kl_zero
):
    import json

    from flowgrpo.trainer.loop.trainer import Trainer

    path, _ = saved_adapter(tmp_path)
    cfg = load_config(CONFIG, (
        f"model.init_adapter={path}", "algorithm.loss.beta=0.1",
        f"algorithm.loss.reference={reference}", "optim.max_steps=1",
        f"logging.output_dir={tmp_path / 'run'}", "rollout.dynamic_sampling=false",
    ))  # fmt: skip
    Trainer(cfg).train()
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    # the policy before its first update IS the start adapter: k3 KL to it is exactly 0
    assert (abs(line["kl"]) < 1e-6) == first_kl_zero
