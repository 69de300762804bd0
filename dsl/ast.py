"""Frozen dataclass AST of the workflow DSL.

Equality ignores source positions, so a workflow parsed from its canonical form equals the
original (``parse(canonical(w)) == w``). Nodes are immutable and hashable, which lets the
validator and the executor cache results by workflow. Every pass over the tree (printing,
validation, the interpreter, the simulated executor) dispatches through :class:`Visitor`.

Normal form guaranteed by the parser (and expected from hand-built trees):

* a :class:`Seq` has at least two steps and none of them is a :class:`Seq`
  (``A -> (B -> C)`` is ``A -> B -> C``; redundant parentheses vanish);
* a :class:`Parallel` has at least two branches;
* ``None`` as a branch of a :class:`Cond` is the empty ``done`` branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

_POS = {"default": 0, "compare": False, "repr": False}
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Op:
    """One operator call, e.g. ``Custom("solve step by step")``."""

    name: str
    instruction: str | None = None
    line: int = field(**_POS)
    column: int = field(**_POS)


@dataclass(frozen=True, slots=True)
class Seq:
    """``A -> B -> C``: run the steps in order on the updated state."""

    steps: tuple[Node, ...]
    line: int = field(**_POS)
    column: int = field(**_POS)


@dataclass(frozen=True, slots=True)
class Parallel:
    """``[A, B -> C]``: run each branch from the same state; results become candidates."""

    branches: tuple[Node, ...]
    line: int = field(**_POS)
    column: int = field(**_POS)


@dataclass(frozen=True, slots=True)
class Cond:
    """``X ? A : B``: X checks the solution; on a problem run A, else B (``None`` = done)."""

    check: Node
    if_fail: Node | None
    if_pass: Node | None
    line: int = field(**_POS)
    column: int = field(**_POS)


@dataclass(frozen=True, slots=True)
class Loop:
    """``(A -> B) * n``: run the body up to n times; stop once a checker inside passes.

    ``line``/``column`` point at the count, where a count error is reported.
    """

    body: Node
    count: int
    line: int = field(**_POS)
    column: int = field(**_POS)


Node = Op | Seq | Parallel | Cond | Loop


@dataclass(frozen=True, slots=True)
class Workflow:
    """A parsed workflow program: the root node of its top-level sequence."""

    root: Node


class Visitor(Generic[R]):
    """The one dispatch on node type, used by every pass over the AST.

    ``visit(node, *args)`` calls the subclass's method for the node's type with ``(node,
    *args)``: ``visit_op``, ``visit_seq``, ``visit_parallel``, ``visit_cond``, ``visit_loop``;
    ``None`` (a ``done`` branch of a :class:`Cond`) calls ``visit_done(*args)`` and a
    :class:`Workflow` visits its root. A pass recurses by calling ``self.visit`` on the parts it
    chooses, in the order it chooses, threading whatever its ``args`` carry (a state, a
    position). A method the pass does not define raises ``NotImplementedError`` naming it;
    anything that is not a node raises ``TypeError``.

    >>> class Size(Visitor[int]):
    ...     def visit_op(self, node): return 1
    ...     def visit_seq(self, node): return sum(self.visit(s) for s in node.steps)
    >>> Size().visit(Seq((Op("Custom"), Op("Review"))))
    2
    """

    def visit(self, node: Node | Workflow | None, *args: Any) -> R:
        # the node's type by one dict lookup (validation visits every node several times; a
        # chain of class patterns was a large share of it); a subclass by its first base there
        method = _METHODS.get(type(node)) or next(
            (m for cls, m in _METHODS.items() if isinstance(node, cls)), None
        )
        if method is not None:
            return getattr(self, method)(node, *args)
        if node is None:
            return self.visit_done(*args)
        if isinstance(node, Workflow):
            return self.visit(node.root, *args)
        raise TypeError(f"not a workflow node: {node!r}")

    def _missing(self, method: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not define {method}")

    def visit_op(self, node: Op, *args: Any) -> R:
        raise self._missing("visit_op")

    def visit_seq(self, node: Seq, *args: Any) -> R:
        raise self._missing("visit_seq")

    def visit_parallel(self, node: Parallel, *args: Any) -> R:
        raise self._missing("visit_parallel")

    def visit_cond(self, node: Cond, *args: Any) -> R:
        raise self._missing("visit_cond")

    def visit_loop(self, node: Loop, *args: Any) -> R:
        raise self._missing("visit_loop")

    def visit_done(self, *args: Any) -> R:
        raise self._missing("visit_done")


#: The method :meth:`Visitor.visit` calls for each node type.
_METHODS = {
    Op: "visit_op",
    Seq: "visit_seq",
    Parallel: "visit_parallel",
    Cond: "visit_cond",
    Loop: "visit_loop",
}


class _Children(Visitor[tuple[Node, ...]]):
    """The direct sub-nodes in execution order (``done`` branches omitted)."""

    def visit_op(self, node: Op) -> tuple[Node, ...]:
        return ()

    def visit_seq(self, node: Seq) -> tuple[Node, ...]:
        return node.steps

    def visit_parallel(self, node: Parallel) -> tuple[Node, ...]:
        return node.branches

    def visit_cond(self, node: Cond) -> tuple[Node, ...]:
        return tuple(n for n in (node.check, node.if_fail, node.if_pass) if n is not None)

    def visit_loop(self, node: Loop) -> tuple[Node, ...]:
        return (node.body,)


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-nodes of ``node`` in execution order (``done`` branches omitted)."""
    return _Children().visit(node)


