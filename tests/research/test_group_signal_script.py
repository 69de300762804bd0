"""research/group_signal.py: a run directory in, the signal and the near-best blocks out."""

import json
import shutil

from study_loader import REPO, load_study


def _script():
    return load_study("group_signal")


def test_a_run_dir_reports_its_groups_and_the_worlds_near_best_share(tmp_path, capsys):
    run = tmp_path / "seed0"
    run.mkdir()
    shutil.copy(REPO / "configs" / "known-optimum.yaml", run / "config.yaml")  # default world
    best = "[Programmer, Programmer, Programmer] -> MdEnsemble -> (Review ? Revise : done) * 3"
    rows = [
        {"step": 1, "problem_id": "a", "advantage": 0.3, "rewards": {"accuracy": 1.0},
         "canonical": best, "valid": True},
        {"step": 1, "problem_id": "a", "advantage": -0.3, "rewards": {"accuracy": 0.0},
         "canonical": "Custom", "valid": True},
    ]  # fmt: skip
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _script().main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "1 groups over 1 steps, familiar 0%" in out and "informative 1.00/step" in out
    # the default world's best family is within 0.02, Custom is not: half the block, whose
    # near-best completion carried advantage +0.3
    assert "near-best share (its mean advantage) 0.50 (+0.300)" in out


def test_a_path_without_samples_is_a_clear_error(tmp_path, capsys):
    assert _script().main([str(tmp_path)]) == 2
    assert "samples.jsonl not found" in capsys.readouterr().out
