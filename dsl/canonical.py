"""One printing per workflow, so that identical workflows compare equal as text.

``parse(canonical(w)) == w`` for every workflow ``w`` (tested with hypothesis), and whitespace or
redundant parentheses in the source do not change the canonical form.
"""

from __future__ import annotations

from typing import Any

from flowgrpo.dsl import ast as tree
from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Visitor, Workflow
from flowgrpo.dsl.operators import AFLOW_OPERATORS, ENSEMBLER

_QUOTE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})
#: Where a node is printed: where a whole sequence may stand (top level, parallel branch),
#: where one step of a sequence stands, where only a unit may stand (loop body, condition,
#: branch of a conditional). Parentheses are added where the node's form cannot stand.
_SEQ, _STEP, _UNIT = 0, 1, 2


def canonical(workflow: Workflow | Node, instructions: bool = True) -> str:
    """The canonical text of a workflow or AST node; without its operators' instructions when
    ``instructions`` is False (what two workflows that differ only in wording have in common).

    >>> from flowgrpo.dsl import parse
    >>> canonical(parse("( Custom )->[ Custom,Programmer ]->ScEnsemble"))
    'Custom -> [Custom, Programmer] -> ScEnsemble'
    >>> canonical(parse('Custom("be brief") -> Format'), instructions=False)
    'Custom -> Format'
    """
    return _Printer(instructions).visit(workflow, _SEQ)


def skeleton(workflow: Workflow | Node) -> str:
    """What a workflow runs, wording aside: its canonical text without instructions, with the
    spellings that run the same way written one way, so that two workflows that make the
    executor do the same work compare equal (what the diversity reward compares):

    * a loop of count 1 is its body (``(A -> B) * 1`` runs ``A -> B`` once);
    * a loop whose body is a loop is one loop of the product of their counts
      (``(B * 2) * 2`` is ``B * 4``: a passing checker ends both at the same run of ``B``);
    * outside loops, a check whose two branches are alike is the check then the branch
      (``Review ? X : X`` is ``Review -> X``, ``Review ? done : done`` is ``Review``; inside a
      loop they differ: a passing checker there skips the rest of a sequence, not a branch);
    * a parallel block whose candidates nothing after it reads is its first branch
      (``[Custom, Programmer] -> Format`` answers with Custom's solution, as ``Custom ->
      Format`` does, Programmer's only where Custom's is empty; only an ensembler, or an
      operator outside the AFlow set, which may fill ``{candidates}``, reads them, and in a
      loop the body's next run reads them too).

    >>> from flowgrpo.dsl import parse
    >>> skeleton(parse('(Custom("be brief") -> Format) * 1'))
    'Custom -> Format'
    >>> skeleton(parse("Custom * 1 -> (Review ? Revise : done) * 2"))
    'Custom -> (Review ? Revise : done) * 2'
    >>> skeleton(parse("[Custom, Programmer] -> Review ? Revise : Revise"))
    'Custom -> Review -> Revise'
    """
    return canonical(_Normalised().visit(workflow, False, False, False), instructions=False)


def _reads_candidates(node: Node | None) -> bool:
    """Whether an operator in ``node`` may read the candidates of a parallel block before it."""
    return node is not None and any(
        AFLOW_OPERATORS.role(op.name) in (None, ENSEMBLER) for op in tree.op_nodes(node)
    )


def _same(a: Node | None, b: Node | None) -> bool:
    return a is b or (
        a is not None and b is not None and canonical(a, False) == canonical(b, False)
    )


def _seq(*steps: Node) -> Node:
    """The sequence of ``steps`` (one step: itself)."""
    return steps[0] if len(steps) == 1 else Seq(steps)


