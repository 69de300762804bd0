"""The known-optimum learning script in smoke mode (tiny model, 2 steps, 2 seeds)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from study_loader import load_study

REPO = Path(__file__).parents[2]


@pytest.mark.slow
def test_worlds_each_get_their_runs_start_and_mode(tmp_path):
    worlds = [REPO / "configs" / "worlds" / f"{w}.yaml" for w in ("cheap", "answer-ensembles")]
    cmd = [sys.executable, str(REPO / "research" / "learn_known_optimum.py"), "--smoke",
           "--seeds", "0", "--tag", "t", "--no-write", "--out", str(tmp_path),
           "--runs-dir", str(tmp_path / "runs"), "--threads", "1",
           # the group shape configs/known-optimum.yaml adopted (issue 20), on the tiny policy;
           # unconstrained: the grammar on a character-level tokenizer costs minutes here, and
           # the start and mode of each world are what this test checks
           "--set", "rollout.executions=2",
           "--set", "rollout.problems_per_step=4", "--set", "rollout.num_generations=4",
           "--set", "rollout.allow_small_groups=true"]  # fmt: skip
    for world in worlds:
        cmd += ["--world", str(world)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "known_optimum-t.json").read_text())
    assert list(data["worlds"]) == ["cheap", "answer-ensembles"]
    cheap, answer = data["worlds"]["cheap"], data["worlds"]["answer-ensembles"]
    assert cheap["start"]["best"] == "Programmer"  # the cost weight of the world file is used
    assert answer["start"]["best"].startswith("[AnswerGenerate, AnswerGenerate, AnswerGenerate]")
    for name in data["worlds"]:
        assert (tmp_path / "runs" / "t" / name / "seed0" / "metrics.jsonl").exists()
        assert [r["torch_threads"] for r in data["worlds"][name]["runs"]] == [1]  # --threads
        (cpu,) = [r["cpu"] for r in data["worlds"][name]["runs"]]  # where the minutes were read
        assert cpu["name"] and isinstance(cpu["bf16_units"], bool)
    assert not (tmp_path / "known_optimum.md").exists()  # --no-write


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--set", "rewards.no_such_key=1"], "unknown key rewards.no_such_key"),
        (["--world", "configs/worlds/no-such-world.yaml"], "does not exist"),
    ],
)
def test_bad_override_or_world_stops_before_training_with_the_reason(tmp_path, extra, reason):
    cmd = [sys.executable, str(REPO / "research" / "learn_known_optimum.py"), "--smoke",
           "--seeds", "0", "--no-write", "--out", str(tmp_path),
           "--runs-dir", str(tmp_path / "runs"),
           "--world", "configs/worlds/cheap.yaml", *extra]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1
    assert reason in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing trained


def _resume_cmd(tmp_path) -> list[str]:
    return [sys.executable, str(REPO / "research" / "learn_known_optimum.py"), "--smoke",
            "--seeds", "0", "--tag", "t", "--no-write", "--resume", "--out", str(tmp_path),
            "--runs-dir", str(tmp_path / "runs"),
            "--world", "configs/worlds/cheap.yaml"]  # fmt: skip


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A resumed study of cheap, seed 0, whose file already holds that seed and a world not run
    now (a study interrupted before its later worlds): (its folder, its output, the kept rows)."""
    out = tmp_path_factory.mktemp("resume")
    kept = {"seed": 0, "world": "cheap", "eval": {"sim/regret": 0.123}, "marker": "kept"}
    other = {"start": {"sim/valid_regret": 0.2}, "runs": [{"seed": 3, "marker": "other"}]}
    saved = {"tag": "t", "overrides": [],
             "worlds": {"default": other, "cheap": {"start": {}, "runs": [kept]}}}  # fmt: skip
    (out / "known_optimum-t.json").write_text(json.dumps(saved))
    done = subprocess.run(_resume_cmd(out), capture_output=True, text=True, timeout=300,
                          cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout, {"cheap": kept, "default": other}


def test_resume_keeps_the_seeds_already_saved_and_trains_none_of_them(resumed):
    out, stdout, saved = resumed
    assert "--resume: seeds [0] kept" in stdout
    data = json.loads((out / "known_optimum-t.json").read_text())
    assert data["worlds"]["cheap"]["runs"] == [saved["cheap"]]
    assert data["worlds"]["cheap"]["start"]["validity_rate"] >= 0  # the start is re-evaluated
    assert not (out / "runs").exists()  # seed 0 was not trained again


def test_resume_keeps_the_worlds_not_run_now_in_the_file(resumed):
    out, _, saved = resumed
    data = json.loads((out / "known_optimum-t.json").read_text())
    assert data["worlds"]["default"] == saved["default"]


@pytest.mark.parametrize("key", ["overrides", "rl_overrides"])
def test_resume_refuses_a_file_made_with_other_overrides(tmp_path, key):
    saved = {"tag": "t", key: ["optim.lr=1e-4"], "worlds": {"cheap": {"runs": []}}}
    saved.setdefault("overrides", [])
    (tmp_path / "known_optimum-t.json").write_text(json.dumps(saved))
    done = subprocess.run(_resume_cmd(tmp_path), capture_output=True, text=True, timeout=120,
                          cwd=REPO)  # fmt: skip
    assert done.returncode == 1
    assert "--resume" in done.stderr and "optim.lr=1e-4" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads((tmp_path / "known_optimum-t.json").read_text()) == saved  # untouched


def test_alert_steps_keep_a_faster_step_apart_from_a_collapse_into_prose():
    script = _script()
    history = [
        {"step": 1, "alerts": [{"check": "step_time_collapse"}]},
        {"step": 2, "alerts": [{"check": "update_collapse"}, {"check": "entropy_low"}]},
        {"step": 3, "alerts": [{"check": "fallback_high"}], "rollback": True},
    ]
    fired = script.alert_steps(history)
    assert fired["collapse"] == [2, 3]
    assert fired["step_time_collapse"] == [1]
    assert fired["entropy_low"] == [2] and fired["deadlock"] == []
    assert fired["rollback"] == [3]


def _script():
    return load_study("learn_known_optimum")


def test_the_cached_start_key_follows_the_adapter_bytes_not_its_folder_name(tmp_path):
    # a start re-made in the same folder must not reuse the old start's held-out numbers
    script = _script()
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"first")
    args = script.parse_args(["--seeds", "0", "--set", f"model.init_adapter={adapter}"])
    first = script.start_key(args, None)
    assert first == script.start_key(args, None)
    (adapter / "adapter_model.safetensors").write_bytes(b"second")
    assert script.start_key(args, None) != first
    assert script.adapter_digest(tmp_path / "missing") is None


