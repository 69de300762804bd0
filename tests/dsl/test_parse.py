"""Parser and canonical form: tables of good programs, tables of bad ones."""

import gc
import weakref

import pytest

from flowgrpo.dsl import (
    Cond,
    DSLError,
    DSLSyntaxError,
    Loop,
    Op,
    Parallel,
    Seq,
    Workflow,
    canonical,
    parse,
    validate,
)

# (source, canonical form, structure)
VALID = [
    ("Custom", "Custom", "single"),
    ("  Custom\n", "Custom", "single"),
    ("(Custom)", "Custom", "single"),
    ("((Custom))", "Custom", "single"),
    ("Custom -> Programmer", "Custom -> Programmer", "chain"),
    ("Custom->Programmer->Format", "Custom -> Programmer -> Format", "chain"),
    ("Custom -> (Programmer -> Format)", "Custom -> Programmer -> Format", "chain"),
    ("(Custom -> Programmer) -> Format", "Custom -> Programmer -> Format", "chain"),
    (
        "Custom -> Programmer -> Review ? Revise : done",
        "Custom -> Programmer -> Review ? Revise : done",
        "conditional",
    ),
    ("Custom -> Review ? done : Format", "Custom -> Review ? done : Format", "conditional"),
    (
        "Custom -> Review ? (Revise -> Format) : done",
        "Custom -> Review ? (Revise -> Format) : done",
        "conditional",
    ),
    ("Custom -> (Review ? Revise : done)", "Custom -> Review ? Revise : done", "conditional"),
    (
        "[Custom, Custom, Programmer] -> ScEnsemble -> Format",
        "[Custom, Custom, Programmer] -> ScEnsemble -> Format",
        "parallel",
    ),
    (
        "[ (Custom) , Custom->Format ] -> MdEnsemble",
        "[Custom, Custom -> Format] -> MdEnsemble",
        "parallel",
    ),
    (
        "AnswerGenerate -> (Review -> Revise) * 2",
        "AnswerGenerate -> (Review -> Revise) * 2",
        "loop",
    ),
    ("Custom -> Revise * 3", "Custom -> Revise * 3", "loop"),
    ("Custom -> (Revise * 2) * 3", "Custom -> (Revise * 2) * 3", "loop"),
    ("Custom -> (Review ? Revise : done) * 2", "Custom -> (Review ? Revise : done) * 2", "loop"),
    (
        "[Custom, Custom] -> ScEnsemble -> (Review -> Revise) * 2",
        "[Custom, Custom] -> ScEnsemble -> (Review -> Revise) * 2",
        "loop",
    ),
    (
        "[Custom -> Review ? Revise : done, Programmer] -> ScEnsemble",
        "[Custom -> Review ? Revise : done, Programmer] -> ScEnsemble",
        "parallel",
    ),
    ('Custom("think step by step")', 'Custom("think step by step")', "single"),
    ("Custom('single quotes')", 'Custom("single quotes")', "single"),
    ('Custom("say \\"hi\\"\\n")', 'Custom("say \\"hi\\"\\n")', "single"),
    (
        "Custom -> Review ? Revise : done -> Format",
        "Custom -> Review ? Revise : done -> Format",
        "conditional",
    ),
    ("Custom ->\n  Programmer ->\n  Format", "Custom -> Programmer -> Format", "chain"),
]


@pytest.mark.parametrize(("source", "expected", "structure"), VALID)
def test_valid_programs_parse_to_their_canonical_form(source, expected, structure):
    workflow = parse(source)
    assert canonical(workflow) == expected
    assert parse(expected) == workflow
    assert validate(source).structure == structure


def test_ast_shape_of_a_full_example():
    w = parse('[Custom("a"), Programmer] -> ScEnsemble -> (Review ? Revise : done) * 2')
    assert w == Workflow(
        Seq(
            (
                Parallel((Op("Custom", "a"), Op("Programmer"))),
                Op("ScEnsemble"),
                Loop(Cond(Op("Review"), Op("Revise"), None), 2),
            )
        )
    )


def test_nodes_carry_positions_but_equality_ignores_them():
    w = parse("Custom ->\n   Programmer")
    second = w.root.steps[1]
    assert (second.line, second.column) == (2, 4)
    assert Op("Programmer") == second


def test_ast_is_frozen_and_hashable():
    w = parse("Custom -> Review ? Revise : done")
    with pytest.raises(AttributeError):
        w.root = Op("X")  # type: ignore[misc]
    assert hash(w) == hash(parse("Custom->Review?Revise:done"))


def test_instruction_escapes_round_trip():
    text = 'Custom("tab\\there, quote \\" backslash \\\\ newline \\n")'
    op = parse(text).root
    assert op.instruction == 'tab\there, quote " backslash \\ newline \n'
    assert parse(canonical(parse(text))) == parse(text)


