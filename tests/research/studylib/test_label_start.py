"""The per-label start of issue 40: ``flowgrpo search --by`` then ``flowgrpo sft``, cached."""

import json
from pathlib import Path

import pytest
from study_loader import load_study
from studylib import label_start
from studylib.label_start import LabelStart, build_label_start, search_files, start_folder

from flowgrpo.trainer.config import load_config

REPO = Path(__file__).parents[3]
CONFIG = "configs/known-optimum.yaml"
FEW = ("Programmer", "AnswerGenerate", "Programmer -> Review ? Revise : done")


def test_the_folder_changes_with_the_budget_the_world_and_the_keys(tmp_path):
    recipe = LabelStart(("difficulty",), 1000, 2)
    here = start_folder(tmp_path, recipe, "c.yaml", ["a=1"])
    assert here == start_folder(tmp_path, LabelStart(("difficulty",), 1000, 2), "c.yaml", ["a=1"])
    assert here != start_folder(tmp_path, LabelStart(("difficulty",), 2000, 2), "c.yaml", ["a=1"])
    assert here != start_folder(tmp_path, recipe, "c.yaml", ["a=2"])
    assert here != start_folder(tmp_path, LabelStart(("template",), 1000, 2), "c.yaml", ["a=1"])


def test_starts_that_differ_only_in_their_prompt_share_one_search(tmp_path):
    recipe = LabelStart(("difficulty",), 1000, 2)
    base = ["executor.options.seed=1"]
    plain = start_folder(tmp_path, recipe, "c.yaml", base)
    short = start_folder(tmp_path, recipe, "c.yaml", [*base, "prompt.examples=[]"])
    assert plain != short  # a start of its own: the SFT renders the prompt
    found = search_files(plain, recipe, "c.yaml", base)
    assert found == search_files(short, recipe, "c.yaml", [*base, "prompt.examples=[]"])
    assert found[0].parent.parent == tmp_path and found[0].name == "search.json"
    # what the search reads keeps it apart: the world, the budget, the labels
    assert found != search_files(plain, recipe, "c.yaml", ["executor.options.seed=2"])
    assert found != search_files(plain, LabelStart(("difficulty",), 2000, 2), "c.yaml", base)
    assert found != search_files(plain, LabelStart(("template",), 1000, 2), "c.yaml", base)


def test_a_start_built_before_searches_were_shared_keeps_its_own_search(tmp_path):
    recipe = LabelStart(("difficulty",), 1000, 2)
    folder = start_folder(tmp_path, recipe, "c.yaml", [])
    folder.mkdir()
    for name in ("search.json", "pairs.jsonl"):
        (folder / name).write_text("{}\n")
    assert search_files(folder, recipe, "c.yaml", []) == (
        folder / "search.json", folder / "pairs.jsonl")  # fmt: skip


def test_a_folder_built_from_another_version_of_the_config_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  lr: 0.0005\n")
    folder = tmp_path / "label-start-x"
    folder.mkdir()
    label_start.check_config_stamp(folder, str(config))  # the first use stamps it
    label_start.check_config_stamp(folder, str(config))  # the same content: reused
    config.write_text("sft:\n  lr: 0.001\n")
    with pytest.raises(SystemExit, match=r"another version of .*c\.yaml.*delete .*label-start-x"):
        label_start.check_config_stamp(folder, str(config))


