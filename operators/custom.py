"""Your own operators: declared with a role, implemented by a prompt template or a function.

Two ways to give an operator an implementation (both also declare it to the DSL, so the
validator accepts it in this process):

* a **prompt template** -- :func:`register_prompt_operator` (``Critique``, role checker,
  ``"Is this right? {solution}"``). The template is formatted with the placeholders below and
  sent as one executor call through the same helpers as the built-in operators; what happens
  with the reply depends on the role:

  =========  ===========================================================================
  role       the reply ...
  =========  ===========================================================================
  generator  becomes the solution (for code problems: the code in it)
  refiner    becomes the solution (for code problems: the code in it)
  checker    is the feedback; pass/fail is read from it like Review's (PASS / FAIL words)
  ensembler  names a candidate by letter (A, B, ...); unreadable -> majority vote
  =========  ===========================================================================

  Placeholders: ``{question}``, ``{solution}``, ``{feedback}``, ``{instruction}`` (the
  workflow's ``Name("...")`` text, or the operator's ``default_instruction``), ``{candidates}``
  (lettered list), ``{domain}``. Write ``{{`` and ``}}`` for literal braces.

* a **Python function** -- ``register_operator(name, fn, role=...)`` from :mod:`operators.ops`
  with ``fn(state, instruction, settings)`` a generator; :func:`call_llm` makes one executor call
  from inside it (``reply = yield from call_llm(state, "MyOp", prompt, settings)``).

:func:`register_operators` does either from config records (``{name, role, domains?,
description?, takes_instruction?, calls?, prompt? | function?}``) and declares them in this
process. ``calls``: the most executor calls one run of a function operator makes (default 1),
what the validator counts for it, so its workflows stay within the run's call budget.
The training config's ``operators:`` key goes through :func:`load_extensions` instead, when a run
environment is built: the implementations are registered (code, process-wide, like every
registry), but the declarations go into the run's own :class:`~flowgrpo.dsl.OperatorTable`,
never into the process-wide table. :func:`check_records` checks records without registering.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import (
    AFLOW_OPERATORS,
    DOMAINS,
    OPERATORS,
    OperatorSpec,
    OperatorTable,
    declare_operator,
    default_table,
    undeclare_operator,
)
from flowgrpo.operators.ops import (
    OPERATOR_IMPLS,
    OpFn,
    OpSettings,
    _letter,
    _majority,
    _one,
    parse_verdict,
    solution_code,
)
from flowgrpo.operators.state import OpGen, State
from flowgrpo.plugins import import_plugin
from flowgrpo.registry import import_object

__all__ = [
    "PLACEHOLDERS",
    "call_llm",
    "check_records",
    "load_extensions",
    "prompt_operator",
    "register_operators",
    "register_prompt_operator",
    "remove_operator",
]

PLACEHOLDERS = ("question", "solution", "feedback", "instruction", "candidates", "domain")
_RECORD_KEYS = (
    "name", "role", "domains", "description", "takes_instruction", "prompt", "function",
    "default_instruction", "calls",
)  # fmt: skip


def call_llm(state: State, op: str, prompt: str, settings: OpSettings) -> OpGen:
    """One executor call on behalf of operator ``op`` (inside an operator function: ``reply =
    yield from call_llm(state, op, prompt, settings)``); returns the reply text. Counted, traced,
    batched and budgeted like the built-in operators' calls."""
    return _one(state, op, prompt, settings)


def check_template(template: str, where: str = "prompt") -> None:
    """Raise ``ValueError`` unless ``template`` is a string whose placeholders are all known."""
    if not isinstance(template, str) or not template.strip():
        raise ValueError(f"{where}: the prompt template must be a non-empty string")
    try:
        names = {field for _, field, _, _ in string.Formatter().parse(template) if field}
    except ValueError as exc:
        raise ValueError(f"{where}: bad template ({exc}); write {{{{ and }}}} for braces") from None
    unknown = sorted(n for n in names if n not in PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"{where}: unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"use {', '.join('{' + n + '}' for n in PLACEHOLDERS)}"
        )


def _fill(template: str, state: State, instruction: str | None, default: str) -> str:
    cands = [c for c in state.candidates if c]
    listed = "\n\n".join(f"({chr(65 + i)}) {c.strip()}" for i, c in enumerate(cands))
    values = {
        "question": state.problem.question.strip(),
        "solution": (state.solution or "").strip(),
        "feedback": (state.feedback or "").strip(),
        "instruction": instruction or default,
        "candidates": listed,
        "domain": state.problem.domain,
    }
    return template.format(**values)


