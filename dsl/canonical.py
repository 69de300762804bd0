"""One printing per workflow, so that identical workflows compare equal as text.

``parse(canonical(w)) == w`` for every workflow ``w`` (tested with hypothesis), and whitespace or
redundant parentheses in the source do not change the canonical form.
"""

from __future__ import annotations

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
