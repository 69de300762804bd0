"""scripts/format_sft.py: its target distribution, its loss, and a smoke run whose adapter a
known-optimum run can start from (model.init_adapter)."""

import importlib.util
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from flowgrpo.dsl import validate
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.simulation import best_workflow
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import setup

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "format_sft.py"


def script():
    spec = importlib.util.spec_from_file_location("format_sft", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_targets_are_varied_valid_and_do_not_prefer_the_best_workflow():
    sft = script()
    rng = random.Random(0)
    draws = [sft.draw_workflow(rng) for _ in range(2000)]
    assert all(validate(w, domain="math").ok for w in draws)
    counts = Counter(draws)
    assert len(counts) > 300, "spread over many workflows"
    assert counts.most_common(1)[0][1] / len(draws) < 0.1, "no workflow dominates"
    limits = Limits(max_llm_calls=12)
    for level in ("easy", "medium", "hard"):
        assert counts[best_workflow(None, level, limits=limits).workflow] / len(draws) < 0.01
    described = sft.describe_targets(draws[:200], limits)
    gap = described["sim_best_expected_accuracy"] - described["targets_sim_expected_accuracy"]
    assert gap > 0.05, "room to learn: the targets are on average well below the best"


def test_the_loss_is_cross_entropy_on_the_completion_tokens_only():
    sft = script()
    model, _ = build_tiny_model(seed=0)
    batch = [([5, 6, 7, 8], [9, 10, 2]), ([5, 6], [11, 2])]
    loss = sft.sft_loss(model, batch, pad_id=0)
    logp, n = 0.0, 0
    for prompt, completion in batch:
        ids = torch.tensor([prompt + completion])
        logits = model(input_ids=ids).logits[0]
        for j, token in enumerate(completion):
            logp += float(torch.log_softmax(logits[len(prompt) + j - 1], -1)[token])
            n += 1
    assert float(loss) == pytest.approx(-logp / n, rel=1e-5)


@pytest.mark.slow
def test_smoke_run_saves_an_adapter_a_known_optimum_run_starts_from(tmp_path):
    out, summary = tmp_path / "adapter", tmp_path / "summary.json"
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out), "--json", str(summary)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "format SFT of tiny-random: validity" in done.stdout
    result = json.loads(summary.read_text())
    assert 0 <= result["validity"] <= 1 and 0 <= result["fallback"] <= 1
    assert result["steps"] == 3 and result["examples"] > 0
    assert (out / "adapter_config.json").is_file()
    saved = load_config(out / "config.yaml")  # flowgrpo eval --adapter OUT reads it
    assert saved.model.name_or_path == "tiny-random" and saved.model.init_adapter is None
    cfg = load_config("configs/tiny-known-optimum.yaml", (f"model.init_adapter={out}",))
    model, _ = setup.policy(cfg)  # the shapes match the config the script trained with
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(float(p.detach().abs().sum()) > 0 for p in b), "the SFT moved the adapter"