def prompt_operator(name: str, role: str, template: str, default_instruction: str = "") -> OpFn:
    """An operator function that sends ``template`` (filled) and uses the reply by ``role``."""
    check_template(template, f"operator {name}")

    def run(state: State, instruction: str | None, settings: OpSettings) -> OpGen:
        text = _fill(template, state, instruction, default_instruction)
        reply = yield from _one(state, name, text, settings)
        if role == "checker":
            state.passed, state.feedback = parse_verdict(reply), reply.strip()
        elif role == "ensembler":
            cands = [c for c in state.candidates if c] or [state.solution or ""]
            index = _letter(reply, len(cands))
            state.solution = cands[index] if index is not None else _majority(cands)
        else:  # generator, refiner
            code = state.problem.domain == "code"
            state.solution = solution_code(reply) if code else reply.strip()

    run.__name__ = run.__qualname__ = f"prompt_operator_{name}"
    run.__module__ = __name__
    return run


def register_prompt_operator(
    name: str,
    role: str,
    template: str,
    domains: Sequence[str] | None = None,
    description: str = "",
    default_instruction: str = "",
    takes_instruction: bool | None = None,
) -> OpFn:
    """Declare operator ``name`` with ``role`` (and ``domains``, default all) in this process and
    register a prompt-template implementation for it (see the module docstring).
    ``takes_instruction`` defaults to whether the template has ``{instruction}``. Registering the
    same operator with the same template again is a no-op; anything else already registered
    under ``name`` raises."""
    check_template(template, f"operator {name}")
    takes = "{instruction}" in template if takes_instruction is None else takes_instruction
    spec = OperatorSpec(name, role, tuple(domains) if domains else DOMAINS, takes, description)
    declare_operator(spec)  # same spec again: no-op; a different one raises
    return _register_impl(spec, ("prompt", template, default_instruction))


