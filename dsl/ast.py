"""Frozen dataclass AST of the workflow DSL.

Equality ignores source positions, so a workflow parsed from its canonical form equals the
original (``parse(canonical(w)) == w``). Nodes are immutable and hashable, which lets the
validator and the executor cache results by workflow.

Normal form guaranteed by the parser (and expected from hand-built trees):

* a :class:`Seq` has at least two steps and none of them is a :class:`Seq`
  (``A -> (B -> C)`` is ``A -> B -> C``; redundant parentheses vanish);
* a :class:`Parallel` has at least two branches;
* ``None`` as a branch of a :class:`Cond` is the empty ``done`` branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

_POS = {"default": 0, "compare": False, "repr": False}


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


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-nodes of ``node`` in execution order (``done`` branches omitted)."""
    if isinstance(node, Seq):
        return node.steps
    if isinstance(node, Parallel):
        return node.branches
    if isinstance(node, Cond):
        return tuple(n for n in (node.check, node.if_fail, node.if_pass) if n is not None)
    if isinstance(node, Loop):
        return (node.body,)
    return ()


def walk(node: Node | Workflow) -> Iterator[Node]:
    """Every node of the tree, pre-order, in execution order."""
    stack = [node.root if isinstance(node, Workflow) else node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))
