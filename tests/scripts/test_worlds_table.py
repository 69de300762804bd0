"""scripts/worlds_table.py: the best single workflow, the oracle and the gap of each world, and
each kind's best."""

from __future__ import annotations

import pytest
from script_loader import load_script

WORLDS = "configs/worlds"


def _rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and not cells[0].startswith(("world", "---")):
            rows[cells[0]] = cells
    return rows


def test_the_table_shows_the_gap_of_an_adaptive_world_and_none_in_a_fixed_one(capsys):
    load_script("worlds_table").main(
        [f"{WORLDS}/adaptive-checks.yaml", f"{WORLDS}/cheap.yaml", "--max-calls", "12"]
    )
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == {"adaptive-checks", "cheap"}
    single, oracle, gap = (float(rows["adaptive-checks"][i]) for i in (4, 8, 9))
    assert gap >= 0.03 and abs(oracle - single - gap) < 0.0015
    assert float(rows["cheap"][9]) == 0.0 and rows["cheap"][2] == "`Programmer`"
    # each kind's best: one Programmer call on easy problems, checks on hard ones
    assert "| easy | 0.333 | `Programmer` |" in out
    hard = [line for line in out.splitlines() if line.startswith("| hard |")]  # then cheap's
    assert "Review ? Revise" in hard[0] and "| hard | 0.333 | `Programmer` |" in hard[1]


def test_the_whole_space_can_be_scored_as_the_records_were(capsys):
    load_script("worlds_table").main([f"{WORLDS}/cheap.yaml", "--space", "all"])
    assert "`Programmer`" in _rows(capsys.readouterr().out)["cheap"][2]


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "does not exist"), (b"- a\n", "expected a mapping"), (b"\xca\x5a\xe4", "not UTF-8")],
)
def test_a_world_file_that_is_missing_or_no_world_is_one_error_line(
    tmp_path, capsys, content, says
):
    path = tmp_path / "world.yaml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as stop:
        load_script("worlds_table").main([str(path)])
    assert stop.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--max-calls", "0"], "--max-calls must be >= 1"),
     (["--cost-max-calls", "0"], "--cost-max-calls must be >= 1"),  # was: --max-calls, silently
     (["--cost-max-calls", "-5"], "--cost-max-calls must be >= 1"),  # was: a table, exit 0
     (["--accuracy-weight", "nan"], "--accuracy-weight must be a number >= 0")],
)  # fmt: skip
def test_a_budget_or_weight_that_scores_nothing_is_a_usage_error(capsys, argv, says):
    with pytest.raises(SystemExit) as stop:
        load_script("worlds_table").main([f"{WORLDS}/cheap.yaml", *argv])
    err = capsys.readouterr()
    assert stop.value.code == 2 and says in err.err and "|" not in err.out
