"""research/ablation_table.py: the issue-20 rows and verdicts against hand-computed values."""

import json

import pytest
from study_loader import load_study

ablation = load_study("ablation_table")


def _run(vor, near, entropy, alerts=None, steps=30):
    return {
        "seed": 0, "steps": steps, "wall_minutes": 4.0,
        "series": {"entropy": [0.7, entropy]},
        "alerts": {"deadlock": [], "entropy_low": [], **(alerts or {})},
        "eval": {"sim/valid_regret": vor, "near_best": near, "sim/best_share": 0.5,
                 "validity_rate": 1.0},
    }  # fmt: skip


def _data(runs, start=0.2):
    world = {"start": {"sim/valid_regret": start}, "runs": runs}
    return {"tag": "t", "overrides": ["a=1"], "worlds": {"w": world}}


def test_a_world_meeting_every_target_says_yes_four_times():
    runs = [_run(v, True, 0.3) for v in (0.05, 0.06, 0.07, 0.08, 0.09)]
    st = ablation.world_stats(_data(runs)["worlds"]["w"])
    assert st["lower"] == 5 and st["near"] == 5
    # reduction 0.2 - mean(0.05..0.09) = 0.13; t(4) = 2.776, sd 0.0158 -> half 0.0196
    assert st["reduction"][0] == pytest.approx(0.13)
    assert st["reduction"][1] == pytest.approx(2.776 * 0.0158114 / 5**0.5, rel=1e-3)
    assert ablation.verdict(st) == " yes | yes | yes | yes | yes | yes |"


def test_each_target_can_fail_on_its_own():
    # mean 0.11 > 0.1 (50% of 0.2); all lower; interval above 0; mode near best 2/5
    runs = [_run(v, i < 2, 0.3) for i, v in enumerate((0.10, 0.11, 0.11, 0.11, 0.12))]
    assert ablation.verdict(ablation.world_stats(_data(runs)["worlds"]["w"])) == (
        " no | yes | yes | no | yes | yes |"
    )
    # 3 of 5 lower, one far above: the interval of the reduction includes 0
    runs = [_run(v, True, 0.3) for v in (0.01, 0.01, 0.01, 0.3, 0.6)]
    assert ablation.verdict(ablation.world_stats(_data(runs)["worlds"]["w"])) == (
        " no | no | no | yes | yes | yes |"
    )
    # one run held out at validity 0.9, one ending in a collapse alert: only those two say no
    runs = [_run(v, True, 0.3) for v in (0.05, 0.06, 0.07, 0.08, 0.09)]
    runs[0]["eval"]["validity_rate"] = 0.9
    runs[1]["alerts"]["collapse"] = [29]
    assert ablation.verdict(ablation.world_stats(_data(runs)["worlds"]["w"])) == (
        " yes | yes | yes | yes | no | no |"
    )


def test_a_run_counts_as_ending_in_an_alert_only_in_its_last_three_steps():
    assert ablation.ended_in_alert(_run(0.1, True, 0.1, {"deadlock": [28]}), 30)
    assert not ablation.ended_in_alert(_run(0.1, True, 0.1, {"deadlock": [27]}), 30)
    low = _run(0.1, True, 0.1, {"entropy_low": [30]})
    assert not ablation.ended_in_alert(low, 30)  # entropy_low is its own column, not a target
    assert ablation.ended_in_alert(low, 30, ("entropy_low",))
    st = ablation.world_stats(_data([low])["worlds"]["w"])
    assert (st["ended"], st["ended_low"]) == (0, 1)


