"""The open operator set: OperatorSpec/OperatorTable, per-call tables, the process-wide default."""

import json

import pytest

from flowgrpo.dsl import (
    AFLOW_OPERATORS,
    OPERATORS,
    OperatorSpec,
    OperatorTable,
    declare_operator,
    default_table,
    extract,
    operators_for_domain,
    undeclare_operator,
    validate,
)

CRITIQUE = OperatorSpec("Critique", "checker", ("math", "qa"), description="judges the answer")
TABLE = AFLOW_OPERATORS.extend(CRITIQUE)


def codes(report):
    return [p.code for p in report.errors]


def test_a_custom_checker_validates_with_its_table_only():
    text = "Custom -> Critique ? Revise : done"
    assert validate(text, domain="math", operators=TABLE).ok
    report = validate(text, domain="math")  # the default table does not know it
    assert codes(report) == ["unknown_operator"]  # not also "condition_not_checker"


def test_an_unknown_operator_still_fails_with_the_closest_name_of_the_table():
    report = validate("Custom -> Critiqe ? Revise : done", operators=TABLE)
    unknown = next(p for p in report.errors if p.code == "unknown_operator")
    assert unknown.hint == "did you mean 'Critique'?"


def test_roles_and_domains_of_custom_operators_are_enforced():
    table = OperatorTable(
        [
            {"name": "Solve", "role": "generator"},
            {"name": "Vote", "role": "ensembler", "domains": ["qa"]},
            {"name": "Polish", "role": "refiner"},
        ]
    )
    assert validate("[Solve, Solve] -> Vote -> Polish", domain="qa", operators=table).ok
    assert codes(validate("Polish -> Solve", operators=table)) == ["needs_solution"]
    assert codes(validate("Solve -> Vote", operators=table)) == ["ensemble_needs_candidates"]
    report = validate("[Solve, Solve] -> Vote", domain="math", operators=table)
    assert codes(report) == ["operator_not_allowed"]
    assert "Custom" not in table  # a table from records alone has no AFlow operators
    assert codes(validate("Custom", operators=table)) == ["unknown_operator"]


def test_the_condition_message_lists_the_tables_checkers():
    report = validate("Custom -> Revise ? Revise : done", operators=TABLE)
    assert "(Review, Test or Critique)" in report.errors[0].message


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"name": "critique", "role": "checker"}, "capitalised identifier"),
        ({"name": "Critique", "role": "judge"}, "role 'judge' is not one of"),
        ({"name": "Critique", "role": "checker", "domains": []}, "domains must be"),
        ({"name": "Critique"}, "missing role"),
        ({"name": "Critique", "role": "checker", "colour": "red"}, "unknown key"),
    ],
)
def test_bad_operator_records_name_the_problem(record, message):
    with pytest.raises(ValueError, match=message):
        OperatorTable([record])


def test_duplicate_names_in_a_table_raise():
    with pytest.raises(ValueError, match="listed twice"):
        AFLOW_OPERATORS.extend(OperatorSpec("Review", "checker"))


def test_load_a_table_from_yaml_and_json(tmp_path):
    yaml_file = tmp_path / "ops.yaml"
    yaml_file.write_text(
        "- name: Critique\n  role: checker\n  domains: [math, qa]\n"
        "  description: judges the answer\n"
    )
    assert OperatorTable.load(yaml_file) == TABLE  # a bare list extends the AFlow set
    json_file = tmp_path / "ops.json"
    only = {"extends": "none", "operators": [{"name": "Solve", "role": "generator"}]}
    json_file.write_text(json.dumps(only))
    assert list(OperatorTable.load(json_file)) == ["Solve"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: Critique\n")
    with pytest.raises(ValueError, match=r"bad.yaml: operator 0: missing role"):
        OperatorTable.load(bad)


def test_a_file_that_extends_none_and_declares_nothing_is_refused(tmp_path):
    # every workflow would be invalid, with the hint "operators: " naming none
    empty = tmp_path / "empty.yaml"
    empty.write_text("extends: none\noperators: []\n")
    with pytest.raises(ValueError, match=r"empty.yaml: extends none and declares no operators"):
        OperatorTable.load(empty)


def test_declared_operators_join_the_default_table_until_undeclared():
    assert "Critique" not in OPERATORS
    declare_operator(CRITIQUE)
    try:
        declare_operator(CRITIQUE)  # the same spec again: no-op
        assert "Critique" in OPERATORS and default_table() == TABLE
        assert "Critique" in operators_for_domain("qa")
        assert validate("AnswerGenerate -> Critique ? Revise : done", domain="qa").ok
        assert extract("Solve it:\nAnswerGenerate -> Critique ? Revise : done").parses
        with pytest.raises(ValueError, match="already declared"):
            declare_operator(OperatorSpec("Critique", "refiner"))
    finally:
        undeclare_operator("Critique")
    assert "Critique" not in OPERATORS
    assert default_table() == AFLOW_OPERATORS
    assert not validate("Custom -> Critique ? Revise : done").ok  # no stale cached verdict
    with pytest.raises(ValueError, match="AFlow operator"):
        undeclare_operator("Review")


def test_a_bare_line_of_custom_operators_is_extracted_with_their_table():
    table = OperatorTable([OperatorSpec("Solve", "generator"), OperatorSpec("Check", "checker")])
    output = "Here you go\nSolve -> Check ? Solve : done"
    assert extract(output).fallback  # no AFlow operator on the line
    found = extract(output, operators=table)
    assert found.dsl == "Solve -> Check ? Solve : done"


def test_an_empty_extends_is_refused_not_read_as_none(tmp_path):
    """``extends:`` left empty is YAML null; it read as "none" and dropped the AFlow set."""
    path = tmp_path / "mine.yaml"
    path.write_text("extends:\noperators:\n  - {name: Critique, role: checker}\n")
    with pytest.raises(ValueError, match=r"mine\.yaml: extends must be aflow or none"):
        OperatorTable.load(path)
    path.write_text("operators:\n  - {name: Critique, role: checker}\n")  # left out: aflow
    assert {"Custom", "Critique"} <= set(OperatorTable.load(path))
