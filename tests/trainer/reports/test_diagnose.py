"""`diagnose` on a generated run directory: report counts, torn lines, PNG plots."""

import json

import pytest

from flowgrpo.trainer.reports.diagnose import (
    diagnose,
    diagnose_to_json,
    format_diagnose,
    format_steps,
    plot_run,
    read_jsonl,
)

PNG = b"\x89PNG\r\n\x1a\n"


def metrics_line(step: int) -> dict:
    """Steps 1..12: a collapse at step 3 (rolled back, no update), deadlock from step 6,
    entropy < 0.1 from step 9. No step_time or adv_frac_extreme logged."""
    dead = step >= 6
    return {
        "step": step,
        "loss": 0.0 if dead else 0.1,
        "grad_norm": 0.0 if dead else 0.5,
        "reward": 0.4 + 0.01 * step,
        "rewards/validity/mean": 0.8,
        "rewards/accuracy/mean": 0.1,
        "frac_reward_zero_std": 1.0 if dead else 0.25,
        "entropy": 0.05 if step >= 9 else 1.0,
        "completions/mean_length": 20.0 + step,
        "completions/min_length": 10,
        "completions/max_length": 40,
        "fallback_rate": 0.6 if step == 3 else 0.1,
        "validity_rate": 0.3 if step == 3 else 0.9,
        "num_completions": 16,
        "alerts": [{"name": "deadlock", "step": step}] if step >= 8 else [],
        "collapse": {"step": 3} if step == 3 else None,
        "rollback": step == 3,
        "skipped_update": step == 3,  # as the loop writes it: a rolled-back step trains on nothing
    }


@pytest.fixture
def run_dir(tmp_path):
    lines = [json.dumps(metrics_line(step)) for step in range(1, 13)]
    text = "\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n"
    (tmp_path / "metrics.jsonl").write_text(text + '{"step": 13, "loss": 0.', encoding="utf-8")
    samples = [{"step": 1, "completion": "Custom -> Programmer"}] * 3
    (tmp_path / "samples.jsonl").write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    (tmp_path / "config.yaml").write_text("model: x\nhealth:\n  deadlock_steps: 2\n")
    return tmp_path


def test_diagnose_reports_each_check_with_the_steps_it_fired(run_dir):
    report = diagnose(run_dir)
    assert report.lines == 12 and (report.first_step, report.last_step) == (1, 12)
    assert report.config.deadlock_steps == 2 and "config.yaml" in report.config_source
    checks = {c.name: c for c in report.checks}
    assert checks["deadlock"].steps == tuple(range(7, 13))  # 2 steps in a row from step 6
    assert checks["deadlock"].logged == 5  # what the run itself wrote
    assert checks["zero_grad"].steps == tuple(range(8, 13))  # 3 steps (default)
    assert checks["entropy_low"].steps == (9, 10, 11, 12)
    assert checks["update_collapse"].steps == (3,)
    assert checks["frozen_length"].status == "PASS" and checks["fallback_high"].status == "PASS"
    assert checks["step_time_collapse"].status == "N/A" and checks["adv_extreme"].status == "N/A"
    assert report.first_deadlock_step == 6
    # 12 rollouts, 10 updates: step 3 was rolled back and trained on nothing, so step 4 ran
    # with the weights of step 2 (no update to judge)
    assert (report.updates, report.decided, report.collapses) == (10, 10, 1)
    assert report.collapse_events[0].step == 3 and report.logged_collapses == 1
    assert [d.step for d in report.collapse_decisions] == [2, 3, 5, 6, 7, 8, 9, 10, 11, 12]
    assert report.collapse_events[0].fallback_p < 0.01  # 0.1 -> 0.6 over 16: z ~ 3.0
    assert report.rollbacks == 1 and report.rollback_steps == (3,)
    assert report.samples == 3


def test_the_formatted_report_is_a_checklist(run_dir):
    text = format_diagnose(diagnose(run_dir))
    assert "ALERT  deadlock" in text and "PASS   frozen_length" in text
    assert "N/A    step_time_collapse" in text and "not logged: step_time" in text
    assert "fired at 6 step(s): 7-12" in text
    assert "1 of 10 decided updates (10.0%)" in text and "p <= 0.001" in text
    assert "not decided" not in text
    assert "Rollbacks: 1 at steps 3" in text and "First deadlock: step 6" in text
    assert "Verdict: deadlock, entropy_low, update_collapse, zero_grad" in text


def test_the_json_report_is_serialisable(run_dir):
    data = json.loads(json.dumps(diagnose_to_json(diagnose(run_dir))))
    deadlock = next(c for c in data["checks"] if c["name"] == "deadlock")
    assert deadlock["status"] == "ALERT" and deadlock["first"]["step"] == 7
    assert data["collapse_rate"] == pytest.approx(0.1) and data["config"]["deadlock_steps"] == 2
    assert len(data["collapse_decisions"]) == 10 and data["collapse_decisions"][1]["collapse"]
    assert data["config"]["collapse_alpha"] == 0.001 and data["decided"] == 10


