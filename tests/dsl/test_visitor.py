"""The one AST visitor: dispatch by node type, and every pass over the AST goes through it."""

import ast
from pathlib import Path

import pytest

from flowgrpo.dsl import (
    Cond,
    Loop,
    Op,
    Parallel,
    Seq,
    Visitor,
    Workflow,
    count_calls,
    op_nodes,
    parse,
    steps_of,
)

ROOT = Path(__file__).resolve().parents[2]
#: The node classes whose type no pass may test itself (Op stays testable: "is it a call?").
BRANCHING = {"Seq", "Parallel", "Cond", "Loop"}


class Names(Visitor[str]):
    """Records which method ran and with which extra arguments."""

    def visit_op(self, node, *args):
        return f"op:{node.name}:{args}"

    def visit_seq(self, node, *args):
        return f"seq:{len(node.steps)}:{args}"

    def visit_parallel(self, node, *args):
        return f"parallel:{len(node.branches)}:{args}"

    def visit_cond(self, node, *args):
        return f"cond:{args}"

    def visit_loop(self, node, *args):
        return f"loop:{node.count}:{args}"

    def visit_done(self, *args):
        return f"done:{args}"


A, B = Op("Custom"), Op("Review")


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (A, "op:Custom:(7,)"),
        (Seq((A, B)), "seq:2:(7,)"),
        (Parallel((A, B, A)), "parallel:3:(7,)"),
        (Cond(B, A, None), "cond:(7,)"),
        (Loop(Seq((B, A)), 3), "loop:3:(7,)"),
        (None, "done:(7,)"),
        (Workflow(Loop(A, 2)), "loop:2:(7,)"),  # a workflow visits its root
    ],
)
def test_visit_calls_the_method_of_the_node_type_with_the_extra_arguments(node, expected):
    assert Names().visit(node, 7) == expected


def test_a_method_the_pass_does_not_define_raises_naming_it():
    class OnlyOps(Visitor[int]):
        def visit_op(self, node):
            return 1

    assert OnlyOps().visit(A) == 1
    with pytest.raises(NotImplementedError, match="OnlyOps does not define visit_loop"):
        OnlyOps().visit(Loop(A, 2))


def test_something_that_is_not_a_node_raises_type_error():
    with pytest.raises(TypeError, match="not a workflow node"):
        Names().visit("Custom")


def test_count_calls_weighs_each_operator_and_takes_the_longer_branch():
    workflow = parse("Programmer -> [Custom, Programmer] -> (Review ? Revise : done) * 2")
    assert count_calls(workflow) == 1 + 2 + 2 * (1 + 1)
    weights = {"Programmer": 3, "Review": 5}
    # 3 + (1 + 3) + 2 * (5 + max(1, 0)) = 19
    assert count_calls(workflow, lambda op: weights.get(op.name, 1)) == 19
    assert count_calls(None) == 0


def test_op_nodes_and_steps_of():
    workflow = parse("Custom -> [Programmer, Custom] -> (Review ? Revise : done) * 2 -> ScEnsemble")
    names = [n.name for n in op_nodes(workflow)]
    assert names == ["Custom", "Programmer", "Custom", "Review", "Revise", "ScEnsemble"]
    assert len(steps_of(workflow.root)) == 4
    assert steps_of(A) == (A,)


def _branching_type_tests(path: Path) -> list[int]:
    """Lines of ``isinstance(x, Seq/Parallel/Cond/Loop ...)`` calls in one source file."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            classes = node.args[1] if len(node.args) == 2 else None
            elts = classes.elts if isinstance(classes, ast.Tuple) else [classes]
            if any(getattr(e, "id", None) in BRANCHING for e in elts):
                lines.append(node.lineno)
    return lines


def test_no_pass_outside_the_visitor_tests_node_types_itself():
    """Every pass over the AST dispatches through dsl.ast.Visitor (one `match` on node types)."""
    found = {}
    for folder in ("flowgrpo", "dsl", "operators", "rewards", "trainer", "scripts", "research"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "dsl" / "ast.py":
                continue
            if lines := _branching_type_tests(path):
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}, f"isinstance ladders over AST nodes (use dsl.ast.Visitor): {found}"
