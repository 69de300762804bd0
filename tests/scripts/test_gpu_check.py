"""scripts/gpu_check.py at its tiny CPU profile: the code path the GPU run takes, in seconds."""

from __future__ import annotations

import importlib.util
import json

import pytest
from script_loader import REPO, load_script

PARTS = "train,exact,eval,generate,capacity,compile"
pytestmark = pytest.mark.slow  # the shared report runs every part once: ~14 s


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / "scripts"))  # its helpers are scripts beside it
        code = load_script("gpu_check").main(["--out", str(out), "--profile", "tiny",
                                              "--parts", PARTS])  # fmt: skip
    data = json.loads((out / "gpu_check.json").read_text())
    return code, data, (out / "gpu_check.md").read_text()


def test_every_part_runs_and_is_written(report):
    code, data, md = report
    assert code == 0, {n: p.get("error") for n, p in data["parts"].items()}
    assert list(data["parts"]) == PARTS.split(",")
    for name in data["parts"]:
        assert f"## {name} (" in md


def test_train_times_every_step_and_each_updates(report):
    train = report[1]["parts"]["train"]
    rows = train["rows"]
    assert [r["step"] for r in rows] == [1, 2]  # one warm-up and the tiny profile's one step
    assert all(r["updated"] for r in rows)  # the rewards varied: the DSL-piece vocabulary
    for r in rows:
        parts = r["generation_s"] + r["scoring_s"] + r["fwd_bwd_s"] + r["optimizer_s"]
        assert r["fwd_bwd_s"] > 0 and parts <= r["step_s"] + 0.02
    assert train["summary"]["checkpoint"].endswith("checkpoint-2")


def test_exact_checks_hold_on_the_cpu(report):
    rows = {r["check"]: r for r in report[1]["parts"]["exact"]["rows"]}
    merged = rows["merged-weight sampling restores the base weights"]
    assert merged["bit_identical_after_sampling"] is True
    assert merged["plain_merge_unmerge_max_drift"] > 0  # why the stash exists (bf16)
    assert rows["gradient checkpointing on vs off (LoRA grads)"]["relative_l2_diff"] == 0
    prefix = rows["shared-prefix log-probs vs full forward"]
    assert prefix["prefix_tokens"] > 0 and prefix["max_abs_diff"] < 0.05


def test_eval_scores_the_trained_adapter(report):
    (row,) = report[1]["parts"]["eval"]["rows"]
    assert row["checkpoint"].endswith("checkpoint-2") and row["problems"] == 2
    assert row["samples"] == 8 and "SIMULATED" in row["executor"]


def test_capacity_and_generate_report_what_they_tried(report):
    parts = report[1]["parts"]
    assert parts["capacity"]["summary"] == {
        "largest_generation_rows": 16,
        "largest_train_group": 16,
    }
    gen = parts["generate"]
    assert [r["batch"] for r in gen["rows"]] == [1, 4, 1, 1]
    assert all(r["tokens_s"] > 0 for r in gen["rows"])


def test_a_failing_part_is_recorded_and_the_rest_still_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    script = load_script("gpu_check")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no trl here
    code = script.main(["--out", str(tmp_path), "--profile", "tiny", "--parts", "trl,eval"])
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert code == 1
    assert "trl is not installed: pip install trl" in data["parts"]["trl"]["error"]
    assert "error" not in data["parts"]["eval"]


def test_unknown_parts_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    with pytest.raises(SystemExit):
        load_script("gpu_check").main(["--out", str(tmp_path), "--parts", "train,warp"])
    assert "unknown parts ['warp']" in capsys.readouterr().err


@pytest.mark.parametrize("parts", [",", " "])
def test_no_parts_is_refused_not_reported_as_written(tmp_path, monkeypatch, capsys, parts):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    with pytest.raises(SystemExit):
        load_script("gpu_check").main(["--out", str(tmp_path / "o"), "--parts", parts])
    assert "unknown parts" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    (tmp_path / "file").write_text("mine")
    with pytest.raises(SystemExit):
        load_script("gpu_check").main(["--out", str(tmp_path / "file"), "--parts", "eval"])
    assert "is a file: give a folder" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"


def test_the_report_replaces_a_link_instead_of_writing_through_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    script = load_script("gpu_check")
    monkeypatch.setattr(script, "_part", lambda name: lambda profile, work: {"quick": True})
    (tmp_path / "victim.txt").write_text("mine")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "gpu_check.json").symlink_to(tmp_path / "victim.txt")
    script.main(["--out", str(tmp_path / "out"), "--profile", "tiny", "--parts", "trl"])
    assert (tmp_path / "victim.txt").read_text() == "mine"
    assert not (tmp_path / "out" / "gpu_check.json").is_symlink()