def test_plots_are_valid_png_files_and_missing_keys_are_skipped(run_dir):
    report = diagnose(run_dir)
    paths = plot_run(run_dir, report.history, entropy_min=report.config.entropy_min)
    names = sorted(p.name for p in paths)
    assert names == [
        "completion_length.png",
        "entropy.png",
        "fallback_validity.png",
        "frac_reward_zero_std.png",
        "grad_norm.png",
        "reward.png",
    ]  # no cov_logp_adv logged: that plot is skipped
    for path in paths:
        assert path.parent == run_dir / "plots"
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 1000
    assert plot_run(run_dir, [{"step": 1}]) == []


def test_updates_without_a_completion_count_are_reported_as_not_decided(tmp_path):
    lines = [{**metrics_line(step), "num_completions": None} for step in range(1, 13)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = diagnose(tmp_path)
    assert (report.updates, report.decided, report.collapses) == (10, 0, 0)
    assert report.collapse_rate == 0.0
    checks = {c.name: c for c in report.checks}
    assert checks["update_collapse"].steps == ()
    text = format_diagnose(report)
    assert "0 of 0 decided updates" in text and "10 of 10 updates not decided" in text
    assert "(the run itself logged 1 collapse event(s))" in text


def test_defaults_without_config_and_a_clear_error_without_metrics(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps(metrics_line(1)) + "\n")
    report = diagnose(tmp_path)
    assert report.config.deadlock_steps == 3 and report.config_source.startswith("defaults")
    assert report.samples is None and report.updates == 0
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl"):
        diagnose(tmp_path / "missing")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"run directory holds metrics\.jsonl"):
        diagnose(empty)


def test_a_bad_health_section_names_the_config_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "config.yaml").write_text("health:\n  deadlock_step: 2\n")
    with pytest.raises(ValueError, match=r"config\.yaml.*did you mean 'deadlock_steps'"):
        diagnose(tmp_path)


def test_read_jsonl_skips_blank_lines_and_a_torn_last_line_only(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2}\n{"a": 3, "b": [1, 2')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match=r"line 2: not valid JSON"):
        read_jsonl(path)
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"line 2: expected a JSON object"):
        read_jsonl(path)
    path.write_text("")
    assert read_jsonl(path) == []


def test_format_steps_joins_runs():
    assert format_steps([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8"
    assert format_steps(list(range(0, 40, 2)), limit=3).endswith("(17 more)")


@pytest.mark.parametrize("value", ["0.0001", [0.0001], {"mean": 0.0001}, True])
def test_a_value_the_checks_read_that_is_no_number_is_an_error_not_a_pass(tmp_path, value):
    # written as numbers these rows fire entropy_low and fallback_high; a check passes over a
    # value it cannot read, so as anything else they would have passed
    rows = [{"step": i, "fallback_rate": 0.99, "entropy": 0.0001} for i in range(1, 13)]
    rows[4]["entropy"] = value
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match=r"row 5: entropy is .* not a number"):
        diagnose(tmp_path)
    rows[4]["entropy"] = None  # a value a step did not have: allowed
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert {c.name for c in diagnose(tmp_path).checks if c.steps} >= {"entropy_low"}


def test_plots_replace_their_own_files_and_never_a_users(run_dir, write_png):
    from flowgrpo.trainer.reports.plots import check_replaceable

    history = diagnose(run_dir).history
    first = plot_run(run_dir, history)
    assert all(b"tEXtflowgrpo\0" in p.read_bytes() for p in first)  # the mark, in the file
    assert plot_run(run_dir, history) == first  # a second diagnose replaces its own plots
    mine = write_png(run_dir / "plots" / "grad_norm.png", b"Software\0my own script")
    before = mine.read_bytes()
    with pytest.raises(
        FileExistsError, match=r"grad_norm\.png exists and carries no .flowgrpo. PNG mark"
    ):
        plot_run(run_dir, history)
    assert mine.read_bytes() == before
    (run_dir / "plots" / "mine").mkdir()
    with pytest.raises(FileExistsError, match="move it or delete it"):
        check_replaceable(run_dir / "plots" / "mine")


def test_diagnose_names_a_users_png_under_a_plots_name_and_keeps_it(run_dir, write_png):
    from click.testing import CliRunner

    from flowgrpo.trainer.cli.app import main

    (run_dir / "plots").mkdir()
    mine = write_png(run_dir / "plots" / "reward.png")
    result = CliRunner().invoke(main, ["diagnose", str(run_dir)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "reward.png exists and carries no 'flowgrpo' PNG mark" in result.output
    assert "--no-plots" in result.output and "Checklist" in result.output  # the report printed
    assert b"tEXt" not in mine.read_bytes()
