"""rollout.spare_problems: the first rollout's generate call samples spare problems, unscored,
and the first replacement round at the step's temperature takes its groups from them; the
trained batch is the one a separate replacement call would have drawn."""

import json

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


def _run(tmp_path, monkeypatch, groups, *extra):
    """One step of configs/tiny.yaml (2 problems x K=8, temperature 0.8) in which the i-th group
    sampled in the run writes ``groups[i]``. Returns (per generate call: problem ids and
    temperature; problem ids scored per scoring call; problem ids and advantages trained; the
    metrics line)."""
    fake, calls, scored, trained = text_rollout(lambda g: groups[g]), [], [], []

    def spy_rollout(model, tokenizer, problems, group_size, temperature, *args, **kwargs):
        calls.append(([p.id for p in problems], temperature))
        return fake(model, tokenizer, problems, group_size, temperature, *args, **kwargs)

    real_prepare, real_update = step_mod.prepare_samples, trainer_mod.policy_update

    def spy_prepare(problems, *args, **kwargs):
        scored.append([p.id for p in problems])
        return real_prepare(problems, *args, **kwargs)

    def spy_update(model, optimizer, scheduler, batch, settings):
        trained.append(([p.id for p in batch.rollout.problems], batch.adv_N.tolist()))
        return real_update(model, optimizer, scheduler, batch, settings)

    monkeypatch.setattr(step_mod, "generate_rollout", spy_rollout)
    monkeypatch.setattr(step_mod, "prepare_samples", spy_prepare)
    monkeypatch.setattr(trainer_mod, "policy_update", spy_update)
    out = tmp_path / "run"
    cfg = load_config(
        "configs/tiny.yaml", (f"logging.output_dir={out}", "optim.max_steps=1", FREE, *extra)
    )
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return calls, scored, trained, line


def test_a_tied_group_is_replaced_by_a_spare_without_a_second_generate_call(tmp_path, monkeypatch):
    calls, scored, trained, line = _run(
        tmp_path, monkeypatch, [TIED, SIGNAL, SIGNAL, TIED], "rollout.spare_problems=2"
    )
    assert len(calls) == 1 and len(calls[0][0]) == 4  # 2 problems + 2 spares, one call
    first, spares = calls[0][0][:2], calls[0][0][2:]
    assert scored == [first, spares[:1]]  # the second spare is never executed
    assert trained[0][0] == [first[1], spares[0]]
    assert line["num_completions"] == 16  # the first rollout's metrics: its own 2 groups
    assert line["kept_groups"] == 2 and line["resampled_groups"] == 1


def test_the_trained_batch_is_the_one_a_separate_round_draws(tmp_path, monkeypatch):
    """The problems are drawn in the same order either way, and the spare was sampled by the
    same policy at the same temperature: the same problems, texts and advantages are trained."""
    groups = [TIED, SIGNAL, SIGNAL]
    _, _, with_spare, line_s = _run(tmp_path / "a", monkeypatch, groups, "rollout.spare_problems=1")
    monkeypatch.undo()  # the second run's spies wrap the real functions, not the first's spies
    calls, _, without, line = _run(tmp_path / "b", monkeypatch, groups)
    assert len(calls) == 2  # without spares: a replacement call of its own
    assert with_spare == without and with_spare[0][1]  # same batch, non-zero advantages
    assert line_s["loss"] == pytest.approx(line["loss"])


def test_more_tied_groups_than_spares_sample_the_rest(tmp_path, monkeypatch):
    calls, _, trained, line = _run(
        tmp_path, monkeypatch, [TIED, TIED, SIGNAL, SIGNAL], "rollout.spare_problems=1"
    )
    assert [len(ids) for ids, _ in calls] == [3, 1]
    assert [t for _, t in calls] == pytest.approx([0.8, 0.8])
    assert trained[0][0] == [calls[0][0][2], calls[1][0][0]]
    assert line["kept_groups"] == 2 and line["resampled_groups"] == 2


def test_spares_do_not_serve_a_hot_round(tmp_path, monkeypatch):
    """Every group tied: the round samples at the tie temperature, which the spares were not."""
    calls, _, trained, line = _run(
        tmp_path, monkeypatch, [TIED, TIED, SIGNAL, SIGNAL, SIGNAL, SIGNAL],
        "rollout.spare_problems=2", "rollout.tie_temperature=1.6",
    )  # fmt: skip
    assert [t for _, t in calls] == pytest.approx([0.8, 1.6])
    assert trained[0][0] == calls[1][0]  # the hot round's own problems
    assert line["resample_temperature"] == pytest.approx(1.6)


def test_no_tied_group_leaves_the_spares_unscored(tmp_path, monkeypatch):
    calls, scored, _, line = _run(
        tmp_path, monkeypatch, [SIGNAL, SIGNAL, TIED], "rollout.spare_problems=1"
    )
    assert len(calls) == 1 and scored == [calls[0][0][:2]]
    assert line["resampled_groups"] == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("rollout.spare_problems=-1",), "integer >= 0"),
        (("rollout.spare_problems=2", "rollout.dynamic_sampling=false"), "dynamic_sampling"),
        (("rollout.spare_problems=2", "rollout.max_resample_rounds=0"), "max_resample_rounds"),
    ],
)
def test_bad_spare_settings_name_the_field_and_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=rf"rollout\.spare_problems.*{message}"):
        load_config("configs/tiny.yaml", overrides)
