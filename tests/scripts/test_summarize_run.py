"""scripts/summarize_run.py: a run directory in, its own Markdown page and figure out (it edits
no doc in place)."""

import json
import sys

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
