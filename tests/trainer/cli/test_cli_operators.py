"""`flowgrpo validate --operators FILE`: a custom operator table from YAML/JSON."""

import json

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main

TABLE = "- name: Critique\n  role: checker\n  domains: [math, qa]\n  description: judges it\n"


def run(*args):
    return CliRunner().invoke(main, ["validate", *args])


def test_a_custom_operator_validates_and_a_typo_gets_a_suggestion(tmp_path):
    path = tmp_path / "ops.yaml"
    path.write_text(TABLE)
    ok = run(
        "--operators", str(path), "--domain", "qa", "AnswerGenerate -> Critique ? Revise : done"
    )
    assert ok.exit_code == 0, ok.output
    bad = run("--operators", str(path), "--json", "Custom -> Critiqe ? Revise : done")
    assert bad.exit_code == 1
    errors = json.loads(bad.output)["errors"]
    assert {"code": "unknown_operator", "hint": "did you mean 'Critique'?"}.items() <= next(
        e for e in errors if e["code"] == "unknown_operator"
    ).items()
    without = run("Custom -> Critique ? Revise : done")  # the default table does not know it
    assert without.exit_code == 1 and "unknown operator 'Critique'" in without.output


def test_a_replacing_table_and_bad_tables(tmp_path):
    only = tmp_path / "only.json"
    only.write_text(
        json.dumps({"extends": "none", "operators": [{"name": "Solve", "role": "generator"}]})
    )
    assert run("--operators", str(only), "Solve").exit_code == 0
    assert run("--operators", str(only), "Custom").exit_code == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: Critique\n  role: judge\n")
    result = run("--operators", str(bad), "Custom")
    assert result.exit_code == 2
    assert "--operators:" in result.output and "role 'judge' is not one of" in result.output
    assert run("--operators", str(tmp_path / "none.yaml"), "Custom").exit_code == 2