def walk(node: Node | Workflow) -> Iterator[Node]:
    """Every node of the tree, pre-order, in execution order."""
    stack, sub_nodes = [node.root if isinstance(node, Workflow) else node], _Children()
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(sub_nodes.visit(current)))


def op_nodes(node: Node | Workflow) -> Iterator[Op]:
    """Every operator call of the tree, in execution order (loop bodies once)."""
    return (n for n in walk(node) if isinstance(n, Op))


def steps_of(node: Node) -> tuple[Node, ...]:
    """The steps of a sequence; any other node is a sequence of one step."""
    return node.steps if isinstance(node, Seq) else (node,)


class _NormalForm(Visitor[str | None]):
    """The first way a hand-built tree leaves the normal form (module docstring), or None.
    ``in_seq``: the node is a step of a sequence (which may not be a sequence itself)."""

    def _first(self, nodes, in_seq: bool = False) -> str | None:
        return next((w for w in (self.visit(n, in_seq) for n in nodes) if w), None)

    def visit_op(self, node: Op, in_seq: bool) -> str | None:
        if not isinstance(node.name, str) or not node.name:
            return f"an Op's name must be a non-empty string, got {node.name!r}"
        if node.instruction is not None and not isinstance(node.instruction, str):
            return f"{node.name}'s instruction must be a string or None"
        return None

    def visit_seq(self, node: Seq, in_seq: bool) -> str | None:
        if in_seq:
            return "a Seq step is itself a Seq: flatten it (A -> (B -> C) is A -> B -> C)"
        if not isinstance(node.steps, tuple) or len(node.steps) < 2:
            return "a Seq needs a tuple of at least two steps (one step is the step itself)"
        return self._first(node.steps, True)

    def visit_parallel(self, node: Parallel, in_seq: bool) -> str | None:
        if not isinstance(node.branches, tuple) or len(node.branches) < 2:
            return "a Parallel needs a tuple of at least two branches"
        if any(branch is None for branch in node.branches):
            return "done stands only as a branch of a Cond, not of a Parallel"
        return self._first(node.branches)

    def visit_cond(self, node: Cond, in_seq: bool) -> str | None:
        if node.check is None:
            return "a Cond needs a checker (its check is None)"
        return self._first((node.check, node.if_fail, node.if_pass))

    def visit_loop(self, node: Loop, in_seq: bool) -> str | None:
        if isinstance(node.count, bool) or not isinstance(node.count, int):
            return f"a Loop's count must be a whole number, got {node.count!r}"
        return self.visit(node.body, False) if node.body is not None else "a Loop needs a body"

    def visit_done(self, in_seq: bool) -> str | None:
        return "done stands only as a branch of a Cond" if in_seq else None


def normal_form_error(workflow: Workflow) -> str | None:
    """Why ``workflow`` (built by hand) is not a tree the parser makes, or None: what every
    pass over the AST assumes (module docstring); a node of another type is named too."""
    if workflow.root is None:
        return "the root is None (done): a workflow needs at least one operator"
    try:
        return _NormalForm().visit(workflow.root, False)
    except TypeError as exc:  # not a node: Visitor names it
        return str(exc)
