"""One printing per workflow, so that identical workflows compare equal as text.

``parse(canonical(w)) == w`` for every workflow ``w`` (tested with hypothesis), and whitespace or
redundant parentheses in the source do not change the canonical form.
"""

from __future__ import annotations

from typing import Any

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Visitor, Workflow

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
    """What a workflow runs, wording aside: its canonical text without instructions, with each
    loop of count 1 replaced by its body (``(A -> B) * 1`` runs ``A -> B`` once, as ``A -> B``
    does), so two workflows that run the same operators in the same shape compare equal.

    >>> from flowgrpo.dsl import parse
    >>> skeleton(parse('(Custom("be brief") -> Format) * 1'))
    'Custom -> Format'
    >>> skeleton(parse("Custom * 1 -> (Review ? Revise : done) * 2"))
    'Custom -> (Review ? Revise : done) * 2'
    """
    return canonical(_Unwrapped().visit(workflow), instructions=False)


class _Unwrapped(Visitor[Any]):
    """``visit(node, steps)``: the node with loops of one replaced by their bodies; with
    ``steps``, the tuple of steps it stands for in a sequence (so sequences come out flat)."""

    def _as(self, node: Node, steps: bool) -> Any:
        return (node,) if steps else node

    def visit_op(self, node: Op, steps: bool = False) -> Any:
        return self._as(node, steps)

    def visit_done(self, steps: bool = False) -> None:
        return None

    def visit_seq(self, node: Seq, steps: bool = False) -> Any:
        flat = tuple(s for step in node.steps for s in self.visit(step, True))
        if steps:
            return flat
        return flat[0] if len(flat) == 1 else Seq(flat)

    def visit_parallel(self, node: Parallel, steps: bool = False) -> Any:
        return self._as(Parallel(tuple(self.visit(b) for b in node.branches)), steps)

    def visit_cond(self, node: Cond, steps: bool = False) -> Any:
        cond = Cond(self.visit(node.check), self.visit(node.if_fail), self.visit(node.if_pass))
        return self._as(cond, steps)

    def visit_loop(self, node: Loop, steps: bool = False) -> Any:
        if node.count == 1:
            return self.visit(node.body, steps)
        return self._as(Loop(self.visit(node.body), node.count), steps)


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