def test_the_table_has_one_row_per_world_and_names_the_setting(tmp_path, capsys):
    path = tmp_path / "known_optimum-t.json"
    path.write_text(json.dumps(_data([_run(0.1, False, 0.25), _run(0.3, True, 0.35)])))
    ablation.main([str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| t (`a=1`) | w | 0.200 → 0.200 ± 1.271 | 1/2")
    assert "| 0.300 ± 0.635 |" in lines[2]  # final entropy: mean 0.3, t(1) 12.706 * 0.0707 / 1.41
    assert lines[2].endswith("| 4.0 | – |")  # wall minutes; no CPU time in these runs


def test_cpu_minutes_are_the_mean_over_seeds(tmp_path, capsys):
    runs = [_run(0.1, True, 0.2), _run(0.1, True, 0.2)]
    runs[0]["cpu_minutes"], runs[1]["cpu_minutes"] = 7.0, 10.0
    path = tmp_path / "known_optimum-t.json"
    path.write_text(json.dumps(_data(runs)))
    ablation.main([str(path)])
    assert capsys.readouterr().out.splitlines()[2].endswith("| 4.0 | 8.5 |")


def test_a_world_without_seeds_yet_gets_no_row_and_a_note(tmp_path, capsys):
    data = _data([_run(0.1, True, 0.2)])
    data["worlds"] = {"empty": {"start": {"sim/valid_regret": 0.3}, "runs": []}, **data["worlds"]}
    path = tmp_path / "known_optimum-t.json"
    path.write_text(json.dumps(data))
    ablation.main([str(path)])
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| t (`a=1`) | w | 0.200 → 0.100 | 1/1")
    assert "world empty has no seed run yet" in out.err


def test_a_file_that_is_not_a_study_is_one_line(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(SystemExit, match="no 'worlds' key"):
        ablation.main([str(path)])


def test_deadlocks_are_replayed_under_the_current_rule_when_the_run_is_on_disk(tmp_path):
    run_dir = tmp_path / "seed0"
    (run_dir / "checkpoint-5").mkdir(parents=True)
    lines = [{"step": s, "frac_reward_zero_std": 1.0, "kept_groups": 0} for s in range(1, 6)]
    lines[3]["kept_groups"] = 1  # step 4 trained resampled groups: not a deadlock step
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = _run(0.1, True, 0.2, {"deadlock": [3, 4, 5]}, steps=5)
    run["checkpoint"] = str(run_dir / "checkpoint-5")
    assert ablation.replayed_deadlocks(run) == [3]  # steps 1-3 tied; 4 broke the streak
    run["checkpoint"] = str(tmp_path / "gone" / "checkpoint-5")
    assert ablation.replayed_deadlocks(run) is None


def test_only_prose_alerts_count_as_a_collapse_when_the_run_is_on_disk(tmp_path):
    run_dir = tmp_path / "seed0"
    (run_dir / "checkpoint-4").mkdir(parents=True)
    lines = [{"step": s, "alerts": []} for s in range(1, 5)]
    lines[1]["alerts"] = [{"check": "step_time_collapse"}]  # a faster step, not prose
    lines[2]["alerts"] = [{"check": "update_collapse"}]
    lines[3]["alerts"] = [{"check": "fallback_high"}, {"check": "entropy_low"}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = _run(0.1, True, 0.2, {"collapse": [2, 3, 4]}, steps=4)
    run["checkpoint"] = str(run_dir / "checkpoint-4")
    assert ablation.logged_collapses(run) == [3, 4]
    assert ablation.with_current_deadlocks(run)["alerts"]["collapse"] == [3, 4]


def test_save_writes_a_copy_with_the_replayed_deadlocks(tmp_path, capsys):
    run_dir = tmp_path / "seed0"
    (run_dir / "checkpoint-3").mkdir(parents=True)
    lines = [{"step": s, "frac_reward_zero_std": 1.0, "kept_groups": 0} for s in range(1, 4)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = _run(0.1, True, 0.2, {"deadlock": []}, steps=3)
    run["checkpoint"] = str(run_dir / "checkpoint-3")
    path = tmp_path / "known_optimum-t.json"
    path.write_text(json.dumps(_data([run])))
    ablation.main([str(path), "--save", str(tmp_path / "saved")])
    saved = json.loads((tmp_path / "saved" / path.name).read_text())
    assert saved["worlds"]["w"]["runs"][0]["alerts"]["deadlock"] == [3]
    assert "| 1 / 0 |" in capsys.readouterr().out


def _seeded(seed, vor):
    return {**_run(vor, True, 0.3), "seed": seed}


def test_merge_joins_the_seeds_of_several_files_into_one_row(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_data([_seeded(0, 0.05), _seeded(1, 0.07)])))
    b.write_text(json.dumps({**_data([_seeded(2, 0.09)]), "overrides": ["a=1", "b=2"]}))
    ablation.main([str(a), str(b), "--merge", "joined"])
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if line.startswith("| joined")]
    assert len(rows) == 1 and "| 3/3 |" in rows[0]  # three seeds, all below the start 0.2
    assert "0.200 → 0.070 ±" in rows[0]  # mean of 0.05, 0.07, 0.09
    assert "b=2" in err  # the differing override is named


def test_merge_refuses_a_seed_twice_or_starts_that_differ(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_data([_seeded(0, 0.05)])))
    b.write_text(json.dumps(_data([_seeded(0, 0.06)])))
    c.write_text(json.dumps(_data([_seeded(1, 0.06)], start=0.3)))
    with pytest.raises(SystemExit, match="seed 0 is in two files"):
        ablation.main([str(a), str(b), "--merge", "m"])
    with pytest.raises(SystemExit, match=r"start 0\.3 differs"):
        ablation.main([str(a), str(c), "--merge", "m"])


def test_against_pairs_the_seeds_both_settings_ran(tmp_path, capsys):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(_data([_seeded(0, 0.05), _seeded(1, 0.07), _seeded(2, 0.09)])))
    runs = [_seeded(0, 0.04), _seeded(1, 0.05), _seeded(3, 0.01)]
    runs[1]["eval"]["near_best"] = False
    new.write_text(json.dumps({**_data(runs), "tag": "new"}))
    ablation.main([str(new), "--against", str(base)])
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if "| w |" in line)
    # seeds 0 and 1 only: base 0.05, 0.07 (mean 0.06), new 0.04, 0.05 (0.045);
    # differences -0.01, -0.02: mean -0.015, sd 0.00707, t(1) = 12.706 -> half 0.0635
    assert "| 2 | 0.060 ± 0.127 → 0.045 ± 0.064 | -0.015 ± 0.064 | 2/2 → 1/2 |" in row
    assert "[2, 3]" in err  # the unpaired seeds are named


