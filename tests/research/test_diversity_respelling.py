"""research/diversity_respelling.py: how much of a run's diversity paid for respelling."""

import json

from study_loader import load_study


def _rows():
    row = {"step": 1, "problem_id": "p1", "valid": True}
    return [
        {
            **row,
            "canonical": "[Custom, AnswerGenerate] -> Format",
        },  # its skeleton: Custom -> Format
        {**row, "canonical": "Custom -> Format"},
        {**row, "canonical": "Custom"},
        {**row, "canonical": None, "valid": False},  # prose: a sibling without a workflow
        {"step": 1, "problem_id": "p2", "valid": False, "canonical": "Revise"},  # not counted
    ]


def test_the_counts_and_both_diversities_are_the_hand_computed_ones():
    result = load_study("diversity_respelling").respelling(_rows())
    assert (result["valid"], result["respelt"]) == (3, 1)
    # plain keys: the three valid samples differ from all three siblings (one without a workflow)
    assert result["plain"] == 1.0
    # skeleton: the first two are one workflow, so 2/3, 2/3 and 3/3
    assert abs(result["skeleton"] - (2 / 3 + 2 / 3 + 1) / 3) < 1e-12


def test_the_script_prints_a_row_per_run_and_names_a_missing_one(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    load_study("diversity_respelling").main([str(run)])
    assert f"| {run} | 3 | 1 | 1.000 | 0.778 |" in capsys.readouterr().out
    try:
        load_study("diversity_respelling").main([str(tmp_path / "none")])
    except SystemExit as stop:
        assert stop.code == 2 and "no such file" in capsys.readouterr().err
    else:
        raise AssertionError("a missing run is an error")
