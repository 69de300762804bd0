"""The shape of a workflow: its constructs, structure class, worst-case calls and nesting
depth, each by one walk of the tree (:func:`flowgrpo.dsl.validate` notes the same during its
checking pass; these are the references its property tests compare with)."""

from __future__ import annotations

from collections.abc import Callable

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Visitor, Workflow, walk


def features_of(workflow: Workflow | Node) -> frozenset[str]:
    """Every construct present: chain, conditional, loop, parallel, instruction."""
    feature = _Feature()
    return frozenset(f for f in map(feature.visit, walk(workflow)) if f is not None)


class _Feature(Visitor[str | None]):
    """The construct one node is (None: an operator call without an instruction)."""

    def visit_seq(self, node: Seq) -> str:
        return "chain"

    def visit_cond(self, node: Cond) -> str:
        return "conditional"

    def visit_loop(self, node: Loop) -> str:
        return "loop"

    def visit_parallel(self, node: Parallel) -> str:
        return "parallel"

    def visit_op(self, node: Op) -> str | None:
        return None if node.instruction is None else "instruction"


def structure_of(workflow: Workflow | Node) -> str:
    """The structure class: loop > parallel > conditional > chain > single (first present)."""
    return structure_from_features(features_of(workflow))


def structure_from_features(found: frozenset[str]) -> str:
    """The structure class of a set of constructs (as :func:`features_of` gives them)."""
    for name in ("loop", "parallel", "conditional", "chain"):
        if name in found:
            return name
    return "single"


def count_calls(node: Node | None, op_calls: Callable[[Op], int] | None = None) -> int:
    """Worst-case operator calls with loops expanded (the longer branch of a conditional).

    ``op_calls(op)``: the calls one operator makes at most (default 1 each).
    """
    return _Calls(op_calls or (lambda _op: 1)).visit(node)


class _Calls(Visitor[int]):
    def __init__(self, op_calls: Callable[[Op], int]):
        self.op_calls = op_calls

    def visit_done(self) -> int:
        return 0

    def visit_op(self, node: Op) -> int:
        return self.op_calls(node)

    def visit_seq(self, node: Seq) -> int:
        return sum(map(self.visit, node.steps))

    def visit_parallel(self, node: Parallel) -> int:
        return sum(map(self.visit, node.branches))

    def visit_cond(self, node: Cond) -> int:
        return self.visit(node.check) + max(self.visit(node.if_fail), self.visit(node.if_pass))

    def visit_loop(self, node: Loop) -> int:
        return node.count * self.visit(node.body)


def nesting_depth(node: Node | None) -> int:
    """Deepest nesting of parallel / conditional / loop constructs (0 for a plain chain)."""
    return _Depth().visit(node)


class _Depth(Visitor[int]):
    def visit_done(self) -> int:
        return 0

    def visit_op(self, node: Op) -> int:
        return 0

    def visit_seq(self, node: Seq) -> int:
        return max(map(self.visit, node.steps))

    def visit_parallel(self, node: Parallel) -> int:
        return 1 + max(map(self.visit, node.branches))

    def visit_cond(self, node: Cond) -> int:
        return 1 + max(map(self.visit, (node.check, node.if_fail, node.if_pass)))

    def visit_loop(self, node: Loop) -> int:
        return 1 + self.visit(node.body)
