"""The operator set of the DSL (AFlow's, arXiv 2410.10762) with the role of each operator, and the
open table users extend with their own operators.

Roles drive validation: a *checker* can be the condition of ``?``, an *ensembler* needs at least
two candidates, a *refiner* or *checker* needs a solution made by a *generator* before it.

Three levels:

* :data:`AFLOW_OPERATORS` -- the AFlow set, fixed (:class:`OperatorTable`).
* :class:`OperatorTable` -- any set of :class:`OperatorSpec`; pass one to
  ``validate(text, operators=table)`` to validate against your own operators (for use inside
  another agent system) without touching anything process-wide. ``OperatorTable.load(path)``
  reads a YAML/JSON file.
* the process-wide *default table* (:func:`default_table`): the AFlow set plus every operator
  declared in this process by code with :func:`declare_operator` (``register_operator(...,
  role=...)`` in a plugin or from Python), like an entry of any registry. A training run does
  not use it directly: its run environment builds the run's own table from it plus the config's
  ``operators:`` (which are never declared here) and passes that table to the prompt, the
  validator, extraction and the interpreter. Calls given no table (scripts, ``flowgrpo
  validate``) use the default table. :data:`OPERATORS` is a live read-only view of it.

The ``operators`` package implements each name (``operators.ops.OPERATOR_IMPLS``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flowgrpo.configuration import ConfigError, from_dict, load_yaml
from flowgrpo.files import read_text

GENERATOR = "generator"
ENSEMBLER = "ensembler"
CHECKER = "checker"
REFINER = "refiner"
ROLES = (GENERATOR, ENSEMBLER, CHECKER, REFINER)

DOMAINS = ("math", "code", "qa")
_NAME_RE = re.compile(r"[A-Z][A-Za-z0-9_]*\Z")  # the grammar's OPERATOR token
_DOMAIN_RE = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class OperatorSpec:
    """What the validator knows about an operator.

    Attributes:
        name: the name written in workflows: a capitalised identifier (``Critique``).
        role: one of generator, ensembler, checker, refiner (:data:`ROLES`).
        domains: problem domains it is allowed in (default: math, code and qa). Any lowercase
            identifier is accepted, for tables used outside flowgrpo's own tasks.
        takes_instruction: whether ``Name("...")`` is meaningful for it.
        description: one line for help texts and prompts.
        calls: executor calls one run of it makes at most (>= 1): what the static call count
            gives it, so a workflow a run accepts is never stopped by the run's call budget.
            A run's operator settings give MdEnsemble's, Programmer's and Test's
            (``dsl.StaticLimits.op_calls``); a prompt operator makes one.

    >>> OperatorSpec("Critique", "checker", ("math", "qa")).domains
    ('math', 'qa')
    """

    name: str
    role: str
    domains: tuple[str, ...] = DOMAINS
    takes_instruction: bool = True
    description: str = ""
    calls: int = 1

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"operator name {self.name!r} is not a capitalised identifier; write e.g. "
                "'Critique' (a capital letter, then letters, digits or _)"
            )
        if self.role not in ROLES:
            raise ValueError(
                f"operator {self.name}: role {self.role!r} is not one of {', '.join(ROLES)}"
            )
        domains = (self.domains,) if isinstance(self.domains, str) else tuple(self.domains)
        bad = [d for d in domains if not isinstance(d, str) or not _DOMAIN_RE.match(d)]
        if not domains or bad:
            raise ValueError(
                f"operator {self.name}: domains must be a non-empty list of lowercase names "
                f"such as {', '.join(DOMAINS)}; got {self.domains!r}"
            )
        object.__setattr__(self, "domains", domains)
        if not isinstance(self.takes_instruction, bool):
            raise ValueError(f"operator {self.name}: takes_instruction must be true or false")
        if not isinstance(self.description, str):
            raise ValueError(f"operator {self.name}: description must be a string")
        if not isinstance(self.calls, int) or isinstance(self.calls, bool) or self.calls < 1:
            raise ValueError(
                f"operator {self.name}: calls must be a whole number >= 1 (the executor calls "
                f"one run of it makes at most), got {self.calls!r}"
            )

    @property
    def summary(self) -> str:
        """The description (older name)."""
        return self.description

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "operator") -> OperatorSpec:
        """A spec from a mapping with keys name, role, domains, takes_instruction, description
        (``summary`` is accepted for description); unknown keys raise, naming ``where``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping with name and role, got {data!r}")
        data = dict(data)
        if "summary" in data and "description" not in data:
            data["description"] = data.pop("summary")
        missing = [k for k in ("name", "role") if k not in data]
        if missing:
            raise ConfigError(f"{where}: missing {' and '.join(missing)}")
        return from_dict(cls, data, f"{where}.")


