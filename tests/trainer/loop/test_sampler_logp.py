"""The sampler's log-prob of each drawn token against the update's own scoring of the same
tokens (``sampler_logp_NT``, the ``sampler_logp_gap`` metric): equal on float32 weights, apart
by bf16 rounding on bf16 ones; free and grammar-constrained."""

import json

import pytest
import torch
from test_rollout import PROBLEMS, lora_model

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.algorithms.losses import LossConfig
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.rollout import concat_rollouts, generate_rollout
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.loop.update import UpdateSettings, _score_groups

TEMPERATURE = 1.3


def _gap(constrained: str, dtype):
    model, tok = lora_model()
    torch.manual_seed(0)
    rollout = generate_rollout(model, tok, PROBLEMS, 4, TEMPERATURE, 1.0, 10,
                               constrained=constrained, dtype=dtype)  # fmt: skip
    settings = UpdateSettings(LossConfig(), temperature=TEMPERATURE)
    logp_NT, _ = _score_groups(model, rollout, settings)
    m = rollout.mask_NT.bool()
    assert rollout.sampler_logp_NT.shape == rollout.mask_NT.shape
    assert (rollout.sampler_logp_NT[~m] == 0).all()
    assert int((rollout.sampler_logp_NT < -0.05).sum()) >= 8, "tokens drawn from a choice"
    return (logp_NT - rollout.sampler_logp_NT).abs()[m]


@pytest.mark.parametrize("constrained", ["off", "grammar"])
def test_on_float32_weights_the_sampler_and_the_update_agree_on_every_token(constrained):
    gap = _gap(constrained, None)
    assert gap.numel() > 20 and float(gap.max()) < 1e-5


def test_on_bf16_weights_they_differ_by_the_rounding():
    gap = _gap("off", torch.bfloat16)  # float32: below 1e-6 on every token of this rollout
    assert 1e-4 < float(gap.mean()) < 0.1


def test_greedy_decoding_records_nothing():
    model, tok = lora_model()
    rollout = generate_rollout(model, tok, PROBLEMS, 2, 0.0, 1.0, 6)
    assert rollout.sampler_logp_NT is None


def test_rows_kept_and_joined_carry_their_own_log_probs():
    model, tok = lora_model()
    torch.manual_seed(1)
    a = generate_rollout(model, tok, PROBLEMS[:1], 2, 1.0, 1.0, 5)
    b = generate_rollout(model, tok, PROBLEMS[1:], 2, 1.0, 1.0, 7)
    joined = concat_rollouts([a, b])
    assert torch.equal(joined.sampler_logp_NT[2:, :7], b.sampler_logp_NT)
    assert torch.equal(joined.select_groups([0]).sampler_logp_NT[:, :5], a.sampler_logp_NT)


def test_a_training_step_logs_the_gap(tmp_path):
    out = tmp_path / "run"
    cfg = load_config("configs/tiny.yaml", (f"logging.output_dir={out}", "optim.max_steps=1"))
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["sampler_logp_gap"] is not None and 0 <= line["sampler_logp_gap"] < 1e-5