def test_the_label_start_keeps_the_sft_rate_it_was_measured_with(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    folder = tmp_path / "ls"
    folder.mkdir()
    for name in ("search.json", "pairs.jsonl"):  # the search done: only the SFT runs
        (folder / name).write_text("{}\n")
    calls = []
    monkeypatch.setattr(label_start, "_flowgrpo", lambda args, what: calls.append(args))
    build_label_start(LabelStart(("difficulty",), 600, 3), CONFIG, [], folder)
    [sft] = calls
    sets = tuple(sft[i + 1] for i, a in enumerate(sft) if a == "--set")
    assert sft[0] == "sft"
    assert load_config(CONFIG).sft.lr == 1e-3  # the format start's rate, not the label start's
    assert load_config(CONFIG, sets).sft.lr == 5e-4 == label_start.SFT_LR


@pytest.mark.slow
def test_the_start_is_trained_on_each_labels_first_pick_and_built_once(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    recipe = LabelStart(("difficulty",), 600, 1, FEW)
    sets = ["executor.options.sandbox=in_process"]
    folder = tmp_path / "ls"
    adapter = build_label_start(recipe, "configs/tiny-known-optimum.yaml", sets, folder)
    assert (adapter / "adapter_config.json").exists()
    search_path, pairs_path = search_files(folder, recipe, "configs/tiny-known-optimum.yaml", sets)
    assert search_path.parent != folder  # shared by starts of other prompts
    search = json.loads(search_path.read_text())
    firsts = {label: table["top"][0]["workflow"] for label, table in search["labels"].items()}
    assert set(firsts) == {"easy", "medium", "hard"}
    pairs = [json.loads(line) for line in pairs_path.read_text().splitlines()]
    assert pairs and all(p["workflow"] == firsts[p["meta"]["difficulty"]] for p in pairs)
    stamp = search_path.stat().st_mtime_ns, (adapter / "adapter_config.json").stat()
    # a second call finds both parts and runs nothing
    monkeypatch.setattr(label_start.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert build_label_start(recipe, "configs/tiny-known-optimum.yaml", sets, folder) == adapter
    assert search_path.stat().st_mtime_ns == stamp[0]
    assert (adapter / "adapter_config.json").stat().st_mtime_ns == stamp[1].st_mtime_ns


def test_the_study_trains_from_the_label_start_with_the_labels_shown(tmp_path):
    script = load_study("learn_known_optimum")
    args = script.parse_args(["--smoke", "--label-start", "template", "--label-start",
                              "difficulty", "--runs-dir", str(tmp_path)])  # fmt: skip
    cfg = script.config_of(args, 0, None)
    assert list(cfg.prompt.meta_keys) == ["template", "difficulty"]
    folder = script.label_folder(args, None)
    assert Path(cfg.model.init_adapter) == folder / "start"
    assert folder.parent == tmp_path / "label-start"
    plain = script.config_of(script.parse_args(["--smoke", "--runs-dir", str(tmp_path)]), 0, None)
    assert plain.model.init_adapter is None and not plain.prompt.meta_keys


def test_a_failed_search_stops_with_the_reason_and_keeps_nothing_half_made(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    recipe = LabelStart(("difficulty",), 600, 1, FEW)
    folder, sets = tmp_path / "ls", ["optim.lr=-1"]
    with pytest.raises(SystemExit, match="label start's search failed"):
        build_label_start(recipe, "configs/tiny-known-optimum.yaml", sets, folder)
    search, pairs = search_files(folder, recipe, "configs/tiny-known-optimum.yaml", sets)
    assert not search.exists() and not pairs.exists() and not (folder / "start").exists()


def test_the_study_scores_the_search_table_itself_on_the_held_out_problems(tmp_path, monkeypatch):
    from studylib.choice import exact_reward

    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.operators.tasks import load_task

    monkeypatch.chdir(REPO)
    script = load_study("learn_known_optimum")
    argv = ["--smoke", "--label-start", "difficulty", "--runs-dir", str(tmp_path)]
    args = script.parse_args(argv)
    folder = script.label_folder(args, None)
    folder.mkdir(parents=True)
    picks = {"easy": "Programmer", "medium": "AnswerGenerate", "hard": FEW[2]}
    labels = {k: {"calls": 100, "top": [{"workflow": w}]} for k, w in picks.items()}
    (folder / "search.json").write_text(json.dumps({"by": ["difficulty"], "labels": labels}))
    got = script.label_table(args, None)
    cfg = script.config_of(args, None, None)
    sim = regret_settings(cfg, executor_limits(cfg.executor))
    problems = load_task(cfg.rollout.task, n=args.eval_n, seed=0, split="test")
    want = [exact_reward(sim, picks[p.meta["difficulty"]], sim.params.kind_of(p)) for p in problems]
    assert got == {"reward": pytest.approx(sum(want) / len(want)), "missing": 0, "calls": 300}


def test_set_rl_reaches_the_runs_but_not_the_label_start_they_share(tmp_path):
    script = load_study("learn_known_optimum")
    base = ["--smoke", "--label-start", "difficulty", "--runs-dir", str(tmp_path)]
    plain = script.parse_args(base)
    rl = script.parse_args([*base, "--set-rl", "rollout.sample_dtype=bfloat16"])
    both = script.parse_args([*base, "--set", "rollout.sample_dtype=bfloat16"])
    assert script.config_of(rl, 0, None).rollout.sample_dtype == "bfloat16"
    assert script.config_of(plain, 0, None).rollout.sample_dtype == "model"
    assert script.label_folder(rl, None) == script.label_folder(plain, None)
    assert script.label_folder(both, None) != script.label_folder(plain, None)
