"""Semantic validation: codes, positions, every problem at once, shape metrics, caching."""

import pytest

from flowgrpo.dsl import Cond, Loop, Op, Parallel, Seq, StaticLimits, Workflow, parse, validate
from flowgrpo.dsl.parser import _parse_or_error  # the caches, observed
from flowgrpo.dsl.validate import _validate_cached, clear_caches


def codes(report):
    return [p.code for p in report.errors]


# (source, expected error codes in source order, positions of those errors)
BAD = [
    ("Custm -> Review ? Revise : done", ["unknown_operator"], [(1, 1)]),
    ("Revise", ["needs_solution"], [(1, 1)]),
    ("Review ? Revise : done", ["needs_solution"], [(1, 1)]),
    ("Custom -> ScEnsemble", ["ensemble_needs_candidates"], [(1, 11)]),
    ("Custom -> Custom ? Revise : done", ["condition_not_checker"], [(1, 11)]),
    ("Custom -> (Review -> Revise) ? Format : done", ["condition_not_checker"], [(1, 12)]),
    ("Custom -> (Review -> Revise) * 9", ["loop_count"], [(1, 32)]),
    ("Custom -> (Review -> Revise) * 0", ["loop_count"], [(1, 32)]),
    (
        "Revise -> Custm -> ScEnsemble -> (Review -> Revise) * 7",
        ["needs_solution", "unknown_operator", "ensemble_needs_candidates", "loop_count"],
        [(1, 1), (1, 11), (1, 20), (1, 55)],
    ),
]


@pytest.mark.parametrize(("source", "expected", "positions"), BAD)
def test_every_semantic_problem_is_reported_with_its_position(source, expected, positions):
    report = validate(source, limits=StaticLimits(max_calls=20))  # the call count apart
    assert not report.ok
    assert codes(report) == expected
    assert [(p.line, p.column) for p in report.errors] == positions
    assert all(p.hint and p.message for p in report.errors)
    assert report.canonical is not None, "a semantically bad workflow still has a canonical form"


def test_unknown_operator_suggests_the_closest_name():
    (problem,) = validate("Custom -> Reveiw").errors
    assert problem.code == "unknown_operator"
    assert "Review" in problem.hint


def test_a_typo_in_a_checkers_name_is_one_error_and_no_warning():
    """Issue 43: 'Reviw ? Revise' also warned that Revise has no feedback."""
    report = validate("Custom -> Reviw ? Revise : done")
    assert [p.code for p in report.errors] == ["unknown_operator"] and report.warnings == ()
    assert [p.code for p in validate("Custom -> Revise").warnings] == ["revise_without_feedback"]


@pytest.mark.parametrize(
    ("source", "domain", "bad"),
    [
        ("CustomCodeGenerate -> Test ? Revise : done", "math", ["CustomCodeGenerate", "Test"]),
        ("Programmer -> Format", "code", ["Programmer", "Format"]),
        ("Programmer", "qa", ["Programmer"]),
    ],
)
def test_operators_are_checked_against_the_domain(source, domain, bad):
    report = validate(source, domain=domain)
    flagged = [p.message.split()[0] for p in report.errors if p.code == "operator_not_allowed"]
    assert flagged == bad
    assert validate(source).ok, "without a domain every operator is allowed"


def test_explicit_allowed_operators_override_the_domain():
    report = validate("Custom -> Programmer", allowed_operators=frozenset({"Custom"}))
    assert codes(report) == ["operator_not_allowed"]


def test_unknown_domain_lists_the_choices():
    with pytest.raises(ValueError, match="math, code, qa"):
        validate("Custom", domain="chess")


def test_limits_are_parameters():
    source = "Custom -> (Review -> Revise) * 4"
    assert validate(source).ok
    assert codes(validate(source, limits=StaticLimits(max_loop_count=3))) == ["loop_count"]
    assert codes(validate(source, limits=StaticLimits(max_calls=8))) == ["too_many_calls"]
    deep = "Custom -> ((Review ? Revise : done) * 2) * 2"
    assert codes(validate(deep, limits=StaticLimits(max_depth=2))) == ["too_deep"]
    with pytest.raises(ValueError, match="max_calls"):
        StaticLimits(max_calls=0)


@pytest.mark.parametrize(
    ("source", "warning"),
    [
        ("Custom -> Revise", "revise_without_feedback"),
        ("Custom -> (Revise -> Format) * 2", "loop_without_checker"),
        ("Custom -> (Review -> Revise) * 1", "loop_once"),
        ("Custom -> Review ? done : done", "empty_conditional"),
        ('[Custom, Custom] -> ScEnsemble("x")', "instruction_ignored"),
    ],
)
def test_warnings_do_not_make_a_workflow_invalid(source, warning):
    report = validate(source)
    assert report.ok
    assert warning in [w.code for w in report.warnings]


