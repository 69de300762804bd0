"""rollout.tie_temperature: when every group of a step's first rollout tied, the replacement
rounds sample at the tie temperature, and the groups they keep are scored at it (the response
to a deadlock, issue 20); a step with any informative group resamples at its own temperature."""

import json

import pytest
from trainer_fakes import PROSE, VALID, text_rollout

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop import trainer as trainer_mod
from flowgrpo.trainer.loop.trainer import Trainer

TIED = [VALID] * 8
SIGNAL = [VALID] * 4 + [PROSE] * 4


def _run(tmp_path, monkeypatch, groups, *extra):
    """One step of configs/tiny.yaml (2 problems, K=8, temperature 0.8) where group i of the
    step (first rollout, then replacement rounds) writes ``groups[i]``. Returns (temperatures
    sampled at per generate call, temperatures the update scored at, entropy-pass temperatures
    with the texts they scored, the metrics line)."""
    fake, sampled, scored, entropy = text_rollout(lambda g: groups[g]), [], [], []

    def spy_rollout(model, tokenizer, problems, group_size, temperature, *args, **kwargs):
        sampled.append(temperature)
        return fake(model, tokenizer, problems, group_size, temperature, *args, **kwargs)

    real_update, real_entropy = trainer_mod.policy_update, trainer_mod.rollout_entropy

    def spy_update(model, optimizer, scheduler, batch, settings):
        scored.append(settings.temperature)
        return real_update(model, optimizer, scheduler, batch, settings)

    def spy_entropy(model, rollout, settings):
        entropy.append((settings.temperature, rollout.texts))
        return real_entropy(model, rollout, settings)

    monkeypatch.setattr(step_mod, "generate_rollout", spy_rollout)
    monkeypatch.setattr(trainer_mod, "policy_update", spy_update)
    monkeypatch.setattr(trainer_mod, "rollout_entropy", spy_entropy)
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", "optim.max_steps=1", *extra),
    )
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    return sampled, scored, entropy, line


def test_a_step_whose_every_group_tied_resamples_and_scores_at_the_tie_temperature(
    tmp_path, monkeypatch
):
    sampled, scored, entropy, line = _run(
        tmp_path, monkeypatch, [TIED, TIED, SIGNAL, SIGNAL], "rollout.tie_temperature=1.6"
    )
    assert line["frac_reward_zero_std"] == 1.0
    assert sampled == pytest.approx([0.8, 1.6])  # the first rollout, then the hot round
    assert line["kept_groups"] == 2 and line["resample_temperature"] == pytest.approx(1.6)
    assert scored == pytest.approx([1.6])  # log-probs of the policy that drew the batch
    # the logged entropy: the first (tied) rollout at the step's own temperature
    assert entropy == [(pytest.approx(0.8), [VALID] * 16)]
    assert line["skipped_update"] is False


def test_a_step_with_an_informative_group_resamples_at_its_own_temperature(tmp_path, monkeypatch):
    sampled, scored, entropy, line = _run(
        tmp_path, monkeypatch, [TIED, SIGNAL, SIGNAL], "rollout.tie_temperature=1.6"
    )
    assert sampled == pytest.approx([0.8, 0.8])
    assert scored == pytest.approx([0.8]) and entropy == []
    assert line["kept_groups"] == 2 and line["resample_temperature"] is None


def test_off_the_tied_step_resamples_at_its_own_temperature(tmp_path, monkeypatch):
    sampled, scored, _, line = _run(tmp_path, monkeypatch, [TIED, TIED, SIGNAL, SIGNAL])
    assert sampled == pytest.approx([0.8, 0.8]) and scored == pytest.approx([0.8])
    assert line["resample_temperature"] is None


def test_a_hot_round_that_ties_again_trains_nothing_and_says_at_what_it_sampled(
    tmp_path, monkeypatch
):
    sampled, scored, _, line = _run(
        tmp_path, monkeypatch, [TIED] * 4, "rollout.tie_temperature=1.6"
    )
    assert sampled == pytest.approx([0.8, 1.6]) and scored == []
    assert line["kept_groups"] == 0 and line["skipped_update"] is True
    assert line["resample_temperature"] == pytest.approx(1.6)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("rollout.tie_temperature=0.5",), ">= rollout.temperature"),
        (("rollout.tie_temperature=.nan",), ">= rollout.temperature"),
        (("rollout.tie_temperature=1.6", "rollout.dynamic_sampling=false"), "dynamic_sampling"),
        (("rollout.tie_temperature=1.6", "rollout.max_resample_rounds=0"), "max_resample_rounds"),
    ],
)
def test_bad_tie_temperatures_name_the_field_and_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=r"rollout\.tie_temperature") as err:
        load_config("configs/tiny.yaml", overrides)
    assert message in str(err.value)
