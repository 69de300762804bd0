"""Property tests: random ASTs round-trip; random and mutated text never crash the library."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowgrpo.dsl import (
    OPERATORS,
    Cond,
    DSLSyntaxError,
    Loop,
    Op,
    Parallel,
    Seq,
    StaticLimits,
    Workflow,
    canonical,
    count_calls,
    extract,
    features_of,
    nesting_depth,
    parse,
    validate,
    walk,
)

NAMES = st.sampled_from(list(OPERATORS)) | st.from_regex(r"[A-Z][A-Za-z0-9_]{0,6}", fullmatch=True)
OPS = st.builds(Op, NAMES, st.none() | st.text(max_size=12))


def _seq(items):
    flat = []
    for item in items:
        flat.extend(item.steps if isinstance(item, Seq) else (item,))
    return Seq(tuple(flat))


def _extend(children):
    return (
        st.lists(children, min_size=2, max_size=4).map(_seq)
        | st.lists(children, min_size=2, max_size=3).map(lambda xs: Parallel(tuple(xs)))
        | st.builds(Cond, children, st.none() | children, st.none() | children)
        | st.builds(Loop, children, st.integers(0, 10_000))
    )


NODES = st.recursive(OPS, _extend, max_leaves=10)
WORKFLOWS = NODES.map(Workflow)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(WORKFLOWS)
def test_canonical_round_trips(workflow):
    text = canonical(workflow)
    assert parse(text) == workflow
    assert canonical(parse(text)) == text


def _noisy(node, rng: random.Random, where: str) -> str:
    """Print ``node`` with random whitespace and redundant parentheses (same meaning)."""
    ws = lambda: rng.choice(["", " ", "  ", "\n", "\t "])  # noqa: E731
    if isinstance(node, Seq):
        body = f"{ws()}->{ws()}".join(_noisy(s, rng, "step") for s in node.steps)
        return body if where == "seq" else f"({ws()}{body}{ws()})"
    if isinstance(node, (Loop, Cond)) and where == "unit":
        return f"({ws()}{_noisy(node, rng, 'step')}{ws()})"
    if isinstance(node, Loop):
        return f"{_noisy(node.body, rng, 'unit')}{ws()}*{ws()}{node.count}"
    if isinstance(node, Cond):
        br = lambda b: "done" if b is None else _noisy(b, rng, "unit")  # noqa: E731
        return f"{_noisy(node.check, rng, 'unit')}{ws()}?{ws()}{br(node.if_fail)}{ws()}:{ws()}{br(node.if_pass)}"  # noqa: E501
    if isinstance(node, Parallel):
        inner = f"{ws()},{ws()}".join(_noisy(b, rng, "seq") for b in node.branches)
        text = f"[{ws()}{inner}{ws()}]"
    else:
        text = canonical(node)
    return f"({ws()}{text}{ws()})" if rng.random() < 0.3 else text


@SETTINGS
@given(WORKFLOWS, st.randoms(use_true_random=False))
def test_whitespace_and_redundant_parentheses_do_not_change_the_canonical_form(workflow, rng):
    noisy = _noisy(workflow.root, rng, "seq")
    assert parse(noisy) == workflow
    assert canonical(parse(noisy)) == canonical(workflow)


DSL_ALPHABET = "->?:*()[],\"' \n\tCustomReviewRevisedoneProgrammerScEnsemble0123."


def _only_syntax_errors(text: str) -> None:
    try:
        parse(text)
    except DSLSyntaxError as err:
        assert err.line >= 1 and err.column >= 1
        assert err.hint
    report = validate(text)
    assert report.ok == (report.syntax_ok and not report.errors)
    assert report.syntax_ok == (report.workflow is not None)
    found = extract(text)
    assert found.fallback == (found.dsl is None)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet=DSL_ALPHABET, max_size=60))
def test_random_text_only_ever_gives_a_report_or_a_syntax_error(text):
    _only_syntax_errors(text)


@SETTINGS
@given(WORKFLOWS, st.randoms(use_true_random=False), st.integers(1, 4))
def test_mutated_workflows_only_ever_give_a_report_or_a_syntax_error(workflow, rng, n):
    chars = list(canonical(workflow))
    for _ in range(n):
        op = rng.choice(["delete", "insert", "replace"]) if chars else "insert"
        at = rng.randrange(len(chars) + (op == "insert"))
        if op == "delete" and chars:
            chars.pop(min(at, len(chars) - 1))
        elif op == "insert":
            chars.insert(at, rng.choice(DSL_ALPHABET))
        elif chars:
            chars[min(at, len(chars) - 1)] = rng.choice(DSL_ALPHABET)
    _only_syntax_errors("".join(chars))


@settings(max_examples=200, deadline=None)
@given(WORKFLOWS, st.randoms(use_true_random=False))
def test_the_accelerated_parser_agrees_with_the_reference_parser(workflow, rng):
    """lark-cython (when installed) must give the same AST and positions as pure Lark."""
    from flowgrpo.dsl.parser import _fast_lark, _lark

    text = _noisy(workflow.root, rng, "seq")
    fast, ref = _fast_lark().parse(text), _lark().parse(text)
    assert fast == ref
    positions = lambda w: [(n.line, n.column) for n in walk(w)]  # noqa: E731
    assert positions(fast) == positions(ref)


@settings(max_examples=300, deadline=None)
@given(WORKFLOWS)
def test_a_reports_features_and_operators_are_those_of_a_walk_of_its_tree(workflow):
    # validate notes them during its checking pass instead of walking the tree again
    report = validate(workflow)
    assert report.features == features_of(workflow)
    assert report.operators == tuple(n.name for n in walk(workflow) if isinstance(n, Op))
    assert report.calls == count_calls(workflow.root), "worst-case calls, counted in the pass"


@settings(max_examples=300, deadline=None)
@given(WORKFLOWS, st.integers(1, 3))
def test_too_deep_is_reported_exactly_when_the_nesting_depth_passes_the_limit(workflow, limit):
    # validate measures the depth during its checking pass; nesting_depth is the reference
    report = validate(workflow, limits=StaticLimits(max_depth=limit))
    too_deep = any(p.code == "too_deep" for p in report.errors)
    assert too_deep == (nesting_depth(workflow.root) > limit)
