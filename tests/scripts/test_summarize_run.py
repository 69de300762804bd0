"""scripts/summarize_run.py: a run directory in, its own Markdown page and figure out (it edits
no doc in place)."""

import json
import sys

import pytest
from script_loader import load_script


def test_writes_its_own_page_with_the_thirds_of_the_run(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {"step": s, "fallback_rate": 0.5 - 0.05 * s, "validity_rate": 0.4 + 0.05 * s,
         "reward": 0.1 * s, "entropy": 1.0, "distinct_workflows": 3, "step_time": 2.0}
        for s in range(1, 7)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    (tmp_path / "RESULTS.md").write_text("# Results\n")
    argv = ["summarize_run.py", str(run), "--out", str(tmp_path), "--name", "r"]
    monkeypatch.setattr(sys, "argv", argv)
    load_script("summarize_run").main()
    text = (tmp_path / "r.md").read_text()
    # thirds of 6 steps: steps 1-2 and 5-6; fallback (0.45 + 0.40) / 2 and (0.25 + 0.20) / 2
    assert "| fallback_rate | 0.425 | 0.225 |" in text
    assert "6 steps, 0.2 minutes of step time" in text  # 6 x 2 s
    assert "![r](figures/r.png)" in text
    assert (tmp_path / "figures" / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "RESULTS.md").read_text() == "# Results\n"  # no doc edited in place


def _run(tmp_path, monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["summarize_run.py", *map(str, args)])
    with pytest.raises(SystemExit) as stop:
        load_script("summarize_run").main()
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("metrics", "says"),
    [
        (None, "no such directory"),
        ("", "holds no steps"),
        ('{"step": 1, "fallback_rate": 0.5}\n', "row 1: no number for validity_rate"),
        ("{not json\n{}\n", "line 1: not valid JSON"),
    ],
)
def test_a_missing_or_damaged_run_is_one_error_line_and_exit_2(
    tmp_path, monkeypatch, capsys, metrics, says
):
    run = tmp_path / "run"
    if metrics is not None:
        run.mkdir()
        (run / "metrics.jsonl").write_text(metrics)
    code, err = _run(tmp_path, monkeypatch, capsys, run)
    assert code == 2 and says in err and "Traceback" not in err
    assert not list(tmp_path.rglob("*.md")), "nothing written"


def test_a_name_that_is_a_path_is_refused(tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, tmp_path, "--out", tmp_path / "out",
                     "--name", "../escaped")  # fmt: skip
    assert code == 2 and "a file name, not a path" in err
    assert not (tmp_path / "escaped.md").exists()


def _one_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    line = {"fallback_rate": 0.5, "validity_rate": 0.4, "reward": 0.1, "entropy": 1.0,
            "distinct_workflows": 3, "step_time": 2.0}  # fmt: skip
    rows = [json.dumps({"step": s, **line}) + "\n" for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(rows))
    return run


def test_a_users_figure_or_a_link_under_its_names_is_refused_not_written_through(
    tmp_path, monkeypatch, capsys, write_png
):
    run, out = _one_run(tmp_path), tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    mine = write_png(out / "figures" / "r.png")
    code, err = _run(tmp_path, monkeypatch, capsys, run, "--out", out, "--name", "r")
    assert code == 2 and "r.png exists and carries no 'flowgrpo' PNG mark" in err
    assert b"tEXt" not in mine.read_bytes()
    mine.unlink()
    (tmp_path / "victim.txt").write_text("mine")
    (out / "r.md").symlink_to(tmp_path / "victim.txt")
    monkeypatch.setattr(
        sys, "argv", ["summarize_run.py", str(run), "--out", str(out), "--name", "r"]
    )
    load_script("summarize_run").main()
    assert (tmp_path / "victim.txt").read_text() == "mine" and not (out / "r.md").is_symlink()
