"""The flowgrpo workflow DSL: grammar, AST, parser, validator, extraction, canonical form.

Usable alone as a validator library; imports nothing heavy (no torch)::

    from flowgrpo.dsl import parse, validate, extract, canonical, DSLSyntaxError

    report = validate("Custom -> Programmer -> Review ? Revise : done", domain="math")
    report.ok, report.structure, report.canonical
"""

from flowgrpo.dsl.ast import Cond, Loop, Node, Op, Parallel, Seq, Workflow, walk
from flowgrpo.dsl.canonical import canonical
from flowgrpo.dsl.errors import DSLError, DSLSyntaxError
from flowgrpo.dsl.extract import Extraction, extract
from flowgrpo.dsl.operators import DOMAINS, OPERATORS, OperatorSpec, operators_for_domain
from flowgrpo.dsl.parser import parse
from flowgrpo.dsl.validate import (
    DEFAULT_LIMITS,
    STRUCTURES,
    Limits,
    Problem,
    Report,
    count_calls,
    features_of,
    nesting_depth,
    structure_of,
    validate,
)

__all__ = [
    "DEFAULT_LIMITS",
    "DOMAINS",
    "OPERATORS",
    "STRUCTURES",
    "Cond",
    "DSLError",
    "DSLSyntaxError",
    "Extraction",
    "Limits",
    "Loop",
    "Node",
    "Op",
    "OperatorSpec",
    "Parallel",
    "Problem",
    "Report",
    "Seq",
    "Workflow",
    "canonical",
    "count_calls",
    "extract",
    "features_of",
    "nesting_depth",
    "operators_for_domain",
    "parse",
    "structure_of",
    "validate",
    "walk",
]
