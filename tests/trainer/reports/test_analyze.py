"""`analyze`: counts on a hand-made sample file, trends, other field names, JSON and PNG output."""

import json

import pytest

from flowgrpo.trainer.reports.analyze import (
    analyze_samples,
    format_analyze,
    plot_analyze,
    report_to_json,
)
from flowgrpo.trainer.reports.diagnose import read_jsonl

PNG = b"\x89PNG\r\n\x1a\n"

# (step, completion): 8 valid (4 distinct), 2 invalid (1 syntax error), 2 fallbacks
SAMPLES = [
    (1, "Custom->Programmer"),
    (1, "Sure!\n```\nCustom -> Programmer\n```"),
    (1, "Workflow: Custom -> Programmer"),
    (1, "### Step 1: Analyze the problem\nThe answer is 4."),
    (1, "Revise -> ScEnsemble"),
    (1, "Custom -> Review ? Revise : done"),
    (2, "Custom -> Review ? Revise : done"),
    (2, "[Custom, Custom, Programmer] -> ScEnsemble"),
    (2, "(AnswerGenerate -> Review ? Revise : done) * 2"),
    (2, "Custom -> Review ? Revise"),
    (2, "I think we should just compute it directly."),
    (2, "Custom -> Programmer"),
]


@pytest.fixture
def sample_file(tmp_path):
    rows = [
        # a wrong precomputed canonical form: analyze must recompute, not trust it
        {"step": s, "problem_id": f"p{i}", "completion": c, "canonical": "Custom", "valid": True}
        for i, (s, c) in enumerate(SAMPLES)
    ]
    rows.append({"step": 2, "problem_id": "no-text"})  # no completion field: skipped
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + '{"step": 3, "compl')
    return path


def test_counts_on_a_hand_made_sample_file(sample_file):
    report = analyze_samples(read_jsonl(sample_file))
    assert (report.total, report.skipped) == (12, 1)
    assert (report.valid, report.invalid, report.syntax_errors, report.fallback) == (8, 2, 1, 2)
    assert report.distinct == 4
    assert [(c.name, c.count) for c in report.top] == [
        ("Custom -> Programmer", 4),
        ("Custom -> Review ? Revise : done", 2),
        ("(AnswerGenerate -> Review ? Revise : done) * 2", 1),
        ("[Custom, Custom, Programmer] -> ScEnsemble", 1),
    ]
    assert report.top[0].share == 0.5  # share of the valid workflows
    operators = {c.name: (c.count, c.share) for c in report.operators}
    assert operators["Custom"] == (7, 7 / 8)  # workflows using it, not occurrences (3 in one)
    assert operators["Programmer"] == (5, 5 / 8) and operators["Review"] == (3, 3 / 8)
    assert operators["Test"] == (0, 0.0) and report.operators[0].name == "Custom"
    kinds = {c.name: c.count for c in report.structures}
    assert kinds == {"single": 0, "chain": 4, "conditional": 2, "loop": 1, "parallel": 1}
    occurrences = {c.name: c.count for c in report.occurrences}
    assert occurrences["conditional"] == 3 and occurrences["chain"] == 8
    assert occurrences["loop"] == 1 and occurrences["instruction"] == 0


def test_trends_per_step_and_per_window(sample_file):
    rows = read_jsonl(sample_file)
    report = analyze_samples(rows)
    assert report.trend_by == "step"
    assert [(p.label, p.total, p.valid, p.fallback, p.distinct) for p in report.trends] == [
        ("1", 6, 4, 1, 2),
        ("2", 6, 4, 1, 4),
    ]
    windows = analyze_samples(rows, window=5)
    assert windows.trend_by == "window of 5 rows"
    assert [(p.label, p.total) for p in windows.trends] == [
        ("rows 1-5", 5),
        ("rows 6-10", 5),
        ("rows 11-12", 2),
    ]
    no_steps = analyze_samples([{"completion": c} for _, c in SAMPLES])
    assert no_steps.trend_by == "window of 2 rows" and len(no_steps.trends) == 6


def test_other_field_names_and_chat_message_lists():
    rows = [
        {"output": "Custom -> Format"},
        {"output": [{"role": "assistant", "content": "Workflow: Custom -> Format"}]},
        {"output": 42},
    ]
    report = analyze_samples(rows, field="output")
    assert (report.total, report.valid, report.skipped, report.distinct) == (2, 2, 1, 1)
    with pytest.raises(ValueError, match=r"no row has a text field 'completion'.*output"):
        analyze_samples(rows)
    # the field is there but holds no text: said so, not "fields seen: completion"
    with pytest.raises(ValueError, match=r"no row has text in field 'completion' \(its values"):
        analyze_samples([{"completion": 5}, {"completion": None}])


def test_top_limits_the_list_and_bad_arguments_are_rejected(sample_file):
    rows = read_jsonl(sample_file)
    assert len(analyze_samples(rows, top=2).top) == 2
    with pytest.raises(ValueError, match="top"):
        analyze_samples(rows, top=0)
    with pytest.raises(ValueError, match="window"):
        analyze_samples(rows, window=0)
    with pytest.raises(ValueError, match="row 2"):
        analyze_samples([{"completion": "Custom"}, "Custom"])


def test_domain_restricts_the_allowed_operators(sample_file):
    report = analyze_samples(read_jsonl(sample_file), domain="code")
    # Programmer and AnswerGenerate are not code operators; only the conditional ones remain
    assert report.valid == 2 and report.distinct == 1


