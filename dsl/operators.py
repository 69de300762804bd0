"""The operator set of the DSL (AFlow's, arXiv 2410.10762) with the role of each operator.

Roles drive validation: a *checker* can be the condition of ``?``, an *ensembler* needs at least
two candidates, a *refiner* or *checker* needs a solution made by a *generator* before it.
The ``operators`` package implements each of these names; this table is the single source of
truth for which names exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

GENERATOR = "generator"
ENSEMBLER = "ensembler"
CHECKER = "checker"
REFINER = "refiner"

DOMAINS = ("math", "code", "qa")


@dataclass(frozen=True)
class OperatorSpec:
    """What the validator knows about an operator.

    Attributes:
        name: the name written in workflows (capitalised).
        role: one of generator, ensembler, checker, refiner.
        takes_instruction: whether ``Name("...")`` is meaningful for it.
        domains: problem domains it is allowed in by default.
        summary: one line for help texts and prompts.
    """

    name: str
    role: str
    takes_instruction: bool
    domains: tuple[str, ...]
    summary: str


_ALL = DOMAINS
_SPECS = (
    OperatorSpec("Custom", GENERATOR, True, _ALL, "one LLM call with an instruction"),
    OperatorSpec(
        "AnswerGenerate", GENERATOR, True, ("math", "qa"), "step-by-step thought + answer"
    ),
    OperatorSpec(
        "Programmer", GENERATOR, True, ("math",), "writes Python, runs it, output is the answer"
    ),
    OperatorSpec(
        "CustomCodeGenerate", GENERATOR, True, ("code",), "writes a function for a code problem"
    ),
    OperatorSpec("ScEnsemble", ENSEMBLER, False, _ALL, "picks the most self-consistent candidate"),
    OperatorSpec("MdEnsemble", ENSEMBLER, False, _ALL, "majority vote over shuffled candidates"),
    OperatorSpec("Review", CHECKER, True, _ALL, "judges the solution: pass/fail + feedback"),
    OperatorSpec("Test", CHECKER, False, ("code",), "runs the public tests; fixes on failure"),
    OperatorSpec("Revise", REFINER, True, _ALL, "rewrites the solution using the feedback"),
    OperatorSpec("Format", REFINER, True, ("math", "qa"), "reduces the solution to the answer"),
)

OPERATORS: MappingProxyType[str, OperatorSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""Operator name -> spec, in the order of DESIGN.md's table."""


def operators_for_domain(domain: str) -> frozenset[str]:
    """Names of the operators allowed by default for ``domain`` (math, code or qa)."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; choose one of {', '.join(DOMAINS)}")
    return frozenset(s.name for s in _SPECS if domain in s.domains)