def test_against_pools_every_paired_seed_of_every_world(tmp_path, capsys):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    b = _data([_seeded(0, 0.05), _seeded(1, 0.07)])
    n = _data([_seeded(0, 0.04), _seeded(1, 0.05)])
    b["worlds"]["v"] = {"start": {"sim/valid_regret": 0.3}, "runs": [_seeded(0, 0.10)]}
    n["worlds"]["v"] = {"start": {"sim/valid_regret": 0.3}, "runs": [_seeded(0, 0.14)]}
    n["worlds"]["v"]["runs"][0]["eval"]["near_best"] = False
    base.write_text(json.dumps(b))
    new.write_text(json.dumps({**n, "tag": "new"}))
    ablation.main([str(new), "--against", str(base)])
    row = next(line for line in capsys.readouterr().out.splitlines() if "pooled" in line)
    # pairs (0.05, 0.04), (0.07, 0.05), (0.10, 0.14): differences -0.01, -0.02, +0.04, mean
    # 0.00333, sd 0.03215, t(2) = 4.303 -> half 0.0799; world w: 2/2 -> 2/2 near, v: 1/1 -> 0/1
    assert "| all 2 worlds, pooled | 3 |" in row
    assert "| 0.003 ± 0.080 |" in row
    assert "3/3 → 2/3 (worlds ≥ 3/5: 2 → 1) |" in row


def test_a_run_without_a_valid_regret_is_left_out_of_the_interval():
    """A run with no valid held-out sample has sim/valid_regret None: the table crashed."""
    runs = [_run(v, True, 0.3) for v in (0.05, None, 0.07)]
    st = ablation.world_stats(_data(runs)["worlds"]["w"])
    assert st["lower"] == 2  # of the two runs that have one
    assert st["reduction"][0] == pytest.approx(0.2 - 0.06)  # mean of 0.15 and 0.13
    assert ablation.verdict(st).startswith(" yes | ")  # mean 0.06 <= 0.1, over those two


def test_a_torn_last_metrics_line_is_skipped_when_replaying(tmp_path):
    """An interrupted run's metrics.jsonl ends in a torn line: the replay crashed on it."""
    run_dir = tmp_path / "seed0"
    (run_dir / "checkpoint-3").mkdir(parents=True)
    lines = [{"step": s, "frac_reward_zero_std": 1.0, "kept_groups": 0} for s in (1, 2, 3)]
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"step": 4, "frac_rew'
    (run_dir / "metrics.jsonl").write_text(text)
    run = _run(0.1, True, 0.2, steps=3)
    run["checkpoint"] = str(run_dir / "checkpoint-3")
    assert ablation.replayed_deadlocks(run) == [3]  # the three whole lines, as diagnose reads


def test_save_refuses_two_files_of_one_name_and_a_users_file(tmp_path):
    """b/k.json's copy silently replaced a/k.json's; a user's save/k.json was replaced."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "k.json").write_text(json.dumps(_data([_run(0.1, True, 0.2)])))
    save = tmp_path / "save"
    with pytest.raises(SystemExit, match=r"two files named k\.json"):
        ablation.main([str(tmp_path / "a" / "k.json"), str(tmp_path / "b" / "k.json"),
                       "--save", str(save)])  # fmt: skip
    assert not save.exists()
    save.mkdir()
    (save / "k.json").write_text("my notes")
    with pytest.raises(SystemExit, match="is not a study's JSON; move it"):
        ablation.main([str(tmp_path / "a" / "k.json"), "--save", str(save)])
    assert (save / "k.json").read_text() == "my notes"
