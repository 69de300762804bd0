"""The collapse study script in smoke mode (tiny model, 2 steps), so it cannot rot."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


@pytest.mark.slow
def test_study_smoke_run_writes_the_table_and_figures(tmp_path):
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "reproduce_collapse.py"),
        "--smoke",
        "--out",
        str(tmp_path),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "RESULTS.md").read_text()
    for name in ("k2_grpo", "k8_grpo", "k8_dr_grpo", "k8_gdpo", "default"):
        assert f"| {name} |" in text
    for fig in ("collapse_study_fallback.png", "collapse_study_entropy.png"):
        assert (tmp_path / "figures" / fig).read_bytes()[:4] == b"\x89PNG"
    rows = json.loads((tmp_path / "collapse_study.json").read_text())
    assert {r["config"] for r in rows} == {"k2_grpo", "k8_grpo", "k8_dr_grpo", "k8_gdpo", "default"}
    assert all(r["steps"] == 2 for r in rows)
    # re-running replaces the section instead of appending a second one
    subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, check=True)
    assert (tmp_path / "RESULTS.md").read_text().count("collapse-study:start") == 1