def test_the_cached_start_key_follows_the_config_content(tmp_path):
    script = _script()
    base = script.parse_args(["--seeds", "0"])
    hotter = script.parse_args(["--seeds", "0", "--set", "rollout.temperature=1.0"])
    assert script.start_key(base, None) != script.start_key(hotter, None)


def test_a_batch_shape_ablation_reuses_the_start_a_sampler_change_does_not(tmp_path):
    # the held-out eval of the start never reads the training batch's shape: 4 problems x 4
    # completions x 32 executions evaluates the same start as 2 x 8 x 8
    script = _script()
    base = script.parse_args(["--seeds", "0"])
    shape = ["rollout.problems_per_step=4", "rollout.num_generations=4",
             "rollout.allow_small_groups=true", "rollout.executions=32"]  # fmt: skip
    reshaped = script.parse_args(["--seeds", "0", *(a for s in shape for a in ("--set", s))])
    assert script.start_key(base, None) == script.start_key(reshaped, None)
    longer = script.parse_args(["--seeds", "0", "--set", "rollout.max_new_tokens=64"])
    assert script.start_key(base, None) != script.start_key(longer, None)


def test_an_interrupted_seed_stops_the_study_and_is_not_recorded(tmp_path, monkeypatch):
    """Ctrl-C / SIGTERM ends the training run early (exit 130/143, a checkpoint at the step it
    reached): the study must stop there, not evaluate the partial run as a finished seed."""
    from flowgrpo.trainer.loop import trainer as trainer_mod
    from flowgrpo.trainer.loop.trainer import TrainResult

    script = _script()
    evaluated = []

    class Interrupted:
        def __init__(self, cfg, **kwargs):
            self.cfg = cfg

        def train(self):
            return TrainResult(1, Path(self.cfg.logging.output_dir), None, exit_code=143)

    monkeypatch.setattr(trainer_mod, "Trainer", Interrupted)
    monkeypatch.setattr(script, "held_out", lambda *a, **k: evaluated.append(a) or {})
    args = script.parse_args(["--smoke", "--out", str(tmp_path), "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        script.train_and_eval(args, 0, (None, None))
    assert "interrupted at step 1 of 2" in str(stop.value) and "--resume" in str(stop.value)
    assert evaluated == []


def test_world_takes_several_files_at_once_or_repeated():
    """`--world configs/worlds/*.yaml` (a shell glob) and repeated options give the same list."""
    parse = _script().parse_args
    at_once = parse(["--world", "a.yaml", "b.yaml", "--world", "c.yaml"]).worlds
    assert at_once == ["a.yaml", "b.yaml", "c.yaml"]
    assert parse(["--world", "a.yaml", "--world", "b.yaml"]).worlds == ["a.yaml", "b.yaml"]
    assert parse([]).worlds == []


@pytest.mark.slow
def test_smoke_run_trains_the_seeds_in_worker_processes_and_writes_its_section(tmp_path):
    # one smoke study (2 seeds, 2 steps each) with --jobs 2: the seeds train in worker processes
    # sharing the cores; the sequential path runs in the --world test (with --threads 1)
    from studylib.pool import threads_per_job

    cmd = [sys.executable, str(REPO / "research" / "learn_known_optimum.py"), "--smoke",
           "--jobs", "2", "--out", str(tmp_path), "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "known_optimum.json").read_text())
    assert [r["seed"] for r in data["runs"]] == [0, 1]  # sorted, whichever finished first
    for run in data["runs"]:
        assert run["steps"] == 2 and len(run["series"]["sim/regret"]) == 2
        assert Path(run["checkpoint"]).name == "checkpoint-2"
        assert 0 <= run["eval"]["sim/regret"] <= 1.5  # held-out, from the simulated executor
        assert run["torch_threads"] == threads_per_job(2)
    assert 0 <= data["start"]["validity_rate"] <= 1
    text = (tmp_path / "known_optimum.md").read_text()  # its own file; no doc edited in place
    assert not (tmp_path / "RESULTS.md").exists()
    assert "| start |" in text and "| **mean ± 95% CI** |" in text
    assert "SIMULATED" in text
    assert (tmp_path / "figures" / "known_optimum.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("option", ["--jobs", "--threads"])
def test_a_count_below_one_is_refused_before_anything_runs(tmp_path, option):
    cmd = [sys.executable, str(REPO / "research" / "learn_known_optimum.py"), "--smoke",
           option, "0", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and f"{option} must be >= 1, got 0" in done.stderr
    assert not any(tmp_path.iterdir())


def test_a_resumed_save_keeps_what_another_study_of_the_tag_saved_since(tmp_path):
    # two studies of one tag, each running its own world: each save takes the other's worlds
    # from the file as it is now, not as it was when this study started
    script = _script()
    args = script.parse_args(["--seeds", "0", "--tag", "t", "--resume", "--out", str(tmp_path)])
    path = script.json_path(args)

    def file_with(runs):
        head = {"tag": "t", "overrides": [], "rl_overrides": []}
        path.write_text(json.dumps({**head, "worlds": {"a": {"start": {}, "runs": runs}}}))

    file_with([])
    results = script.resumed(args)  # read at this study's start: world a, no seeds yet
    file_with([{"seed": 0}])  # the other study saved a seed of world a since
    results["b"] = {"start": {}, "runs": [{"seed": 1}]}
    script.save(args, results, owned=frozenset({"b"}))
    worlds = json.loads(path.read_text())["worlds"]
    assert worlds["a"]["runs"] == [{"seed": 0}] and worlds["b"]["runs"] == [{"seed": 1}]
    # without --resume the file is this study's alone, as before
    fresh = script.parse_args(["--seeds", "0", "--tag", "t", "--out", str(tmp_path)])
    script.save(fresh, {"b": results["b"]}, owned=frozenset({"b"}))
    assert list(json.loads(path.read_text())["worlds"]) == ["b"]


def _recorded_world():
    """A world of a committed study (its start and its seed's run), as a study saves them."""
    data = json.loads((REPO / "research/records/ablations/known_optimum-adaptive-base.json")
                      .read_text())  # fmt: skip
    return data["worlds"]["adaptive-review"]


@pytest.mark.parametrize(("tag", "stem"), [("t", "known_optimum-t"), ("", "known_optimum")])
def test_a_studys_section_and_figure_are_named_as_its_json(tmp_path, monkeypatch, tag, stem):
    """A tagged study wrote known_optimum.md and figures/known_optimum.png (and a JSON over
    the untagged record), replacing the record of the untagged study."""
    script, world = _script(), _recorded_world()
    runs = [{**world["runs"][0], "world": None}]
    monkeypatch.setattr(script, "base_model", lambda cfg: None)
    monkeypatch.setattr(script, "cached_start", lambda args, base, w: world["start"])
    monkeypatch.setattr(script, "trained", lambda args, plan, base: iter(runs))
    (tmp_path / "known_optimum.md").write_text("the untagged record")
    argv = ["--seeds", str(runs[0]["seed"]), "--out", str(tmp_path), "--tag", tag]
    script.main(argv)
    text = (tmp_path / f"{stem}.md").read_text()
    assert f"numbers: `{stem}.json`" in text and f"(figures/{stem}.png)" in text
    assert (tmp_path / "figures" / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / f"{stem}.json").read_text())
    assert [r["seed"] for r in saved["worlds"]["config"]["runs"]] == [runs[0]["seed"]]
    if tag:
        assert (tmp_path / "known_optimum.md").read_text() == "the untagged record"
        assert not (tmp_path / "known_optimum.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--steps", "0"], "--steps must be >= 1, got 0"),
     (["--eval-n", "0"], "--eval-n must be >= 1, got 0"),
     (["--seeds", "0", "0"], "--seeds names a seed twice")],
)  # fmt: skip
def test_counts_and_seeds_are_checked_before_anything_runs(capsys, argv, message):
    with pytest.raises(SystemExit):
        _script().parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_damaged_resume_file_is_one_line(tmp_path):
    (tmp_path / "known_optimum-t.json").write_text('{"worlds": {"cheap": ')  # cut mid-save
    args = _script().parse_args(["--out", str(tmp_path), "--tag", "t", "--resume"])
    with pytest.raises(SystemExit, match=r"does not read as JSON .*restore it, or drop --resume"):
        _script().resumed(args)


def test_a_users_file_where_the_figure_goes_ends_the_study_before_training(
    tmp_path, monkeypatch, write_png
):
    script = _script()
    monkeypatch.setattr(script, "base_model", lambda cfg: pytest.fail("a model was loaded"))
    (tmp_path / "figures").mkdir()
    write_png(tmp_path / "figures" / "known_optimum-t.png")
    with pytest.raises(SystemExit, match=r"known_optimum-t\.png exists and carries no"):
        script.main(["--seeds", "0", "--out", str(tmp_path), "--tag", "t"])
