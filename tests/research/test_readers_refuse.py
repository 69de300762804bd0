"""The study readers given a wrong or empty input say so in one line and write nothing (they
crashed on an empty plan or samples file, or printed a table over nothing with exit 0)."""

from __future__ import annotations

import json
import sys

import pytest
from study_loader import load_study


def _empty_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text("")
    return run


@pytest.mark.parametrize("script", ["rollout_clustering", "budget_revalidate"])
def test_an_empty_samples_file_is_an_error_not_a_table(tmp_path, capsys, script):
    assert load_study(script).main([str(_empty_run(tmp_path))]) == 2
    out = capsys.readouterr().out
    assert "error:" in out and "| run |" not in out


def test_guard_replay_names_a_file_that_is_not_a_collapse_study(tmp_path):
    path = tmp_path / "known_optimum.json"
    path.write_text(json.dumps({"start": {}, "runs": []}))
    with pytest.raises(SystemExit, match="not a collapse study's runs"):
        load_study("guard_replay").study_table(path, [0.001])


def test_kind_trajectory_names_a_folder_that_is_not_a_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["kind_trajectory.py", str(_empty_run(tmp_path))])
    with pytest.raises(SystemExit):
        load_study("kind_trajectory").main()
    assert "config.yaml not found: pass a run directory" in capsys.readouterr().err


def test_reproduce_collapse_from_runs_without_runs_writes_nothing(tmp_path):
    argv = ["--from-runs", "--runs-dir", str(tmp_path / "none"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match="no run of the plan in"):
        load_study("reproduce_collapse").main(argv)
    assert not (tmp_path / "out").exists()
