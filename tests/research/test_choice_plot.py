"""research/choice_plot.py: a study's points per world (the policy at the start's search calls
plus its RL calls), seeds merged over files, and a figure with a search curve scored exactly."""

from __future__ import annotations

import json

import pytest
from study_loader import load_study


def _run(seed: int, policy: float, rl_calls: int, search_reward: float) -> dict:
    search = {"workflow": "Programmer", "calls": rl_calls, "reward": search_reward}
    choice = {"policy_reward": policy, "single_reward": 0.80, "oracle_reward": 0.85,
              "search": search}  # fmt: skip
    return {"seed": seed, "eval": {"choice": choice}}


def _study(path, runs, table=True) -> str:
    table_ = {"reward": 0.84, "missing": 0, "calls": 4_500_000}
    start = {"choice": {"table": table_}} if table else {}
    world = {"start": start, "runs": runs}
    path.write_text(json.dumps({"worlds": {"cheap": world}}))
    return str(path)


def test_the_policy_is_placed_at_the_start_search_plus_its_own_calls(tmp_path):
    script = load_study("choice_plot")
    worlds = script.merged_worlds([_study(tmp_path / "a.json", [_run(0, 0.83, 60_000, 0.79)])])
    found = script.points(worlds["cheap"])
    assert found["policy"] == [(4_560_000, 0.83)]
    assert found["search_same"] == [(60_000, 0.79)]
    assert found["table"] == (4_500_000, 0.84)
    assert (found["single"], found["oracle"]) == (0.80, 0.85)


def test_seeds_of_one_world_are_merged_over_files_and_a_rerun_seed_counts_once(tmp_path):
    script = load_study("choice_plot")
    first = _study(tmp_path / "a.json", [_run(0, 0.81, 10, 0.7), _run(1, 0.82, 20, 0.7)])
    second = _study(tmp_path / "b.json", [_run(1, 0.90, 30, 0.7), _run(2, 0.83, 40, 0.7)])
    found = script.points(script.merged_worlds([first, second])["cheap"])
    assert [reward for _, reward in found["policy"]] == [0.81, 0.90, 0.83]


def test_without_a_recorded_table_the_policy_is_at_its_rl_calls_only(tmp_path):
    script = load_study("choice_plot")
    worlds = script.merged_worlds([_study(tmp_path / "a.json", [_run(0, 0.83, 60_000, 0.79)],
                                          table=False)])  # fmt: skip
    found = script.points(worlds["cheap"])
    assert found["policy"] == [(60_000, 0.83)] and found["table"] is None
    given = script.points(worlds["cheap"], start_calls=1_000_000)  # --start-calls
    assert given["policy"] == [(1_060_000, 0.83)]


def test_a_study_without_choice_reports_is_refused(tmp_path):
    script = load_study("choice_plot")
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"worlds": {"cheap": {"start": None, "runs": [
        {"seed": 0, "eval": {}}]}}}))  # fmt: skip
    with pytest.raises(SystemExit, match="no run with a choice report"):
        script.points(script.merged_worlds([str(path)])["cheap"])


def test_the_figure_and_the_curve_are_written(tmp_path):
    script = load_study("choice_plot")
    study = _study(tmp_path / "a.json", [_run(0, 0.83, 60_000, 0.79)])
    script.main([study, "--budgets", "3000", "--search-seeds", "0", "--eval-n", "8",
                 "--out", str(tmp_path / "out")])  # fmt: skip
    assert (tmp_path / "out" / "figures" / "choice-cheap.png").stat().st_size > 0
    curves = json.loads((tmp_path / "out" / "choice_curves.json").read_text())
    (point,) = curves["cheap"]["curve"]
    assert point["budget"] == 3000 and len(point["rewards"]) == 1
    assert 0.0 < point["rewards"][0] <= 2.0  # an exact expected reward of a real pick


@pytest.mark.parametrize(
    ("text", "message"),
    [('{"start": {}, "runs": []}', "no worlds in it"), ("[1, 2]", "no worlds in it"),
     ('{"worlds": ', "a.json: ")],
)  # fmt: skip
def test_a_file_that_is_not_a_study_ends_the_script_and_writes_nothing(tmp_path, text, message):
    """Another JSON (a one-world record without worlds, a list, a cut file) was read as no
    world: the script wrote {} over choice_curves.json and said nothing."""
    script = load_study("choice_plot")
    (tmp_path / "a.json").write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    (out / "choice_curves.json").write_text('{"kept": 1}')
    with pytest.raises(SystemExit, match=message):
        script.main([str(tmp_path / "a.json"), "--out", str(out)])
    assert (out / "choice_curves.json").read_text() == '{"kept": 1}'


def test_a_users_file_under_a_figures_name_is_refused_before_any_search(
    tmp_path, write_png, monkeypatch
):
    script = load_study("choice_plot")
    monkeypatch.setattr(script, "search_curve", lambda *a: pytest.fail("searched"))
    study = _study(tmp_path / "a.json", [_run(0, 0.83, 60_000, 0.79)])
    (tmp_path / "out" / "figures").mkdir(parents=True)
    mine = write_png(tmp_path / "out" / "figures" / "choice-cheap.png")
    with pytest.raises(SystemExit, match=r"choice-cheap\.png exists and carries no 'flowgrpo' PNG"):
        script.main([study, "--out", str(tmp_path / "out")])
    assert b"tEXt" not in mine.read_bytes()
