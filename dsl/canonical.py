"""One printing per workflow, so that identical workflows compare equal as text.

``parse(canonical(w)) == w`` for every workflow ``w`` (tested with hypothesis), and whitespace or
redundant parentheses in the source do not change the canonical form.
"""

from __future__ import annotations

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Workflow

_QUOTE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def canonical(workflow: Workflow | Node) -> str:
    """The canonical text of a workflow or AST node.

    >>> from dsl import parse
    >>> canonical(parse("( Custom )->[ Custom,Programmer ]->ScEnsemble"))
    'Custom -> [Custom, Programmer] -> ScEnsemble'
    """
    node = workflow.root if isinstance(workflow, Workflow) else workflow
    return _seq(node)


def _seq(node: Node) -> str:
    """Print ``node`` where a whole sequence may stand (top level, parallel branch)."""
    if isinstance(node, Seq):
        return " -> ".join(_step(s) for s in node.steps)
    return _step(node)


def _step(node: Node) -> str:
    """Print ``node`` where one step of a sequence stands."""
    if isinstance(node, Loop):
        return f"{_unit(node.body)} * {node.count}"
    if isinstance(node, Cond):
        return f"{_unit(node.check)} ? {_branch(node.if_fail)} : {_branch(node.if_pass)}"
    return _unit(node)


def _branch(node: Node | None) -> str:
    return "done" if node is None else _unit(node)


def _unit(node: Node) -> str:
    """Print ``node`` where only a unit may stand, adding parentheses where needed."""
    if isinstance(node, Op):
        if node.instruction is None:
            return node.name
        return f'{node.name}("{node.instruction.translate(_QUOTE)}")'
    if isinstance(node, Parallel):
        return "[" + ", ".join(_seq(b) for b in node.branches) + "]"
    return f"({_seq(node)})"