def test_console_table_and_json(sample_file):
    report = analyze_samples(read_jsonl(sample_file))
    text = format_analyze(report)
    assert "12 outputs (field 'completion'); 1 row(s) without that field skipped" in text
    assert "valid         8  66.7%" in text and "fallback      2  16.7%" in text
    assert "(1 do not parse)" in text
    assert "4  50.0%  Custom -> Programmer" in text
    assert "distinct canonical workflows among the valid: 4" in text
    assert "Trend per step:" in text
    data = json.loads(json.dumps(report_to_json(report)))
    assert data["valid"] == 8 and data["fallback_share"] == pytest.approx(2 / 12)
    assert data["top"][0] == {"name": "Custom -> Programmer", "count": 4, "share": 0.5}
    assert data["trends"][1]["valid_share"] == pytest.approx(4 / 6)


def test_long_trends_are_thinned_on_the_console_only():
    rows = [{"step": s, "completion": "Custom"} for s in range(100)]
    report = analyze_samples(rows)
    text = format_analyze(report, max_trend_rows=5)
    assert "(5 of 100 shown; --json has all)" in text
    assert len(report_to_json(report)["trends"]) == 100


def test_bar_charts_are_png_files(sample_file, tmp_path):
    report = analyze_samples(read_jsonl(sample_file))
    paths = plot_analyze(report, tmp_path / "charts")
    names = sorted(p.name for p in paths)
    assert names == ["operators.png", "structures.png", "top_workflows.png", "trends.png"]
    for path in paths:
        assert path.read_bytes().startswith(PNG)
    nothing_valid = analyze_samples([{"completion": "just prose here"}])
    assert plot_analyze(nothing_valid, tmp_path / "empty") == []


RUN_OUTPUTS = [
    "Custom -> Hush",  # the run's own operator: unknown to the default table
    "[Custom, Custom, Custom] -> MdEnsemble",  # 3 + 3 votes: over the run's budget of 4
    "Custom -> Format",
]


@pytest.fixture
def run_dir(tmp_path):
    """A run whose config declares an operator and a call budget of 4, and its samples."""
    from flowgrpo.trainer.config import load_config, save_config

    overrides = ("operators=[{name: Hush, role: refiner, prompt: 'Say it softly.'}]",
                 "executor.max_calls=4")  # fmt: skip
    save_config(load_config("configs/tiny.yaml", overrides), tmp_path / "config.yaml")
    rows = [{"step": 1, "completion": text} for text in RUN_OUTPUTS]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _analyze(*args):
    from click.testing import CliRunner

    from flowgrpo.trainer.cli.app import main

    result = CliRunner().invoke(main, ["analyze", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_runs_samples_are_validated_as_its_reward_validated_them(run_dir):
    report = _analyze(str(run_dir), "--plots", str(run_dir / "charts"))
    assert report["valid"] == 2 and report["invalid"] == 1
    assert {t["name"] for t in report["top"]} == {"Custom -> Hush", "Custom -> Format"}
    assert {"name": "Hush", "count": 1, "share": 0.5} in report["operators"]
    assert report["validated_with"].startswith("config.yaml (the run's operators, 4 executor")
    other = _analyze("--samples", str(run_dir / "samples.jsonl"))  # any file: the defaults
    assert other["valid"] == 2 and other["invalid"] == 1
    assert {t["name"] for t in other["top"]} == {
        "[Custom, Custom, Custom] -> MdEnsemble", "Custom -> Format",
    }  # fmt: skip
    assert other["validated_with"].startswith("the default operators")


def test_two_runs_that_implement_one_operator_differently_analyze_in_one_process(
    run_dir, tmp_path_factory
):
    """analyze validates against a run's operator table: it registers no implementation, so a
    second run whose Hush is another prompt is analyzed in the same process, as is the first
    again."""
    from flowgrpo.trainer.config import load_config, save_config

    second = tmp_path_factory.mktemp("second")
    overrides = ("operators=[{name: Hush, role: refiner, prompt: 'Say it loudly.'}]",)
    save_config(load_config("configs/tiny.yaml", overrides), second / "config.yaml")
    (second / "samples.jsonl").write_text(json.dumps({"step": 1, "completion": RUN_OUTPUTS[0]}))
    for folder, valid in ((run_dir, 2), (second, 1), (run_dir, 2)):
        report = _analyze(str(folder), "--plots", str(folder / "charts"))
        assert report["valid"] == valid
        assert {"name": "Hush", "count": 1} in [
            {"name": o["name"], "count": o["count"]} for o in report["operators"]
        ]


def test_a_run_config_that_does_not_load_is_named(run_dir):
    from click.testing import CliRunner

    from flowgrpo.trainer.cli.app import main

    (run_dir / "config.yaml").write_text("optim: {max_stepz: 3}\n")
    result = CliRunner().invoke(main, ["analyze", str(run_dir), "--plots", str(run_dir)])
    assert result.exit_code != 0
    assert "config.yaml: " in result.output and "max_stepz" in result.output
    assert "--samples FILE" in result.output and "Traceback" not in result.output


def test_analyze_names_a_users_png_under_a_charts_name_and_keeps_it(run_dir, write_png):
    from click.testing import CliRunner

    from flowgrpo.trainer.cli.app import main

    (run_dir / "charts").mkdir()
    mine = write_png(run_dir / "charts" / "operators.png", b"Comment\0mine")
    before = mine.read_bytes()
    args = ["analyze", str(run_dir), "--plots", str(run_dir / "charts")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "operators.png exists and carries no 'flowgrpo' PNG mark" in result.output
    assert mine.read_bytes() == before
