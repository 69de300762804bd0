"""research/guard_replay.py: the collapse rule at other significance levels, replayed."""

import json
import math

from study_loader import load_study


def _line(step, fallback, valid, **extra):
    return {
        "step": step,
        "fallback_rate": fallback / 16,
        "validity_rate": valid / 16,
        "num_completions": 16,
        **extra,
    }


# validity 5/16 -> 0/16: invalid 11/16 -> 16/16, pooled 27/32, by hand
# z = (5/16) / sqrt(27/32 * 5/32 * 2/16) = 2.434, p = P(Z >= z) = 0.0075
FALL = [_line(1, 3, 0), _line(2, 3, 5), _line(3, 4, 0), _line(4, 4, 1)]


def test_a_fall_of_five_in_sixteen_fires_at_001_not_at_0001():
    study = load_study("guard_replay")
    assert [d.step for d in study.events(FALL, 0.01)] == [3]
    assert study.events(FALL, 0.001) == []
    (event,) = study.events(FALL, 0.01)
    z = (5 / 16) / math.sqrt(27 / 32 * 5 / 32 * 2 / 16)
    assert abs(event.validity_z - z) < 1e-9
    assert abs(event.p - 0.5 * math.erfc(z / math.sqrt(2))) < 1e-12


def test_a_fall_to_all_prose_fires_at_both():
    history = [_line(1, 1, 12), _line(2, 16, 0)]
    study = load_study("guard_replay")
    assert [d.step for d in study.events(history, 0.001)] == [2]


def test_until_rollback_keeps_the_rolled_back_line_and_drops_the_rest():
    history = [_line(1, 3, 0), _line(2, 3, 5, rollback=True), _line(3, 4, 0)]
    kept, step = load_study("guard_replay").until_rollback(history)
    assert [line["step"] for line in kept] == [1, 2] and step == 2
    assert load_study("guard_replay").until_rollback(FALL) == (FALL, None)


def test_main_prints_a_row_per_run(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in FALL))
    assert load_study("guard_replay").main([str(tmp_path), "--alphas", "0.01", "0.001"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if str(tmp_path) in line)
    assert row.startswith(f"| {tmp_path} | 4 | 3 | none | 3 (z 2.43, p 0.0075) | none |")


def test_collapse_study_table_counts_false_alarms_and_detections(tmp_path, capsys):
    ok = {"rollbacks": 0, "history": [*FALL, _line(5, 3, 1), _line(6, 3, 1)]}
    collapsed = {
        "rollbacks": 0,
        "history": [
            _line(1, 1, 12),
            _line(2, 1, 12),
            _line(3, 16, 0),
            _line(4, 16, 0),
            _line(5, 16, 0),
            _line(6, 16, 0),
        ],
    }
    rolled = {"rollbacks": 1, "history": FALL}  # left out: its guard changed what followed
    path = tmp_path / "study.json"
    path.write_text(json.dumps([ok, collapsed, rolled]))
    assert load_study("guard_replay").main(["--collapse-study", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| 0.01 | 1/1 | 1/5 | 1/1 | 0 |" in out
    assert "| 0.001 | 0/1 | 0/5 | 1/1 | 0 |" in out


def test_main_refuses_a_folder_without_metrics(tmp_path, capsys):
    assert load_study("guard_replay").main([str(tmp_path)]) == 2
    assert "metrics.jsonl not found" in capsys.readouterr().out