class OperatorTable(Mapping):
    """An immutable, hashable set of operators by name (in declaration order).

    >>> table = AFLOW_OPERATORS.extend(OperatorSpec("Critique", "checker"))
    >>> table.role("Critique"), "Critique" in AFLOW_OPERATORS
    ('checker', False)
    """

    def __init__(self, specs: Iterable[OperatorSpec | Mapping[str, Any]] = ()):
        entries: dict[str, OperatorSpec] = {}
        for i, spec in enumerate(specs):
            if not isinstance(spec, OperatorSpec):
                spec = OperatorSpec.from_dict(spec, f"operator {i}")
            if spec.name in entries:
                raise ValueError(f"operator {spec.name!r} is listed twice")
            entries[spec.name] = spec
        self._specs = MappingProxyType(entries)
        self._key = tuple(entries.values())
        self._hash = hash(self._key)
        extra = {d for s in self._key for d in s.domains} - set(DOMAINS)
        self._domains = DOMAINS + tuple(sorted(extra))
        # per domain, built once: the constrained sampler's end game asks at every candidate
        self._by_domain = {d: frozenset(s.name for s in self._key if d in s.domains)
                           for d in self._domains}  # fmt: skip

    def __getitem__(self, name: str) -> OperatorSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorTable) and self._key == other._key

    def __repr__(self) -> str:
        return f"OperatorTable({list(self._specs)})"

    @property
    def domains(self) -> tuple[str, ...]:
        """flowgrpo's domains plus any other domain a spec names."""
        return self._domains

    def role(self, name: str) -> str | None:
        """The role of ``name``, or None when the table has no such operator."""
        spec = self._specs.get(name)
        return spec.role if spec else None

    def names_with_role(self, role: str) -> tuple[str, ...]:
        """Operator names of one role, in table order."""
        return tuple(s.name for s in self._key if s.role == role)

    def for_domain(self, domain: str) -> frozenset[str]:
        """Names of the operators allowed for ``domain``; an unknown domain raises."""
        names = self._by_domain.get(domain)
        if names is None:
            raise ValueError(f"unknown domain {domain!r}; choose one of {', '.join(self.domains)}")
        return names

    def extend(self, *specs: OperatorSpec | Mapping[str, Any]) -> OperatorTable:
        """A new table: this one plus ``specs`` (a name already present raises)."""
        return OperatorTable((*self._key, *specs))

    @classmethod
    def from_data(cls, data: Any, where: str = "operator table") -> OperatorTable:
        """A table from parsed YAML/JSON.

        Either a list of operators (``{name, role, domains?, takes_instruction?,
        description?}``), which EXTENDS the AFlow set, or a mapping ``{extends: aflow | none,
        operators: [...]}`` (``extends: none`` gives a table of only these operators).
        """
        base = AFLOW_OPERATORS
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - {"extends", "operators"})
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {unknown}; use extends and operators")
            extends = data.get("extends", "aflow")  # an empty `extends:` is None, not "none"
            if not isinstance(extends, str) or extends.lower() not in ("aflow", "none"):
                raise ValueError(f"{where}: extends must be aflow or none (left out: aflow), got "
                                 f"{extends!r}")  # fmt: skip
            extends = extends.lower()
            base = AFLOW_OPERATORS if extends == "aflow" else OperatorTable()
            data = data.get("operators") or []
        if not isinstance(data, list):
            raise ValueError(f"{where}: expected a list of operators, got {type(data).__name__}")
        specs = [OperatorSpec.from_dict(d, f"{where}: operator {i}") for i, d in enumerate(data)]
        if not specs and not len(base):
            raise ValueError(
                f"{where}: extends none and declares no operators, so no workflow could be "
                "valid; list operators, or extend aflow"
            )
        try:
            return base.extend(*specs)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> OperatorTable:
        """A table from a YAML or JSON file (see :meth:`from_data`); errors name the file."""
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"operator table {p} does not exist")
        text = read_text(p)
        try:
            data = json.loads(text) if p.suffix == ".json" else load_yaml(text, str(p))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not valid JSON: {exc}") from None
        return cls.from_data(data, str(p))


