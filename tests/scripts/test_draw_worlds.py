"""scripts/draw_worlds.py: drawn worlds are valid world files; --adaptive ones set templates
apart and report their oracle gap."""

from __future__ import annotations

import random

import pytest
import yaml
from script_loader import load_script

from flowgrpo.operators.simulation.worlds import load_world, world_from_dict


@pytest.fixture(scope="module")
def script():
    return load_script("draw_worlds")


@pytest.mark.parametrize("seed", range(20))
def test_drawn_template_overrides_are_valid_worlds(script, seed):
    rng = random.Random(seed)
    data = script.draw_world(rng, "w")
    data["simulation"]["templates"] = script.draw_templates(rng)
    world = world_from_dict(data)
    assert 1 <= len(world.params.templates) <= 3
    assert all(1 <= len(fields) <= 3 for _, fields in world.params.templates)


def test_an_adaptive_draw_is_kept_only_above_the_gap_and_says_it(script, tmp_path):
    script.main(["--adaptive", "--n", "1", "--seed", "3", "--out", str(tmp_path),
                 "--max-calls", "4", "--min-gap", "0.01"])  # fmt: skip
    path = tmp_path / "adaptive-3-0.yaml"
    world = load_world(path)
    assert world.params.templates
    gap = script.oracle_gap(yaml.safe_load(path.read_text()), "w", 4)
    assert gap >= 0.01 and f"oracle gap {gap:.3f} at 4 calls" in world.summary


def test_an_impossible_gap_stops_with_a_message(script, monkeypatch):
    monkeypatch.setattr(script, "MAX_TRIES", 2)
    with pytest.raises(SystemExit, match=r"no world with an oracle gap >= 5\.0 in 2 draws"):
        script.draw_adaptive(random.Random(0), "w", 5.0, 4)


def test_a_count_below_one_or_a_file_as_the_folder_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    cases = (["--n", "0"], ["--n", "-3"], ["--out", str(tmp_path / "file")],
             ["--adaptive", "--max-calls", "0"], ["--adaptive", "--min-gap", "nan"])  # fmt: skip
    for args in cases:
        argv = ["--seed", "1", "--out", str(tmp_path / "w"), *args]
        with pytest.raises(SystemExit) as stop:
            load_script("draw_worlds").main(argv)
        assert stop.value.code == 2 and "error:" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine" and not (tmp_path / "w").exists()


def test_a_users_file_under_a_drawn_name_is_refused_and_its_own_replaced(tmp_path, capsys):
    out = tmp_path / "w"
    load_script("draw_worlds").main(["--seed", "5", "--n", "1", "--out", str(out)])
    first = (out / "drawn-5-0.yaml").read_text()
    load_script("draw_worlds").main(["--seed", "5", "--n", "1", "--out", str(out)])  # its own
    assert (out / "drawn-5-0.yaml").read_text() == first
    (out / "drawn-6-0.yaml").write_text("name: mine\n")
    with pytest.raises(SystemExit) as stop:
        load_script("draw_worlds").main(["--seed", "6", "--n", "1", "--out", str(out)])
    assert stop.value.code == 2 and "did not draw it" in capsys.readouterr().err
    assert (out / "drawn-6-0.yaml").read_text() == "name: mine\n"
