"""scripts/soak.py: a short run in a subprocess (it patches the loop for its instrumentation)
writes the JSON report and prints the Markdown table."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from script_loader import load_script

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


def _soak():
    return load_script("soak")


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--every", "0"], "--every must be >= 1"), (["--steps", "0"], "--steps must be >= 1"),
     (["--threads", "-1"], "must be >= 0"), (["--out", "{tmp}"], "is a folder")],
)  # fmt: skip
def test_bad_counts_and_outs_are_refused_before_the_run(tmp_path, capsys, argv, message):
    """--every 0 divided by zero at step 2, an --out folder failed after the whole run."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit):
        _soak().main(["--run-dir", str(tmp_path / "run"), *argv])
    assert message in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_an_interrupted_soak_writes_no_report(tmp_path, monkeypatch):
    """Ctrl-C ended the run early and the report of 6 steps said --steps 30."""
    from flowgrpo.trainer.loop.trainer import TrainResult

    soak = _soak()

    class Stopped:
        def __init__(self, config, **kwargs):
            self.on_step = None

        def train(self):
            return TrainResult(6, tmp_path / "run", None, exit_code=130)

    monkeypatch.setattr(soak, "Trainer", Stopped)
    # run() wraps the loop's functions for its timings: wrap stand-ins, not the real modules
    # (patched here they would stay patched for every later test of this process)
    monkeypatch.setattr(soak, "step_mod", types.SimpleNamespace(generate_rollout=None))
    monkeypatch.setattr(soak, "trainer_mod", types.SimpleNamespace(policy_update=None))
    out = tmp_path / "soak.json"
    with pytest.raises(SystemExit, match="interrupted at step 6 of 30: nothing written"):
        soak.main(["--steps", "30", "--run-dir", str(tmp_path / "run"), "--out", str(out)])
    assert not out.exists()
