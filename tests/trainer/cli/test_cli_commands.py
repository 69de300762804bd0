"""The CLI end to end on the tiny model: train, diagnose, analyze, run (what CI covers)."""

import json

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_train_then_diagnose_then_analyze(tmp_path):
    run_dir = tmp_path / "run"
    result = invoke(
        "train", "--config", "configs/tiny.yaml", "--max-steps", "2", "--output-dir", str(run_dir)
    )
    assert result.exit_code == 0, result.output
    assert "step    2" in result.output and "last checkpoint" in result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    # the smoke run learns (issue 43): under the grammar the random model writes workflows,
    # their rewards differ within a group, so the update has a loss
    assert all(line["validity_rate"] > 0 for line in lines)
    assert all(line["loss"] is not None and line["loss"] != 0 for line in lines)
    assert (run_dir / "checkpoint-2" / "adapter" / "adapter_config.json").is_file()

    diag = invoke("diagnose", str(run_dir))
    assert diag.exit_code == 0
    assert "Checklist" in diag.output and "update_collapse" in diag.output
    assert list((run_dir / "plots").glob("*.png"))

    ana = invoke("analyze", str(run_dir), "--json")
    assert ana.exit_code == 0
    report = json.loads(ana.stdout)
    assert report["total"] == 2 * 2 * 8


def test_resume_continues_the_step_count(tmp_path):
    run_dir = tmp_path / "run"
    assert (
        invoke(
            "train",
            "--config",
            "configs/tiny.yaml",
            "--max-steps",
            "1",
            "--output-dir",
            str(run_dir),
        ).exit_code
        == 0
    )
    result = invoke(
        "train",
        "--config",
        "configs/tiny.yaml",
        "--max-steps",
        "2",
        "--output-dir",
        str(run_dir),
        "--resume",
    )
    assert result.exit_code == 0
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_bad_config_exits_2_with_the_field_named(tmp_path):
    result = CliRunner().invoke(main, ["train", "--set", "rollout.num_generations=2"])
    assert result.exit_code == 2
    assert "num_generations" in result.output and "allow_small_groups" in result.output


def test_dry_run_loads_no_weights_and_prints_an_estimate():
    from fault_server import FaultServer  # the dry run asks the executor server for its models

    server = FaultServer(models=("Qwen/Qwen2.5-7B-Instruct",), lifetime_s=60)
    try:
        result = invoke(
            "train", "--config", "configs/qwen2.5-7b.yaml", "--dry-run",
            "--set", f"executor.base_url={server.url}",
        )  # fmt: skip
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert "Qwen/Qwen2.5-7B-Instruct" in result.output and "total_gib_estimate" in result.output


def test_run_executes_a_workflow_and_shows_the_trace():
    result = invoke(
        "run", "Custom -> Format", "--task", "arithmetic:easy", "--n", "2", "--model", "tiny-random"
    )
    assert result.exit_code == 0, result.output
    assert "[Custom/llm" in result.output and "[Format/llm" in result.output
    assert "0/2 correct" in result.output or "1/2 correct" in result.output


def test_run_rejects_an_invalid_workflow_before_loading_anything():
    result = CliRunner().invoke(main, ["run", "Revise -> ScEnsemble", "--model", "nonexistent"])
    assert result.exit_code == 1
    assert "needs_solution" in result.output


def test_diagnose_and_analyze_explain_bad_paths(tmp_path):
    assert CliRunner().invoke(main, ["diagnose", str(tmp_path / "nope")]).exit_code == 2
    result = CliRunner().invoke(main, ["analyze"])
    assert result.exit_code == 2 and "RUN_DIR or --samples" in result.output


def test_eval_base_and_trained_then_compare(tmp_path):
    run_dir = tmp_path / "run"
    assert (
        invoke(
            "train",
            "--config",
            "configs/tiny.yaml",
            "--max-steps",
            "1",
            "--output-dir",
            str(run_dir),
        ).exit_code
        == 0
    )
    base_json, trained_json = tmp_path / "base.json", tmp_path / "trained.json"
    base = invoke(
        "eval",
        "--base",
        "--model",
        "tiny-random",
        "--task",
        "arithmetic:easy",
        "--n",
        "2",
        "--k",
        "2",
        "--json",
        str(base_json),
    )
    assert base.exit_code == 0, base.output
    trained = invoke(
        "eval",
        "--adapter",
        str(run_dir / "checkpoint-1"),
        "--task",
        "arithmetic:easy",
        "--n",
        "2",
        "--json",
        str(trained_json),
    )
    assert trained.exit_code == 0, trained.output
    result = json.loads(base_json.read_text())
    assert result["problems"] == 2 and result["samples"] == 4 and "pass@2" in result
    assert 0 <= result["validity_rate"] <= 1 and result["fallback_rate"] >= 0
    assert "+ " in json.loads(trained_json.read_text())["model"], "the adapter was loaded"
    table = invoke("eval", "--compare", str(base_json), str(trained_json))
    assert table.exit_code == 0 and "validity_rate" in table.output


def test_eval_needs_exactly_one_model_source():
    result = CliRunner().invoke(main, ["eval"])
    assert result.exit_code == 2 and "--adapter" in result.output
