"""rollout.tie_temperature: when every group of a step's first rollout tied, the replacement
rounds sample at the tie temperature, and the groups they keep are scored at it (the response
to a deadlock, issue 20); a step with any informative group resamples at its own temperature."""

import json
import re

import pytest
from trainer_fakes import FREE, PROSE, VALID, text_rollout

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop import trainer as trainer_mod
from flowgrpo.trainer.loop.trainer import Trainer

TIED = [VALID] * 8
SIGNAL = [VALID] * 4 + [PROSE] * 4


def _run(tmp_path, monkeypatch, groups, *extra, resume=False):
    """A run of configs/tiny.yaml (one step unless ``extra`` says; 2 problems, K=8, temperature
    0.8) where group i of the
    run (first rollouts, then replacement rounds) writes ``groups[i]``. Returns (temperatures
    sampled at per generate call, temperatures the update scored at, entropy-pass temperatures
    with the texts they scored, the first metrics line)."""
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
        (f"logging.output_dir={tmp_path}", "optim.max_steps=1", FREE, *extra),
    )
    Trainer(cfg, resume=resume, executor=ScriptedBackend(lambda request: "5")).train()
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


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (("rollout.tie_temperature_step=-0.1",), "rollout.tie_temperature_step"),
        (("rollout.max_tie_temperature=1.2",), "rollout.max_tie_temperature"),
    ],
)
def test_bad_tie_schedules_name_their_field(overrides, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        load_config("configs/tiny.yaml", ("rollout.tie_temperature=1.6", *overrides))


def _rollout_config(**kw):
    from flowgrpo.trainer.config import RolloutConfig

    return RolloutConfig(**kw)


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (None, 1.6),  # the first step
        ({"resample_temperature": None, "kept_groups": 2}, 1.6),  # an untied step
        ({"resample_temperature": 1.6, "kept_groups": 1}, 1.6),  # tied, the hot round found some
        ({"resample_temperature": 2.0, "kept_groups": 0}, 2.4),  # tied, and the hot round too
        ({"resample_temperature": 3.8, "kept_groups": 0}, 4.0),  # capped
        ({"resample_temperature": 3.0, "kept_groups": None}, 3.4),  # kept not logged: none kept
    ],
)
def test_the_tie_temperature_rises_only_while_hot_rounds_tie_too(last, expected):
    from flowgrpo.trainer.loop.state import next_tie_temperature

    r = _rollout_config(tie_temperature=1.6, tie_temperature_step=0.4, max_tie_temperature=4.0)
    assert next_tie_temperature(r, last) == pytest.approx(expected)
    assert next_tie_temperature(_rollout_config(), last) is None  # off
    fixed = _rollout_config(tie_temperature=1.6)  # step 0: fixed
    assert next_tie_temperature(fixed, {"resample_temperature": 1.6, "kept_groups": 0}) == 1.6


def test_a_run_that_keeps_tying_samples_each_hot_round_hotter(tmp_path, monkeypatch, caplog):
    """Three steps, every group (first rollouts and hot rounds alike) tied: the hot rounds
    sample at 1.6, 2.0, 2.4 (step 0.4); the first rollouts stay at 0.8. Unconstrained, the
    run warns that hot samples write prose (the Trainer's setup checks the combination)."""
    caplog.set_level("WARNING", logger="flowgrpo.trainer.loop.setup")
    sampled, scored, _, _ = _run(
        tmp_path, monkeypatch, [TIED] * 12, "rollout.tie_temperature=1.6",
        "rollout.tie_temperature_step=0.4", "optim.max_steps=3",
    )  # fmt: skip
    assert sampled == pytest.approx([0.8, 1.6, 0.8, 2.0, 0.8, 2.4]) and scored == []
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["resample_temperature"] for line in lines] == pytest.approx([1.6, 2.0, 2.4])
    assert "hot samples write more prose" in caplog.text


def test_a_resumed_run_continues_the_tie_temperature_it_reached(tmp_path, monkeypatch):
    hot = ("rollout.tie_temperature=1.6", "rollout.tie_temperature_step=0.4",
           "logging.save_every=1")  # fmt: skip
    sampled, _, _, _ = _run(tmp_path, monkeypatch, [TIED] * 8, *hot, "optim.max_steps=2")
    assert sampled == pytest.approx([0.8, 1.6, 0.8, 2.0])
    monkeypatch.undo()
    sampled, _, _, _ = _run(
        tmp_path, monkeypatch, [TIED] * 4, *hot, "optim.max_steps=3", resume=True
    )
    assert sampled == pytest.approx([0.8, 2.4])  # step 3 goes on from step 2's 2.0


@pytest.mark.parametrize(("constrained", "warned"), [("off", True), ("grammar", False)])
def test_the_tie_temperature_warns_only_when_sampling_is_unconstrained(caplog, constrained, warned):
    from flowgrpo.trainer.loop import setup

    cfg = load_config(
        "configs/tiny.yaml", (f"rollout.constrained={constrained}", "rollout.tie_temperature=1.6")
    )
    with caplog.at_level("WARNING", logger=setup.__name__):
        assert setup.warn_hot_unconstrained(cfg) == warned
    assert ("hot samples write more prose" in caplog.text) == warned


def test_resample_same_redraws_the_tied_problem_hot_beside_an_informative_group(
    tmp_path, monkeypatch
):
    """rollout.resample=same (issue 40's screening option): group 0 tied, group 1 did not; the
    one replacement round samples group 0's own problem (not a fresh one) at the tie
    temperature, and the kept groups train at it."""
    fake, calls = text_rollout(lambda g: [TIED, SIGNAL, SIGNAL][g]), []

    def spy_rollout(model, tokenizer, problems, group_size, temperature, *args, **kwargs):
        calls.append(([p.id for p in problems], temperature))
        return fake(model, tokenizer, problems, group_size, temperature, *args, **kwargs)

    monkeypatch.setattr(step_mod, "generate_rollout", spy_rollout)
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", "optim.max_steps=1", FREE,
         "rollout.tie_temperature=1.6", "rollout.resample=same"),
    )  # fmt: skip
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    (first, t0), (again, t1) = calls
    assert len(first) == 2 and again == first[:1]  # the tied problem itself
    assert (t0, t1) == pytest.approx((0.8, 1.6))
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert line["kept_groups"] == 2 and line["resample_temperature"] == pytest.approx(1.6)


def test_resample_must_name_a_known_kind():
    with pytest.raises(ConfigError, match=r"rollout\.resample: .*fresh, same"):
        load_config("configs/tiny.yaml", ("rollout.resample=again",))


def test_resample_same_with_no_tied_group_runs_no_round_and_logs_no_temperature(
    tmp_path, monkeypatch
):
    sampled, _, _, line = _run(
        tmp_path, monkeypatch, [SIGNAL, SIGNAL], "rollout.tie_temperature=1.6",
        "rollout.resample=same",
    )  # fmt: skip
    assert sampled == pytest.approx([0.8])  # the first rollout only
    assert line["kept_groups"] == 2 and line["resample_temperature"] is None
