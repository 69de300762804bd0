"""The flowgrpo workflow DSL: grammar, AST, parser, validator, extraction, canonical form.

Usable alone as a validator library; imports nothing heavy (no torch)::

    from flowgrpo.dsl import parse, validate, extract, canonical, DSLSyntaxError

    report = validate("Custom -> Programmer -> Review ? Revise : done", domain="math")
    report.ok, report.structure, report.canonical

    # your own operators, for this call only (or declare_operator(...) for the whole process)
    table = OperatorTable.load("my_operators.yaml")          # or AFLOW_OPERATORS.extend(...)
    validate("Solve -> Critique ? Fix : done", domain="qa", operators=table)
"""

from flowgrpo.dsl.ast import (
    Cond,
    Loop,
    Node,
    Op,
    Parallel,
    Seq,
    Visitor,
    Workflow,
    op_nodes,
    steps_of,
    walk,
)
from flowgrpo.dsl.canonical import canonical
from flowgrpo.dsl.errors import DSLError, DSLSyntaxError
from flowgrpo.dsl.extract import Extraction, extract
from flowgrpo.dsl.operators import (
    AFLOW_OPERATORS,
    DOMAINS,
    OPERATORS,
    ROLES,
    OperatorSpec,
    OperatorTable,
    declare_operator,
    default_table,
    operators_for_domain,
    undeclare_operator,
)
from flowgrpo.dsl.parser import parse
from flowgrpo.dsl.shape import count_calls, features_of, nesting_depth, structure_of
from flowgrpo.dsl.validate import (
    DEFAULT_MAX_CALLS,
    DEFAULT_STATIC_LIMITS,
    STRUCTURES,
    Problem,
    Report,
    StaticLimits,
    validate,
)

__all__ = [
    "AFLOW_OPERATORS",
    "DEFAULT_MAX_CALLS",
    "DEFAULT_STATIC_LIMITS",
    "DOMAINS",
    "OPERATORS",
    "ROLES",
    "STRUCTURES",
    "Cond",
    "DSLError",
    "DSLSyntaxError",
    "Extraction",
    "Loop",
    "Node",
    "Op",
    "OperatorSpec",
    "OperatorTable",
    "Parallel",
    "Problem",
    "Report",
    "Seq",
    "StaticLimits",
    "Visitor",
    "Workflow",
    "canonical",
    "count_calls",
    "declare_operator",
    "default_table",
    "extract",
    "features_of",
    "nesting_depth",
    "op_nodes",
    "operators_for_domain",
    "parse",
    "steps_of",
    "structure_of",
    "undeclare_operator",
    "validate",
    "walk",
]
