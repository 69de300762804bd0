"""The training loop on the tiny random model: updates, metrics, checkpoints, guard."""

import json

import pytest
import torch
from trainer_fakes import FREE, PROSE, VALID, mixed, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.trainer import Trainer

REQUIRED = [
    "step",
    "loss",
    "grad_norm",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "entropy",
    "cov_logp_adv",
    "kl",
    "clip_ratio/low",
    "clip_ratio/high",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "fallback_rate",
    "validity_rate",
    "accuracy",
    "distinct_workflows",
    "adv_frac_extreme",
    "step_time",
    "tokens_per_s",
    "rewards/validity/mean",
    "rewards/validity/std",
    "alerts",
]


def tiny_config(tmp_path, *extra):
    return load_config("configs/tiny.yaml", (f"logging.output_dir={tmp_path}", FREE, *extra))


def executor():
    return ScriptedBackend(lambda request: "5")


def lora_and_base(model):
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    return lora, base


def test_training_moves_the_adapter_and_not_the_base_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    trainer = Trainer(tiny_config(tmp_path, "optim.max_steps=2"), executor=executor())
    lora0, base0 = lora_and_base(trainer.model)
    result = trainer.train()
    lora1, base1 = lora_and_base(trainer.model)
    assert result.steps == 2 and result.exit_code == 0
    assert any(not torch.equal(lora0[n], lora1[n]) for n in lora0), "adapter weights moved"
    assert all(torch.equal(base0[n], base1[n]) for n in base0), "base weights did not"


def test_every_step_writes_the_documented_metrics_and_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    Trainer(tiny_config(tmp_path, "optim.max_steps=2"), executor=executor()).train()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for key in REQUIRED:
        assert key in lines[0], key
    assert lines[0]["validity_rate"] == 0.5 and lines[0]["fallback_rate"] == 0.5
    assert lines[0]["distinct_workflows"] == 1
    assert lines[0]["grad_norm"] > 0 and lines[0]["frac_reward_zero_std"] == 0.0
    samples = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 * 8
    valid = [s for s in samples if s["completion"] == VALID]
    prose = [s for s in samples if s["completion"] == PROSE]
    assert valid and prose and min(s["reward"] for s in valid) > max(s["reward"] for s in prose)
    assert all(s["advantage"] > 0 for s in valid) and all(s["advantage"] < 0 for s in prose)
    assert (tmp_path / "config.yaml").is_file()


def test_dynamic_sampling_drops_groups_without_signal(tmp_path, monkeypatch):
    groups = {0: [PROSE] * 8, 1: [VALID] * 2 + [PROSE] * 6}
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: groups[g % 2]))
    trainer = Trainer(
        tiny_config(tmp_path, "optim.max_steps=1", "rollout.max_resample_rounds=0"),
        executor=executor(),
    )
    trainer.train()
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert line["frac_reward_zero_std"] == 0.5
    assert line["kept_groups"] == 1 and line["resampled_groups"] == 0


def test_all_zero_variance_skips_the_update_but_still_logs_entropy(tmp_path, monkeypatch):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: [PROSE] * 8))
    trainer = Trainer(tiny_config(tmp_path, "optim.max_steps=3"), executor=executor())
    lora0, _ = lora_and_base(trainer.model)
    trainer.train()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(m["skipped_update"] and m["grad_norm"] == 0 for m in lines)
    assert all(m["entropy"] > 0 for m in lines)
    assert "deadlock" in [a["name"] for a in lines[-1]["alerts"]]
    lora1, _ = lora_and_base(trainer.model)
    assert all(torch.equal(lora0[n], lora1[n]) for n in lora0)


def test_non_finite_loss_skips_the_optimizer_step(tmp_path, monkeypatch):
    import flowgrpo.trainer.loop.update as update_mod

    real = update_mod.policy_objective

    def nan_objective(*args, **kwargs):
        total, metrics = real(*args, **kwargs)
        return total * float("nan"), metrics

    monkeypatch.setattr(update_mod, "policy_objective", nan_objective)
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    trainer = Trainer(tiny_config(tmp_path, "optim.max_steps=1"), executor=executor())
    lora0, _ = lora_and_base(trainer.model)
    trainer.train()
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert line["nonfinite_skips"] == 1 and line["optimizer_steps"] == 0
    lora1, _ = lora_and_base(trainer.model)
    assert all(torch.equal(lora0[n], lora1[n]) for n in lora0)


