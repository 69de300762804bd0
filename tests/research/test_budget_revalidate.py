"""research/budget_revalidate.py: logged workflows judged again under two call budgets."""

import json

from study_loader import load_study

# 10 Customs + Programmer (1 try + 1 retry) in parallel, then one Custom: 13 calls by hand
THIRTEEN = (
    "[Custom, Programmer, Custom, Custom, Custom, Custom, Custom, Custom, Custom, Custom, Custom]"
    " -> Custom"
)


def _rows():
    return [
        {"step": 1, "canonical": "Custom -> Format"},  # 2 calls: valid at both
        {"step": 1, "canonical": THIRTEEN},  # over 12, within 20
        {"step": 2, "canonical": "Format"},  # formats no solution: invalid at both
        {"step": 2, "canonical": None},  # prose: the reward parsed no workflow
    ]


def test_judge_counts_a_workflow_the_smaller_budget_rejects():
    counts = load_study("budget_revalidate").judge(_rows(), [12, 20], "math")
    assert counts == {"samples": 4, "parsed": 3, "valid": [1, 2], "changed": [0, 1]}


def test_equal_budgets_change_nothing():
    counts = load_study("budget_revalidate").judge(_rows(), [20, 20], "math")
    assert counts["valid"] == [2, 2] and counts["changed"] == [0, 0]


def test_blocks_split_steps_and_keep_the_last_partial_block():
    rows = [{"step": s} for s in (1, 2, 3, 3, 5)]
    got = load_study("budget_revalidate").blocks(rows, 2)
    assert [(a, b, len(r)) for a, b, r in got] == [(1, 2, 2), (3, 4, 2), (5, 5, 1)]


def test_main_prints_a_row_per_block(tmp_path, capsys):
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    assert load_study("budget_revalidate").main([str(tmp_path), "--block", "10"]) == 0
    out = capsys.readouterr().out
    assert f"| {tmp_path} | 1-2 | 4 | 3 | 1 | 2 | 1 |" in out


def test_a_path_without_samples_is_a_clear_error(tmp_path, capsys):
    assert load_study("budget_revalidate").main([str(tmp_path)]) == 2
    assert "samples.jsonl not found" in capsys.readouterr().out


def test_a_budget_below_one_is_a_clear_error(tmp_path, capsys):
    assert load_study("budget_revalidate").main([str(tmp_path), "--budgets", "0"]) == 2
    assert "--budgets" in capsys.readouterr().out