# (source, substring of the message, line, column)
INVALID = [
    ("", "empty workflow", 1, 1),
    ("   \n ", "empty workflow", 1, 1),
    ("Custom ->", "expected an operator after '->'", 1, 10),
    ("Custom -> Programmer ->", "expected an operator after '->'", 1, 24),
    ("Custom -> -> Format", "expected an operator after '->'", 1, 11),
    ("Custom -> Review ? Revise", "'?' without ':'", 1, 26),
    ("Custom -> Review ? Revise -> Format", "'?' without ':'", 1, 27),
    ("Custom -> Review ? : done", "expected a branch", 1, 20),
    ("(Custom -> Review", "'(' is never closed", 1, 18),
    ("[Custom, Custom", "'[' is never closed", 1, 16),
    ("Custom -> Review)", "nothing to close", 1, 17),
    ("[Custom]", "at least two branches", 1, 8),
    ("(Review -> Revise) *", "expected a loop count", 1, 21),
    ("Custom * Review", "expected a loop count", 1, 10),
    ("custom -> Programmer", "'custom' is not an operator", 1, 1),
    ("Custom -> programmer", "'programmer' is not an operator", 1, 11),
    ("Custom Programmer", "expected '->' between steps", 1, 8),
    ("Custom -> done", "'done' is only allowed as a branch", 1, 11),
    ("Custom(", "bad instruction", 1, 8),
    ("Custom(Review)", "bad instruction", 1, 8),
    ("-> Custom", "expected an operator", 1, 1),
    ("()", "empty group", 1, 2),
    ("[Custom, ]", "expected a branch after ','", 1, 10),
    ("Custom → Review", "unknown arrow", 1, 8),
    ("### Step 1: Analyze the problem", "prose, not a workflow", 1, 1),
    ("To solve this we first add the numbers.", "prose, not a workflow", 1, 1),
    ("Custom -> Revise * 2.5", "unexpected character '.'", 1, 21),
    ("Custom ->\n  Review ->", "expected an operator after '->'", 2, 12),
]


@pytest.mark.parametrize(("source", "message", "line", "column"), INVALID)
def test_invalid_programs_raise_friendly_errors(source, message, line, column):
    with pytest.raises(DSLSyntaxError) as info:
        parse(source)
    err = info.value
    assert message in str(err)
    assert (err.line, err.column) == (line, column)
    assert f"{line}:{column}" in err.message
    assert err.hint, "every syntax error tells the user what to do"
    assert isinstance(err, DSLError)


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("custom -> Programmer", "did you mean 'Custom'?"),
        ("Custom -> reveiw", "did you mean 'Review'?"),
        ("Custom -> programer", "did you mean 'Programmer'?"),
        ("Custom -> Review ? Revise", "Review ? Revise : done"),
        ("(Review -> Revise) *", "(Review -> Revise) * 2"),
    ],
)
def test_hints_suggest_the_fix(source, hint):
    with pytest.raises(DSLSyntaxError) as info:
        parse(source)
    assert hint in info.value.hint


def test_parse_rejects_non_strings():
    with pytest.raises(TypeError):
        parse(None)  # type: ignore[arg-type]


def test_syntax_error_survives_pickling():
    import pickle

    with pytest.raises(DSLSyntaxError) as info:
        parse("Custom ->")
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.line, copy.column, copy.hint, str(copy)) == (
        info.value.line,
        info.value.column,
        info.value.hint,
        str(info.value),
    )


def test_a_syntax_error_keeps_no_frame_of_its_caller_alive():
    # parse() caches its errors; the exception a caller gets must not be the cached object,
    # or its traceback (and the caller's locals: a training step's rollout and model) would
    # live as long as the cache entry
    class Payload:
        pass

    def caller():
        payload = Payload()
        with pytest.raises(DSLSyntaxError) as info:
            parse("Custom -> ")
        assert info.value.line == 1
        return weakref.ref(payload)

    refs = [caller(), caller()]  # the second one is answered from the cache
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_lower_case_operator_names_get_the_capitalised_workflow_as_the_hint():
    from flowgrpo.dsl.validate import validate

    report = validate("custom -> review ? revise : done")
    (error,) = report.errors
    assert error.code == "syntax_error" and "capital letter" in error.message
    assert error.hint == "write Custom -> Review ? Revise : done"
    prose = validate("first we think then we answer").errors[0]
    assert "looks like prose" in prose.message


def test_done_in_capitals_is_told_to_be_lower_case():
    from flowgrpo.dsl.validate import validate

    (error,) = validate("Custom -> Review ? Revise : Done").errors
    assert error.code == "unknown_operator" and "written done, in lower case" in error.hint