@pytest.mark.parametrize(
    ("source", "operators", "calls"),
    [
        ("Custom", ("Custom",), 1),
        (
            "Custom -> Programmer -> Review ? Revise : done",
            ("Custom", "Programmer", "Review", "Revise"),
            4,
        ),
        (
            "[Custom, Custom, Programmer] -> ScEnsemble -> Format",
            ("Custom", "Custom", "Programmer", "ScEnsemble", "Format"),
            5,
        ),
        ("AnswerGenerate -> (Review -> Revise) * 3", ("AnswerGenerate", "Review", "Revise"), 7),
        (
            "Custom -> Review ? (Revise -> Format) : Format",
            ("Custom", "Review", "Revise", "Format", "Format"),
            4,
        ),
        ("Custom -> (Review ? Revise : done) * 2", ("Custom", "Review", "Revise"), 5),
    ],
)
def test_operators_in_execution_order_and_worst_case_calls(source, operators, calls):
    report = validate(source)
    assert report.operators == operators
    assert report.calls == calls


def test_features_list_every_construct():
    report = validate('[Custom("x"), Custom] -> ScEnsemble -> (Review ? Revise : done) * 2')
    assert report.structure == "loop"
    assert report.features == {"chain", "parallel", "conditional", "loop", "instruction"}
    assert validate("Custom").features == frozenset()


def test_syntax_error_is_one_error_in_the_report_not_an_exception():
    report = validate("Custom -> Review ? Revise")
    assert not report.ok and not report.syntax_ok
    (problem,) = report.errors
    assert problem.code == "syntax_error"
    assert (problem.line, problem.column) == (1, 26)
    assert "1:26" not in problem.message, "the position is in .line/.column, not repeated"
    assert report.workflow is None and report.canonical is None and report.structure is None


def test_validate_accepts_an_ast_built_in_code():
    workflow = Workflow(Seq((Parallel((Op("Custom"), Op("Programmer"))), Op("ScEnsemble"))))
    report = validate(workflow)
    assert report.ok
    assert report.canonical == "[Custom, Programmer] -> ScEnsemble"
    assert parse(report.canonical) == workflow


def test_results_for_identical_inputs_are_cached():
    text = "Custom -> Programmer -> Review ? Revise : done -> Format"
    assert validate(text) is validate(text)
    assert validate(text, domain="math") is not validate(text)


def test_validate_rejects_non_text_input_clearly():
    with pytest.raises(TypeError, match="text or a Workflow"):
        validate(42)  # type: ignore[arg-type]


def test_clear_caches_empties_the_parse_and_validate_caches():
    validate("Custom -> Programmer", domain="math")
    assert _parse_or_error.cache_info().currsize > 0
    assert _validate_cached.cache_info().currsize > 0
    clear_caches()
    assert _parse_or_error.cache_info().currsize == 0
    assert _validate_cached.cache_info().currsize == 0


@pytest.mark.parametrize("depth", [400, 3000])
def test_nesting_past_what_the_passes_can_walk_is_a_too_deep_error_not_a_crash(depth):
    report = validate("(Review ? " * depth + "Custom" + " : done)" * depth)
    assert [p.code for p in report.errors] == ["too_deep"]
    assert "flatten" in report.errors[0].hint


@pytest.mark.parametrize(
    ("root", "message"),
    [
        (Seq(()), "a Seq needs a tuple of at least two steps"),
        (Seq((Op("Custom"),)), "a Seq needs a tuple of at least two steps"),
        (Seq([Op("Custom"), Op("Review")]), "a Seq needs a tuple"),  # a list: not hashable
        (Seq((Op("Custom"), Seq((Op("Review"), Op("Revise"))))), "a Seq step is itself a Seq"),
        (None, "the root is None"),
        (Parallel(()), "a Parallel needs a tuple of at least two branches"),
        (Cond(None, Op("Revise"), None), "a Cond needs a checker"),
        (Loop(Op("Custom"), 2.5), "a Loop's count must be a whole number, got 2.5"),
        (Loop(Op("Custom"), "2"), "a Loop's count must be a whole number, got '2'"),
        (Op("Custom", 5), "Custom's instruction must be a string or None"),
        (Op(""), "an Op's name must be a non-empty string"),
        (Seq((Op("Custom"), None)), "done stands only as a branch of a Cond"),
        (Parallel((Op("Custom"), None)), "done stands only as a branch of a Cond, not of a P"),
        (Seq((Op("Custom"), "Review")), "not a workflow node: 'Review'"),
    ],
)
def test_a_hand_built_tree_outside_the_normal_form_is_an_error_not_a_crash(root, message):
    """Every pass assumes the parser's normal form (dsl/ast.py): a tree built otherwise was
    reported valid (``Seq(())`` with canonical text '') or crashed deep in a pass."""
    report = validate(Workflow(root))
    assert not report.ok and report.workflow is None
    assert [p.code for p in report.errors] == ["malformed_workflow"]
    assert message in report.errors[0].message


def test_the_allowed_names_and_limits_arguments_are_checked():
    with pytest.raises(TypeError, match=r"got the string 'Custom': give a list or set"):
        validate("Custom", allowed_operators="Custom")  # was: the set of its letters
    with pytest.raises(ValueError, match="allowed_operators names Foo, which the operator"):
        validate("Custom", allowed_operators={"Foo", "Custom"})
    with pytest.raises(TypeError, match="limits must be a StaticLimits"):
        validate("Custom", limits={"max_calls": 3})
    assert validate("Custom", limits=None) is validate("Custom")  # None: the defaults