def _parse_record(record: Mapping[str, Any], where: str) -> tuple[OperatorSpec, tuple | None]:
    """(spec, how it is implemented) of one config record, checked but nothing registered:
    how is ``("prompt", template, default_instruction)``, ``("function", "pkg.mod:fn")`` or None
    (a plugin implements it). ``ValueError`` names ``where``."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected a mapping {{name, role, prompt}}, got {record!r}")
    unknown = sorted(set(record) - set(_RECORD_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {', '.join(_RECORD_KEYS)}")
    record = dict(record)
    takes_given = "takes_instruction" in record
    prompt, function = record.pop("prompt", None), record.pop("function", None)
    default = record.pop("default_instruction", "") or ""
    try:
        if prompt is not None and function is not None:
            raise ValueError("give prompt OR function, not both")
        spec = OperatorSpec.from_dict(record, where)
        if function is not None:
            if not isinstance(function, str) or ":" not in function:
                raise ValueError(f"function {function!r} is not a dotted path 'pkg.mod:fn'")
            return spec, ("function", function)
        if prompt is None:
            return spec, None
        check_template(prompt, f"operator {spec.name}")
        if spec.calls != 1:
            raise ValueError(f"calls: a prompt operator makes one call; calls is for a function "
                             f"that calls call_llm more than once, got {spec.calls}")  # fmt: skip
        if not takes_given:
            spec = replace(spec, takes_instruction="{instruction}" in prompt)
        return spec, ("prompt", prompt, default)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(where) else f"{where}: {message}") from None


def check_records(records: Sequence[Mapping[str, Any]], where: str = "operators") -> None:
    """Check the ``operators:`` config records (keys, name, role, domains, template placeholders,
    prompt OR function) without importing or registering anything; ``ValueError`` names
    ``where[i]`` and the fix."""
    if not isinstance(records, (list, tuple)):
        raise ValueError(f"{where}: expected a list of operators, got {type(records).__name__}")
    for i, record in enumerate(records):
        _parse_record(record, f"{where}[{i}]")


def _source(name: str) -> Any:
    """What the implementation of ``name`` was made from here (None: not made here)."""
    return OPERATOR_IMPLS.meta(name).get("source") if name in OPERATOR_IMPLS else None


def _register_impl(spec: OperatorSpec, how: tuple) -> OpFn:
    """Register the implementation of ``spec`` made ``how`` (a template or a dotted path) in
    :data:`OPERATOR_IMPLS` WITHOUT declaring it; the same again is a no-op, a name implemented
    otherwise raises ``ValueError``."""
    if _source(spec.name) == (spec, how):
        return OPERATOR_IMPLS.get(spec.name)
    if how[0] == "prompt":
        fn = prompt_operator(spec.name, spec.role, how[1], how[2])
    else:
        fn = import_object(how[1])
        if not callable(fn):
            raise ValueError(f"{how[1]!r} is not callable, so it cannot implement {spec.name}")
    return OPERATOR_IMPLS.register(spec.name, fn, source=(spec, how))


def _implemented(spec: OperatorSpec, how: tuple | None, table: OperatorTable) -> OperatorTable:
    """``table`` with ``spec`` (its implementation registered first when ``how`` says how)."""
    if how is not None:
        _register_impl(spec, how)
    elif spec.name not in OPERATOR_IMPLS:
        raise ValueError(
            "give prompt (a template) or function ('pkg.mod:fn'), or register an "
            "implementation in a plugin module"
        )
    return _declared(spec, table)


def _declared(spec: OperatorSpec, table: OperatorTable) -> OperatorTable:
    """``table`` with ``spec`` declared (nothing registered); the same spec again is a no-op."""
    if spec.name not in table:
        return table.extend(spec)
    if table[spec.name] != spec:
        raise ValueError(f"already declared differently: {table[spec.name]}")
    return table


def register_operators(records: Sequence[Mapping[str, Any]], where: str = "operators") -> None:
    """Declare (in this process) and implement operators from config records.

    Each record: ``name``, ``role``, optional ``domains``, ``description``,
    ``takes_instruction``, and ONE of ``prompt`` (a template, see the module docstring;
    ``default_instruction`` fills ``{instruction}`` when the workflow gives none) or
    ``function`` (a dotted path ``pkg.mod:fn`` to an operator function). A record with neither
    only declares an operator whose implementation a plugin registers. Errors raise
    ``ValueError`` naming ``where[i]`` and the fix.
    """
    check_records(records, where)
    for i, record in enumerate(records):
        spec, how = _parse_record(record, f"{where}[{i}]")
        try:
            _implemented(spec, how, default_table())
            declare_operator(spec)
        except ValueError as exc:
            raise ValueError(f"{where}[{i}]: {exc}") from None


def remove_operator(name: str) -> None:
    """Undo a user operator: its implementation and its declaration (tests, notebooks). AFlow
    operators cannot be removed; an unknown name raises ``ValueError``."""
    if name in AFLOW_OPERATORS:
        raise ValueError(f"{name!r} is an AFlow operator; it cannot be removed")
    if name not in OPERATORS and name not in OPERATOR_IMPLS:
        raise ValueError(f"operator {name!r} is not declared")
    if name in OPERATOR_IMPLS:
        OPERATOR_IMPLS.unregister(name)
    if name in OPERATORS:
        undeclare_operator(name)


def load_extensions(
    plugins: Sequence[str] = (), operators: Sequence[Mapping] = (), *, implement: bool = True
) -> OperatorTable:
    """What the training config's ``plugins:`` and ``operators:`` keys do when a run environment
    is built, in this order: import each plugin (:mod:`flowgrpo.plugins`; their registrations
    run), then implement each operator record. Returns the run's operator table: the
    process-wide one (AFlow's set plus what plugins declared) extended with the records, which
    are NOT declared process-wide. Idempotent. ``implement`` False: the records are only
    declared in the returned table, no implementation registered and no ``function:`` imported
    (what validating a run's outputs needs: ``flowgrpo analyze``; two runs that implement one
    name differently then load in one process). Errors raise
    :class:`~flowgrpo.configuration.ConfigError` naming ``plugins[i]`` / ``operators[i]``."""
    if isinstance(plugins, str) or not isinstance(plugins, (list, tuple)):
        raise ConfigError(f"plugins: expected a list of modules or .py files, got {plugins!r}")
    for i, entry in enumerate(plugins):
        try:
            import_plugin(entry)
        except Exception as exc:  # a plugin's own bug at import time, too
            kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
            raise ConfigError(f"plugins[{i}]: {kind}{exc}") from None
    table = default_table()
    try:
        check_records(operators or [], "operators")
        for i, record in enumerate(operators or []):
            spec, how = _parse_record(record, f"operators[{i}]")
            try:
                table = _implemented(spec, how, table) if implement else _declared(spec, table)
            except ValueError as exc:
                raise ValueError(f"operators[{i}]: {exc}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return table