def test_rollback_undoes_an_update_followed_by_collapse(tmp_path, monkeypatch):
    """Step 1 is healthy and updates; step 2's rollout is all prose: the guard restores the
    adapter and optimizer state from before step 1's update."""
    from flowgrpo.trainer.monitoring.guard import take_snapshot

    script = {0: mixed()(0), 1: mixed()(0), 2: [PROSE] * 8, 3: [PROSE] * 8}
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: script[g]))
    cfg = tiny_config(
        tmp_path,
        "optim.max_steps=2",
        "rollout.problems_per_step=2",
        "health.guard=rollback",
        "health.rollback_lr_factor=0.5",
    )
    trainer = Trainer(cfg, executor=executor())
    before = take_snapshot(trainer.model, trainer.optimizer)
    lr0 = trainer.optimizer.param_groups[0]["lr"]
    trainer.train()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert not lines[0]["rollback"] and lines[1]["rollback"]
    assert "update_collapse" in [a["name"] for a in lines[1]["alerts"]]
    now = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert all(torch.equal(before.params[n], now[n]) for n in now), "weights restored"
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(lr0 * 0.5)


def test_checkpoint_loads_with_peft_and_resume_continues(tmp_path, monkeypatch):
    from peft import PeftModel

    from flowgrpo.operators.models import build_tiny_model

    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    cfg = tiny_config(tmp_path, "optim.max_steps=2", "logging.save_every=1")
    first = Trainer(cfg, executor=executor())
    first.train()
    trained = {n: p.detach().clone() for n, p in first.model.named_parameters() if p.requires_grad}
    base, _ = build_tiny_model(seed=cfg.optim.seed)
    loaded = PeftModel.from_pretrained(base, tmp_path / "checkpoint-2" / "adapter")
    got = {n: p for n, p in loaded.named_parameters() if "lora_" in n}
    assert set(got) == set(trained)
    assert all(torch.equal(got[n], trained[n]) for n in trained)

    cfg4 = tiny_config(tmp_path, "optim.max_steps=4", "logging.save_every=1")
    resumed = Trainer(cfg4, resume=True, executor=executor())
    assert resumed.step == 2
    assert all(
        torch.equal(p, trained[n]) for n, p in resumed.model.named_parameters() if p.requires_grad
    )
    resumed.train()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_a_failed_save_leaves_the_last_good_checkpoint(tmp_path, monkeypatch):
    import flowgrpo.trainer.loop.checkpoint as ckpt
    from flowgrpo.trainer.loop.rundir import latest_checkpoint

    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    trainer = Trainer(tiny_config(tmp_path, "optim.max_steps=1"), executor=executor())
    trainer.train()
    good = latest_checkpoint(tmp_path)
    assert good.name == "checkpoint-1"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(ckpt.os, "replace", killed)
    trainer.step = 2
    with pytest.raises(KeyboardInterrupt):
        trainer._save()
    assert latest_checkpoint(tmp_path) == good
    assert not list(tmp_path.glob(".checkpoint-*")), "temporary directory removed"


def test_a_run_stops_on_an_alert_named_in_stop_on(tmp_path, monkeypatch):
    from flowgrpo.trainer.monitoring.health import EXIT_CODE_ALERT_STOP

    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: [PROSE] * 8))
    cfg = tiny_config(
        tmp_path, "optim.max_steps=10", "health.stop_on=[deadlock]", "rollout.max_resample_rounds=0"
    )
    result = Trainer(cfg, executor=executor()).train()
    assert result.exit_code == EXIT_CODE_ALERT_STOP
    assert result.steps == 3, "deadlock = 3 consecutive zero-variance steps"
    assert "deadlock" in result.stop_reason
    assert result.checkpoint is not None and result.checkpoint.name == "checkpoint-3"


def test_tensorboard_event_files_hold_the_same_scalars(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    Trainer(
        tiny_config(tmp_path, "optim.max_steps=2", "logging.report_to=[tensorboard]"),
        executor=executor(),
    ).train()
    events = EventAccumulator(str(tmp_path / "tensorboard" / "flowgrpo"))  # logging.project
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"reward", "entropy", "frac_reward_zero_std", "fallback_rate"} <= tags
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[1])
    logged = events.Scalars("validity_rate")[-1]
    assert logged.step == 2 and logged.value == pytest.approx(line["validity_rate"])


def test_every_metrics_line_has_the_same_keys_whether_it_updates_or_skips(tmp_path, monkeypatch):
    from flowgrpo.trainer.monitoring.metrics import METRICS_KEYS

    script = {0: mixed()(0), 1: mixed()(0), 2: [PROSE] * 8, 3: [PROSE] * 8}
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: script[g % 4]))
    cfg = tiny_config(
        tmp_path, "optim.max_steps=2", "health.guard=off", "rollout.max_resample_rounds=0"
    )
    Trainer(cfg, executor=executor()).train()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["skipped_update"] for m in lines] == [False, True]
    assert list(lines[0]) == list(lines[1])
    assert set(METRICS_KEYS) <= set(lines[0])
    assert lines[1]["clip_ratio/low"] is None and lines[0]["clip_ratio/low"] is not None
