"""`flowgrpo validate`: output, exit codes, files, extraction, JSON."""

import json
import subprocess
import sys

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main

GOOD = "Custom -> Programmer -> Review ? Revise : done"


def run(*args, input=None):
    return CliRunner().invoke(main, ["validate", *args], input=input)


def test_valid_workflow_exits_0_and_prints_canonical_form_and_structure():
    result = run("Custom->Programmer->(Review?Revise:done)")
    assert result.exit_code == 0
    assert "valid" in result.output and GOOD in result.output and "conditional" in result.output


def test_invalid_workflow_exits_1_with_a_caret_under_the_column():
    result = run("Custom -> Review ? Revise")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    source_line = next(i for i, ln in enumerate(lines) if ln.strip() == "Custom -> Review ? Revise")
    caret = lines[source_line + 1]
    assert caret.index("^") - lines[source_line].index("C") == 25  # column 26 is 1-based
    assert "hint:" in result.output


def test_any_invalid_input_makes_the_exit_code_1():
    assert run(GOOD, "Revise").exit_code == 1
    assert run(GOOD, "Custom").exit_code == 0


def test_votes_and_retries_count_as_a_runs_reward_counts_them():
    # one call per operator: 10, within 12; MdEnsemble votes 3 times: 16, as a run refuses it
    votes = "[Custom, Custom] -> MdEnsemble -> " * 3 + "Format"
    result = run(votes)
    assert result.exit_code == 1
    assert "makes up to 16 executor calls (limit 12; MdEnsemble makes 3)" in result.output
    assert run("[Programmer, Programmer] -> MdEnsemble -> Programmer * 2 -> Custom").exit_code == 0


def test_usage_errors_exit_2():
    assert run().exit_code == 2
    assert run("--domain", "chess", GOOD).exit_code == 2
    result = run("--file", "/no/such/file.txt")
    assert result.exit_code == 2 and "No such file" in result.output


def test_file_input_one_per_line(tmp_path):
    f = tmp_path / "w.txt"
    f.write_text(f"{GOOD}\n\nCustom -> ScEnsemble\n")
    result = run("--file", str(f), "--json")
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["ok"] for r in rows] == [True, False]
    assert rows[1]["errors"][0]["code"] == "ensemble_needs_candidates"


def test_extract_mode_finds_workflows_in_model_output_and_flags_prose():
    result = run("--extract", "--json", f"Sure:\n```\n{GOOD}\n```", "### Step 1: Analyze")
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows[0]["ok"] and rows[0]["canonical"] == GOOD and rows[0]["source"] == "fence"
    assert rows[1]["fallback"] and not rows[1]["ok"]
    assert result.exit_code == 1


def test_domain_option_checks_operators():
    result = run("--domain", "code", "--json", "Programmer")
    assert result.exit_code == 1
    assert json.loads(result.output)["errors"][0]["code"] == "operator_not_allowed"


def test_console_script_runs_without_importing_torch():
    code = (
        "import sys; from flowgrpo.trainer.cli.app import main; "
        "sys.argv=['flowgrpo','validate','Custom']; "
        "import atexit; atexit.register(lambda: print('torch' in sys.modules)); main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.strip().endswith("False")


def test_run_refuses_a_workflow_its_budget_would_cut_short_before_building_anything():
    votes = "[Custom, Custom] -> MdEnsemble -> " * 3 + "Format"  # 16 calls, budget 12
    result = CliRunner().invoke(main, ["run", votes, "--n", "1"])
    assert result.exit_code == 1
    assert "makes up to 16 executor calls (limit 12; MdEnsemble makes 3)" in result.output
    assert "loading" not in result.output and "executing" not in result.output
