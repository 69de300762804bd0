"""Random workflows, for benchmarks, examples and synthetic data.

Not used by the validator itself. :func:`random_workflow` builds an AST directly (not text),
so any output is a syntactically correct workflow; semantic validity is not guaranteed unless
``valid_only`` is set (then it retries until :func:`dsl.validate` accepts it).
"""

from __future__ import annotations

import random

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Workflow, steps_of
from flowgrpo.dsl.operators import CHECKER, GENERATOR, OPERATORS, REFINER
from flowgrpo.dsl.validate import validate

_GENERATORS = [n for n, s in OPERATORS.items() if s.role == GENERATOR]
_CHECKERS = [n for n, s in OPERATORS.items() if s.role == CHECKER]
_REFINERS = [n for n, s in OPERATORS.items() if s.role == REFINER]
_INSTRUCTIONS = ["solve step by step", "be concise", "check the arithmetic", "answer only"]


def random_workflow(
    rng: random.Random,
    max_steps: int = 4,
    max_depth: int = 2,
    valid_only: bool = False,
    domain: str | None = None,
) -> Workflow:
    """A random workflow with up to ``max_steps`` top-level steps and nesting ``max_depth``."""
    while True:
        steps = [_op(rng, _GENERATORS)]
        steps += [_step(rng, max_depth) for _ in range(rng.randint(0, max_steps - 1))]
        workflow = Workflow(steps[0] if len(steps) == 1 else Seq(tuple(_flatten(steps))))
        if not valid_only or validate(workflow, domain=domain).ok:
            return workflow


def _op(rng: random.Random, names: list[str]) -> Op:
    name = rng.choice(names)
    takes = OPERATORS[name].takes_instruction
    return Op(name, rng.choice(_INSTRUCTIONS) if takes and rng.random() < 0.2 else None)


def _step(rng: random.Random, depth: int) -> Node:
    kind = rng.choice(["op", "op", "cond", "loop", "parallel"] if depth > 0 else ["op"])
    if kind == "op":
        return _op(rng, _GENERATORS + _CHECKERS + _REFINERS + ["ScEnsemble", "MdEnsemble"])
    if kind == "cond":
        fail = _op(rng, _REFINERS + _GENERATORS)
        return Cond(_op(rng, _CHECKERS), fail, None if rng.random() < 0.7 else _step(rng, 0))
    if kind == "loop":
        body = Seq((_op(rng, _CHECKERS), _op(rng, _REFINERS)))
        return Loop(body, rng.randint(2, 3))
    branches = tuple(_op(rng, _GENERATORS) for _ in range(rng.randint(2, 3)))
    return Seq((Parallel(branches), _op(rng, ["ScEnsemble", "MdEnsemble"])))


def _flatten(steps: list[Node]) -> list[Node]:
    out: list[Node] = []
    for step in steps:
        out.extend(steps_of(step))
    return out
