"""``flowgrpo export CHECKPOINT --merge OUT`` on the tiny model: OUT is a standard model folder
whose logits equal those of the base model with the adapter, and whose tokenizer loads."""

import json

import torch
from click.testing import CliRunner
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop.policy import wrap_lora

SEED = 7  # not tiny-random's default 0: the export must rebuild the run's base model


def fake_checkpoint(run_dir):
    """RUN_DIR/checkpoint-1 holding an adapter with large random LoRA B weights."""
    cfg = load_config("configs/tiny.yaml", (f"logging.output_dir={run_dir}", f"optim.seed={SEED}"))
    peft = wrap_lora(build_tiny_model(seed=SEED)[0], cfg.lora)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    checkpoint = run_dir / "checkpoint-1"
    peft.save_pretrained(checkpoint / "adapter")
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    save_config(cfg, run_dir / "config.yaml")
    return checkpoint


def export(*args):
    return CliRunner().invoke(main, ["export", *map(str, args)])


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_model_has_the_adapter_models_logits_and_a_tokenizer(tmp_path):
    checkpoint, out = fake_checkpoint(tmp_path / "run"), tmp_path / "merged"
    result = export(checkpoint, "--merge", out)
    assert result.exit_code == 0, result.output
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer("Custom -> Review ? Revise : done")["input_ids"]])
    base, reference_tokenizer = build_tiny_model(seed=SEED)
    assert ids.tolist()[0] == reference_tokenizer("Custom -> Review ? Revise : done")["input_ids"]
    plain = logits(base, ids)
    adapted = logits(PeftModel.from_pretrained(base, checkpoint / "adapter").eval(), ids)
    assert (adapted - plain).abs().max() > 1e-2, "the adapter changes the outputs"
    torch.testing.assert_close(logits(merged, ids), adapted, atol=1e-5, rtol=1e-5)
    assert json.loads((out / "flowgrpo_export.json").read_text())["base_model"] == "tiny-random"


def test_export_refuses_a_non_empty_folder_unless_overwrite_and_logs_by_level(tmp_path):
    checkpoint, out = fake_checkpoint(tmp_path / "run"), tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    refused = export(checkpoint, "--merge", out)
    assert (
        refused.exit_code == 2 and "not empty" in refused.output and "--overwrite" in refused.output
    )
    assert (out / "keep.txt").exists()

    foreign = export(checkpoint, "--merge", out, "--overwrite")  # no export wrote this folder
    assert foreign.exit_code == 2 and "no export of this version wrote" in foreign.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"]

    (out / "keep.txt").unlink()
    assert export(checkpoint, "--merge", out).exit_code == 0
    (out / "keep.txt").write_text("x")  # the user's file beside an export
    quiet = export(checkpoint, "--merge", out, "--overwrite", "--log-level", "WARNING")
    assert quiet.exit_code == 0, quiet.output
    assert "into tiny-random" not in quiet.output and "merging" in quiet.output
    assert (out / "keep.txt").read_text() == "x"
    listed = json.loads((out / "flowgrpo_export.json").read_text())["files"]
    assert "keep.txt" not in listed and {"model.safetensors", "config.json"} <= set(listed)
    silent = export(checkpoint, "--merge", out, "--overwrite", "--quiet")
    assert silent.exit_code == 0 and "merging" not in silent.output and "exported" in silent.output
    loud = export(checkpoint, "--merge", out, "--overwrite")
    assert "into tiny-random" in loud.output


def test_overwrite_deletes_only_the_files_the_earlier_export_listed(tmp_path, monkeypatch):
    checkpoint, out = fake_checkpoint(tmp_path / "run"), tmp_path / "merged"
    assert export(checkpoint, "--merge", out).exit_code == 0
    info = json.loads((out / "flowgrpo_export.json").read_text())
    (out / "flowgrpo_export.json").write_text(json.dumps({**info, "files": ["../run"]}))
    forged = export(checkpoint, "--merge", out, "--overwrite")
    assert forged.exit_code == 2 and (tmp_path / "run").is_dir()  # a listed path is a name
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "notes.txt").write_text("mine")
    monkeypatch.chdir(mine)  # `--merge .` of a folder no export wrote: nothing deleted
    here = export(checkpoint, "--merge", ".", "--overwrite")
    assert here.exit_code == 2 and "no export of this version wrote" in here.output
    assert (mine / "sub" / "notes.txt").read_text() == "mine"


def test_export_usage_errors(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "run")
    assert "give --merge OUT" in export(checkpoint).output
    assert export(checkpoint).exit_code == 2
    inside = export(checkpoint, "--merge", tmp_path / "run")
    assert inside.exit_code == 2 and "holds the checkpoint" in inside.output
    no_adapter = export(tmp_path, "--merge", tmp_path / "out")
    assert no_adapter.exit_code == 2 and "no adapter here" in no_adapter.output


def test_base_export_is_the_model_alone(tmp_path):
    out = tmp_path / "base"
    result = export("--base", "tiny-random", "--merge", out)
    assert result.exit_code == 0, result.output
    saved = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer("Custom -> Format")["input_ids"]])
    base, _ = build_tiny_model(seed=0)
    torch.testing.assert_close(logits(saved, ids), logits(base, ids), atol=1e-6, rtol=1e-6)
    info = json.loads((out / "flowgrpo_export.json").read_text())
    assert info["base_model"] == "tiny-random" and info["checkpoint"] is None


def test_export_takes_a_checkpoint_or_a_base_model_not_both(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "run")
    for args in ((checkpoint, "--base", "tiny-random"), ()):
        result = export(*args, "--merge", tmp_path / "out")
        assert result.exit_code == 2
        assert "give a CHECKPOINT (RUN_DIR/checkpoint-N) or --base MODEL" in result.output
    assert not (tmp_path / "out").exists()
