"""Random workflows, for benchmarks, examples and synthetic data.

Not used by the validator itself. :func:`random_workflow` builds an AST directly (not text),
so any output is a syntactically correct workflow; semantic validity is not guaranteed unless
``valid_only`` is set (then it retries until :func:`dsl.validate` accepts it).
"""

from __future__ import annotations

import random

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Workflow, steps_of
from flowgrpo.dsl.operators import (
    CHECKER,
    ENSEMBLER,
    GENERATOR,
    OPERATORS,
    REFINER,
    OperatorTable,
)
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


def _of_role(operators: OperatorTable, role: str, domain: str) -> list[str]:
    """The operators of ``role`` allowed in ``domain``, in table order."""
    allowed = operators.for_domain(domain)
    return [n for n in operators if operators.role(n) == role and n in allowed]


def sft_tails(operators: OperatorTable, domain: str) -> tuple[str, ...]:
    """The tail steps of :func:`stratified_workflow` for ``domain``, built from the roles of
    ``operators``: for each checker C, check-and-repair with the domain's FIRST refiner R
    (``C ? R : done`` and its loops x2, x3), re-generation on failure (``C ? G : done`` for each
    generator G, last declared first), then each refiner alone. For the AFlow table on math this
    is Review ? Revise : done (x1, x2, x3), Review ? Programmer/AnswerGenerate/Custom : done,
    Revise, Format."""
    gens, refiners = _of_role(operators, GENERATOR, domain), _of_role(operators, REFINER, domain)
    tails: list[str] = []
    for checker in _of_role(operators, CHECKER, domain):
        if refiners:
            step = f"{checker} ? {refiners[0]} : done"
            tails += [step, f"({step}) * 2", f"({step}) * 3"]
        tails += [f"{checker} ? {g} : done" for g in reversed(gens)]
    return (*tails, *refiners)


def stratified_workflow(rng: random.Random, operators: OperatorTable, domain: str = "math") -> str:
    """One valid workflow for ``domain`` in canonical form, drawn so that no workflow dominates
    (the format-SFT targets of ``flowgrpo sft``): a head that is one generator or (half the
    time) an ensemble of 2-3 generators and one ensembler, then 0, 1 or 2 tail steps of
    :func:`sft_tails`, each part uniform. A refiner other than the domain's first (the repairer)
    only ends a workflow (Format reduces a solution to its answer). Draws that ``validate``
    rejects are redrawn."""
    gens, ensemblers = (
        _of_role(operators, GENERATOR, domain),
        _of_role(operators, ENSEMBLER, domain),
    )
    tails, finishers = sft_tails(operators, domain), set(_of_role(operators, REFINER, domain)[1:])
    if not gens:
        raise ValueError(f"no generator for domain {domain!r}: nothing to draw workflows from")
    for _ in range(10_000):
        if rng.random() < 0.5 or not ensemblers:
            head = rng.choice(gens)
        else:
            branches = [rng.choice(gens) for _ in range(rng.choice((2, 3)))]
            head = f"[{', '.join(branches)}] -> {rng.choice(ensemblers)}"
        tail = [rng.choice(tails) for _ in range(rng.choice((0, 1, 2)))] if tails else []
        if finishers & set(tail[:-1]):
            continue
        report = validate(" -> ".join((head, *tail)), domain=domain, operators=operators)
        if report.ok:
            return report.canonical
    raise ValueError(f"no valid workflow drawn for domain {domain!r} in 10,000 tries")
