"""research/search_quality.py: the regret of a search's pick, by the exact analysis."""

from __future__ import annotations

import json

from study_loader import load_study


def test_a_small_search_in_the_cheap_world_is_scored_exactly(tmp_path, capsys):
    script = load_study("search_quality")
    script.main(["--world", "configs/worlds/cheap.yaml", "--budget", "30000", "--seeds", "0",
                 "--out", str(tmp_path)])  # fmt: skip
    (row,) = json.loads((tmp_path / "search_quality.json").read_text())["rows"]
    assert row["world"] == "cheap" and row["budget"] == 30000
    assert row["regret"] == row["best"] - row["exact"] >= 0
    assert row["best"] == max(row["best"], row["exact"])  # the best single workflow's reward
    assert row["calls"] > 0 and row["pick"]
    assert "| cheap | 30,000 | 0 |" in capsys.readouterr().out
