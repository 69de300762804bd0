"""scripts/bench_sft.py finds its config whatever the working directory."""

from __future__ import annotations

from pathlib import Path

from script_loader import REPO, load_script


def test_the_config_is_found_from_another_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative "configs/..." would not be found here
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # bench_child, as when the script runs
    bench = load_script("bench_sft")
    cfg = bench._config(3)
    assert Path(bench.CONFIG).is_file()
    assert cfg.sft.max_steps == 3 and cfg.executor.kind == "simulated"
