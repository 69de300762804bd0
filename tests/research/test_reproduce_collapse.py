"""The collapse study script in smoke mode (tiny model, 2 steps, 2 seeds), so it cannot rot."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
CONFIGS = {"k2_grpo", "k8_grpo", "k8_dr_grpo", "k8_gdpo", "default"}


@pytest.mark.slow
def test_study_smoke_run_writes_the_tables_and_figure(tmp_path):
    cmd = [
        sys.executable,
        str(REPO / "research" / "reproduce_collapse.py"),
        "--smoke",
        "--sweep-lrs",
        "1e-3",
        "--out",
        str(tmp_path),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "collapse_study.md").read_text()  # its own file; no doc edited in place
    assert not (tmp_path / "RESULTS.md").exists()
    for name in CONFIGS:
        assert f"| {name} | 0.0002 | 2 |" in text  # every configuration, 2 seeds
    assert "| k2_grpo | 0.001 | 2 |" in text  # the learning-rate sweep
    assert "round 1: fallback jump ≥ 0.3" in text and "(default)" in text  # the guard table
    # the group table: 2 seeds x 2 steps x 8 problems of K=2, and their kinds' shares
    assert "| k2_grpo | 0.0002 | 32 |" in text
    assert (tmp_path / "figures" / "collapse_study.png").read_bytes()[:4] == b"\x89PNG"
    runs = json.loads((tmp_path / "collapse_study.json").read_text())
    assert {r["config"] for r in runs} == CONFIGS and len(runs) == 12
    assert all(r["steps"] == 2 and len(r["history"]) == 2 for r in runs)
    assert {r["seed"] for r in runs} == {0, 1}
    for run in runs:  # every group counted once; negative advantage shares sum to 1 (or 0)
        g = run["groups"]
        assert g["groups"] == 2 * (8 if run["config"] == "k2_grpo" else 2)
        shares = sum(g[f"neg_{k}"] for k in ("prose", "invalid", "wrong", "correct"))
        assert shares == pytest.approx(1.0) or (shares == 0 and g["tied"] == g["groups"])
    # rebuilding from the run directories gives the same tables, in one section
    rebuilt = subprocess.run([*cmd, "--from-runs"], capture_output=True, text=True, cwd=REPO)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    again = (tmp_path / "collapse_study.md").read_text()
    assert again.count("# The K=2 collapse study") == 1  # the file replaced, not appended to
    table = text[text.index("| config |") : text.index("![")]
    assert table == again[again.index("| config |") : again.index("![")]
    assert "Planned but not run" not in again
    # a planned run without a directory is named in the section, not silently dropped
    more = [*cmd[:3], "--sweep-lrs", "1e-3", "5e-3", *cmd[-4:], "--from-runs"]
    partial = subprocess.run(more, capture_output=True, text=True, cwd=REPO)
    assert partial.returncode == 0, partial.stderr[-3000:]
    said = (tmp_path / "collapse_study.md").read_text()
    assert "not run, so left out: k2_grpo lr 0.005 (seeds 0 1)." in said
