"""The trainer applies algorithm.entropy_control: the loss gets the controller's coefficient each
step (recorded as entropy_coef), and a resumed run continues the coefficient it saved."""

import json

import pytest
from trainer_fakes import mixed, text_rollout

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
        (f"logging.output_dir={tmp_path}", "algorithm.entropy_control.delta=0.01",
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
    assert lines[0]["entropy_coef"] is None and lines[0]["temperature"] is None


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


def test_tied_groups_get_an_entropy_only_update_while_the_controller_acts(tmp_path, monkeypatch):
    seen, lines = _tied_run(tmp_path, monkeypatch, "algorithm.entropy_control.target=100")
    assert [line["frac_reward_zero_std"] for line in lines] == [1.0, 1.0, 1.0]
    # step 1: nothing measured yet (coef 0): no update; steps 2-3: entropy term alone
    assert seen == [(0.0, pytest.approx(0.01)), (0.0, pytest.approx(0.02))]
    assert [line["skipped_update"] for line in lines] == [True, False, False]
    assert lines[1]["grad_norm"] > 0 and lines[1]["loss"] < 0  # -coef * entropy


def test_tied_groups_get_no_update_with_the_controller_off(tmp_path, monkeypatch):
    seen, lines = _tied_run(tmp_path, monkeypatch)
    assert seen == [] and all(line["skipped_update"] for line in lines)


def test_the_temperature_lever_samples_and_scores_each_step_at_its_temperature(
    tmp_path, monkeypatch
):
    fake, sampled, scored = text_rollout(mixed()), [], []

    def spy_rollout(model, tokenizer, problems, group_size, temperature, *args, **kwargs):
        sampled.append(temperature)
        return fake(model, tokenizer, problems, group_size, temperature, *args, **kwargs)

    real = trainer_mod.policy_update

    def spy_update(model, optimizer, scheduler, batch, settings):
        scored.append(settings.temperature)
        return real(model, optimizer, scheduler, batch, settings)

    monkeypatch.setattr(step_mod, "generate_rollout", spy_rollout)
    monkeypatch.setattr(trainer_mod, "policy_update", spy_update)
    lever = ("algorithm.entropy_control.target=100", "algorithm.entropy_control.max_coef=0",
             "algorithm.entropy_control.temperature_delta=0.25",
             "algorithm.entropy_control.max_temperature=1.6", "logging.save_every=1")  # fmt: skip
    lines = train(tmp_path, *lever, "optim.max_steps=3")
    # tiny.yaml samples at 0.8; every step is below the target: +0.25 a step, capped at 1.6
    assert [line["temperature"] for line in lines] == pytest.approx([0.8, 1.05, 1.3])
    assert sampled == pytest.approx([0.8, 1.05, 1.3])
    assert scored == pytest.approx(sampled)  # log-probs at the temperature each step sampled at
    sampled.clear()
    train(tmp_path, *lever, "optim.max_steps=5", resume=True)
    assert sampled == pytest.approx([1.55, 1.6])  # resumed at the saved 1.55, then the cap


@pytest.mark.parametrize(("constrained", "warned"), [("off", True), ("grammar", False)])
def test_the_temperature_lever_warns_only_when_sampling_is_unconstrained(
    tmp_path, caplog, constrained, warned
):
    from flowgrpo.trainer.loop import setup

    cfg = load_config(
        "configs/tiny.yaml",
        (f"rollout.constrained={constrained}", "algorithm.entropy_control.target=0.3",
         "algorithm.entropy_control.temperature_delta=0.1"),
    )  # fmt: skip
    with caplog.at_level("WARNING", logger=setup.__name__):
        setup.prepare_run(cfg, tmp_path / "run", False, False, True)
    assert ("hotter samples write more prose" in caplog.text) == warned
