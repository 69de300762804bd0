"""``flowgrpo eval --search FILE``: the search's pick scored on the held-out problems like a
policy's samples, in the setting of the checkpoint given."""

import json

from click.testing import CliRunner
from test_cli_eval_simulated import simulated_run

from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.cli.app import main

BY_LEVEL = {
    "easy": "Programmer",
    "medium": "AnswerGenerate",
    "hard": "Custom -> Review ? Revise : done",
}


def _labelled() -> dict:
    labels = {
        level: {"top": [{"workflow": w}, {"workflow": "Custom"}]} for level, w in BY_LEVEL.items()
    }
    return {"by": ["difficulty"], "labels": labels}


def _eval(*args):
    return CliRunner().invoke(main, ["eval", *map(str, args)])


def test_eval_scores_each_held_out_problem_with_its_labels_pick_in_the_runs_setting(tmp_path):
    checkpoint = simulated_run(tmp_path / "run")
    search = tmp_path / "search.json"
    search.write_text(json.dumps(_labelled()))
    out = tmp_path / "pick.json"
    result = _eval(checkpoint, "--search", search, "--task", "arithmetic", "--n", "6",
                   "--k", "2", "--json", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    problems = load_task("arithmetic", n=6, seed=0, split="test")  # the eval's held-out draw
    expected = [BY_LEVEL[p.meta["difficulty"]] for p in problems for _ in range(2)]
    assert data["sample_workflows"] == expected
    assert data["executor"].startswith("SIMULATED")
    assert data["settings"]["executor_limits"]["max_llm_calls"] == 3  # the run's own limits
    assert data["model"].startswith(f"the pick of {search}")


def test_eval_refuses_search_with_base_or_all_and_reports_a_missing_file(tmp_path):
    missing = tmp_path / "none.json"
    for args in (("--base", "--search", missing), (tmp_path, "--all", "--search", missing)):
        result = _eval(*args)
        assert result.exit_code == 2 and "--search" in result.output, result.output
    result = _eval("--search", missing, "--model", "tiny-random", "--executor", "simulated")
    assert result.exit_code == 2 and "no such file" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_pick_the_runs_setting_does_not_accept_is_an_error_not_a_table_of_zeros(tmp_path):
    # a search made with a larger call budget: the run (3 calls) cannot run its pick; scored,
    # every workflow was invalid and the result read validity 0 with no reason
    checkpoint = simulated_run(tmp_path / "run")
    search = tmp_path / "search.json"
    heavy = "[Custom, Custom, Custom] -> ScEnsemble -> Review ? Revise : done"
    search.write_text(json.dumps({"top": [{"workflow": heavy}]}))  # one pick for every problem
    result = _eval(checkpoint, "--search", search, "--task", "arithmetic", "--n", "2")
    assert result.exit_code == 2, result.output
    assert "which this setting does not accept" in result.output and "(limit 3)" in result.output