class _Normalised(Visitor[Any]):
    """``visit(node, steps, in_loop, read_after)``: the node written as :func:`skeleton`
    writes it; with ``steps``, the tuple of steps it stands for in a sequence (so sequences
    come out flat). ``in_loop``: a loop encloses it; ``read_after``: the candidates it leaves
    may be read after it."""

    def _as(self, node: Node | None, steps: bool) -> Any:
        if not steps:
            return node
        return () if node is None else tree.steps_of(node)

    def visit_op(self, node: Op, steps: bool, in_loop: bool, read_after: bool) -> Any:
        return self._as(node, steps)

    def visit_done(self, steps: bool, in_loop: bool, read_after: bool) -> Any:
        return self._as(None, steps)

    def visit_seq(self, node: Seq, steps: bool, in_loop: bool, read_after: bool) -> Any:
        parts: list[tuple] = []
        for step in reversed(node.steps):  # from the end: whether a later step reads
            parts.append(self.visit(step, True, in_loop, read_after))
            read_after = read_after or _reads_candidates(step)
        return self._as(_seq(*(s for part in reversed(parts) for s in part)), steps)

    def visit_parallel(self, node: Parallel, steps: bool, in_loop: bool, read_after: bool):
        # inside a branch nothing after the block reads its candidates: the block's own
        # candidates replace them when the branches end
        branches = tuple(self.visit(b, False, in_loop, False) for b in node.branches)
        return self._as(Parallel(branches) if read_after else branches[0], steps)

    def visit_cond(self, node: Cond, steps: bool, in_loop: bool, read_after: bool) -> Any:
        read = read_after or _reads_candidates(node.if_fail) or _reads_candidates(node.if_pass)
        check = self.visit(node.check, False, in_loop, read)
        fail, passed = (
            self.visit(b, False, in_loop, read_after) for b in (node.if_fail, node.if_pass)
        )
        if not in_loop and _same(fail, passed):
            rest = tree.steps_of(fail) if fail is not None else ()
            return self._as(_seq(*tree.steps_of(check), *rest), steps)
        return self._as(Cond(check, fail, passed), steps)

    def visit_loop(self, node: Loop, steps: bool, in_loop: bool, read_after: bool) -> Any:
        # the body's next run reads what its last one left
        body = self.visit(node.body, False, True, read_after or _reads_candidates(node.body))
        if node.count == 1:
            return self._as(body, steps)
        inner = _LoopOnly().visit(body)
        if inner is not None:
            return self._as(Loop(inner.body, inner.count * node.count), steps)
        return self._as(Loop(body, node.count), steps)


class _LoopOnly(Visitor[Any]):
    """``visit(node)``: the node when it is a loop, else None."""

    def visit_loop(self, node: Loop) -> Loop:
        return node

    def _other(self, node: Node | None = None) -> None:
        return None

    visit_op = visit_seq = visit_parallel = visit_cond = visit_done = _other


class _Printer(Visitor[str]):
    """``visit(node, where)``: the text of ``node`` printed at position ``where``."""

    def __init__(self, instructions: bool = True):
        self.instructions = instructions

    def visit_seq(self, node: Seq, where: int) -> str:
        text = " -> ".join(self.visit(s, _STEP) for s in node.steps)
        return text if where == _SEQ else f"({text})"

    def visit_loop(self, node: Loop, where: int) -> str:
        text = f"{self.visit(node.body, _UNIT)} * {node.count}"
        return f"({text})" if where == _UNIT else text

    def visit_cond(self, node: Cond, where: int) -> str:
        check, if_fail, if_pass = (
            self.visit(n, _UNIT) for n in (node.check, node.if_fail, node.if_pass)
        )
        text = f"{check} ? {if_fail} : {if_pass}"
        return f"({text})" if where == _UNIT else text

    def visit_done(self, where: int) -> str:
        return "done"

    def visit_op(self, node: Op, where: int) -> str:
        if node.instruction is None or not self.instructions:
            return node.name
        return f'{node.name}("{node.instruction.translate(_QUOTE)}")'

    def visit_parallel(self, node: Parallel, where: int) -> str:
        return "[" + ", ".join(self.visit(b, _SEQ) for b in node.branches) + "]"
