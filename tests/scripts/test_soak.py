"""scripts/soak.py: a short run in a subprocess (it patches the loop for its instrumentation)
writes the JSON report and prints the Markdown table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_soak_writes_its_report(tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "scripts/soak.py", "--steps", "4", "--every", "2", "--warmup", "1",
         "--run-dir", str(tmp_path / "run"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert summary["steps"] == 4 and [w["steps"] for w in summary["windows"]] == ["2-2", "3-4"]
    shares = summary["time_share"]
    total = shares["generation"] + shares["scoring"] + shares["update"] + shares["other"]
    assert total == pytest.approx(1.0) and shares["update"] > 0 and shares["scoring"] > 0
    assert [r["step"] for r in report["records"]] == [1, 2, 3, 4]
    assert all(r["rss_mb"] > 0 for r in report["records"])
    assert summary["windows"][-1]["cache_entries"] > 0  # the injected workflows were executed
    assert "| steps | RSS at end (MB) |" in done.stdout