_ALL = DOMAINS
_SPECS = (
    OperatorSpec("Custom", GENERATOR, _ALL, True, "one LLM call with an instruction"),
    OperatorSpec(
        "AnswerGenerate", GENERATOR, ("math", "qa"), True, "step-by-step thought + answer"
    ),
    OperatorSpec(
        "Programmer", GENERATOR, ("math",), True, "writes Python, runs it, output is the answer"
    ),
    OperatorSpec(
        "CustomCodeGenerate", GENERATOR, ("code",), True, "writes a function for a code problem"
    ),
    OperatorSpec("ScEnsemble", ENSEMBLER, _ALL, False, "picks the most self-consistent candidate"),
    OperatorSpec("MdEnsemble", ENSEMBLER, _ALL, False, "majority vote over shuffled candidates"),
    OperatorSpec("Review", CHECKER, _ALL, True, "judges the solution: pass/fail + feedback"),
    OperatorSpec("Test", CHECKER, ("code",), False, "runs the public tests; fixes on failure"),
    OperatorSpec("Revise", REFINER, _ALL, True, "rewrites the solution using the feedback"),
    OperatorSpec("Format", REFINER, ("math", "qa"), True, "reduces the solution to the answer"),
)

AFLOW_OPERATORS = OperatorTable(_SPECS)
"""The AFlow operator set, in the order of DESIGN.md's table (never changes)."""

_default: list[OperatorTable] = [AFLOW_OPERATORS]  # the process-wide table (replaced, not mutated)
_live: dict[str, OperatorSpec] = dict(AFLOW_OPERATORS.items())

OPERATORS: MappingProxyType[str, OperatorSpec] = MappingProxyType(_live)
"""Operator name -> spec of the default table: the AFlow set plus operators declared in this
process (a live view)."""


def default_table() -> OperatorTable:
    """The process-wide table: the AFlow set plus every operator declared in this process."""
    return _default[0]


def declare_operator(spec: OperatorSpec) -> OperatorSpec:
    """Add ``spec`` to the process-wide default table (so every validation in this process
    accepts it). Declaring the same spec again is a no-op; another spec under a name already in
    the table raises ``ValueError``."""
    if not isinstance(spec, OperatorSpec):
        raise TypeError(f"declare_operator takes an OperatorSpec, got {type(spec).__name__}")
    old = _default[0].get(spec.name)
    if old == spec:
        return spec
    if old is not None:
        raise ValueError(
            f"operator {spec.name!r} is already declared as {old.role} for "
            f"{', '.join(old.domains)}; choose another name"
        )
    _default[0] = _default[0].extend(spec)
    _live[spec.name] = spec
    return spec


def undeclare_operator(name: str) -> None:
    """Remove a declared operator from the default table (tests, notebooks). AFlow operators
    cannot be removed; an unknown name raises."""
    if name in AFLOW_OPERATORS:
        raise ValueError(f"{name!r} is an AFlow operator; it cannot be undeclared")
    if name not in _default[0]:
        raise ValueError(f"operator {name!r} is not declared")
    _default[0] = OperatorTable(s for s in _default[0].values() if s.name != name)
    del _live[name]


def operators_for_domain(domain: str, operators: OperatorTable | None = None) -> frozenset[str]:
    """Names of the operators allowed for ``domain`` in ``operators`` (default: the default
    table); an unknown domain raises, listing the choices."""
    return (operators if operators is not None else default_table()).for_domain(domain)
