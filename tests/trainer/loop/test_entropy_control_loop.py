"""The trainer applies algorithm.entropy_control: the loss gets the controller's coefficient each
step (recorded as entropy_coef), and a resumed run continues the coefficient it saved."""

import json

import pytest
from trainer_fakes import FREE, mixed, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop import trainer as trainer_mod
from flowgrpo.trainer.loop.trainer import Trainer


@pytest.fixture
def coefs(monkeypatch):
    """The entropy coefficient each policy_update received."""
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))
    seen, real = [], trainer_mod.policy_update

    def spy(model, optimizer, scheduler, batch, settings):
        seen.append(settings.loss.entropy_coef)
        return real(model, optimizer, scheduler, batch, settings)

    monkeypatch.setattr(trainer_mod, "policy_update", spy)
    return seen


def train(tmp_path, *extra, resume=False):
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", FREE, "algorithm.entropy_control.delta=0.01",
         "algorithm.entropy_control.max_coef=0.025", *extra),
    )  # fmt: skip
    Trainer(cfg, resume=resume, executor=ScriptedBackend(lambda request: "5")).train()
    return [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_below_the_target_the_coefficient_rises_step_by_step_to_its_cap(tmp_path, coefs):
    # a target far above any entropy: every step is below it
    lines = train(tmp_path, "algorithm.entropy_control.target=100", "optim.max_steps=4")
    assert coefs == pytest.approx([0.0, 0.01, 0.02, 0.025])
    assert [line["entropy_coef"] for line in lines] == pytest.approx(coefs)


def test_above_the_target_no_bonus_is_applied(tmp_path, coefs):
    lines = train(
        tmp_path, "algorithm.entropy_control.target=1e-6", "algorithm.loss.entropy_coef=0.02",
        "optim.max_steps=3",
    )  # fmt: skip
    assert coefs == [0.02, 0.0, 0.0]  # first step: nothing measured yet, the configured value
    assert all(line["entropy"] > 1e-6 for line in lines)


def test_off_passes_the_configured_coefficient_and_leaves_the_keys_null(tmp_path, coefs):
    lines = train(tmp_path, "algorithm.loss.entropy_coef=0.003", "optim.max_steps=2")
    assert coefs == [0.003, 0.003]
    assert lines[0]["entropy_coef"] is None and "temperature" not in lines[0]


def test_a_resumed_run_continues_the_saved_coefficient(tmp_path, coefs):
    on = ("algorithm.entropy_control.target=100", "logging.save_every=1")
    train(tmp_path, *on, "optim.max_steps=2")
    coefs.clear()
    train(tmp_path, *on, "optim.max_steps=4", resume=True)
    assert coefs == pytest.approx([0.02, 0.025])


def _tied_run(tmp_path, monkeypatch, *extra):
    from trainer_fakes import VALID

    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: [VALID] * 8))
    seen, real = [], trainer_mod.policy_update

    def spy(model, optimizer, scheduler, batch, settings):
        seen.append((batch.adv_N.abs().max().item(), settings.loss.entropy_coef))
        return real(model, optimizer, scheduler, batch, settings)

    monkeypatch.setattr(trainer_mod, "policy_update", spy)
    lines = train(tmp_path, "optim.max_steps=3", *extra)
    return seen, lines


@pytest.mark.parametrize("extra", [(), ("algorithm.entropy_control.target=100",)])
def test_tied_groups_get_no_update_whether_or_not_the_controller_acts(tmp_path, monkeypatch, extra):
    """No reward signal, no update: the entropy-only update on tied steps was screened and not
    adopted (docs/RESULTS.md), so a tied step trains nothing, as dynamic sampling intends."""
    seen, lines = _tied_run(tmp_path, monkeypatch, *extra)
    assert [line["frac_reward_zero_std"] for line in lines] == [1.0, 1.0, 1.0]
    assert seen == [] and all(line["skipped_update"] for line in lines)
    if extra:  # the controller still moves (the entropy is below its target), applying nothing
        assert [line["entropy_coef"] for line in lines] == [0.0, 0.0, 0.0]
