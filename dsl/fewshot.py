"""Few-shot prompts that teach a model to write workflows: a system text and worked examples,
each example checked (:meth:`PromptSpec.check`, against an operator table) to be a valid
workflow for its domain.

:class:`PromptSpec` is the ``prompt:`` section of flowgrpo's training config and usable alone
(another agent system prompting its own model)::

    spec = PromptSpec(system="Answer with a workflow. Operators: {operators}.",
                      examples=[{"question": "2+2?", "workflow": "Custom -> Format",
                                 "domain": "math"}])
    spec = PromptSpec(file="my_prompt.yaml")   # the same keys in a YAML or JSON file
    spec.check(table)                          # examples valid for your OperatorTable

Errors are :class:`~flowgrpo.configuration.ConfigError` naming the field (``prompt.examples[1]``)
and the validator's message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowgrpo.configuration import ConfigError, check, check_types, load_yaml
from flowgrpo.dsl.operators import DOMAINS, OperatorTable, default_table
from flowgrpo.dsl.validate import DEFAULT_STATIC_LIMITS, StaticLimits, validate
from flowgrpo.files import read_text

__all__ = ["Example", "PromptSpec"]

_FILE_KEYS = ("system", "examples")
_NAME = "prompt"  # how errors name the section (its key in the training config)


@dataclass(frozen=True)
class Example:
    """One worked example: a question and the workflow to answer it with.

    ``domain`` (math, code, qa, or a domain of a custom operator table) is the problems it is
    shown for; None shows it for every domain (then it must be valid for each of them).
    """

    question: str
    workflow: str
    domain: str | None = None


def _example(raw: Any, where: str) -> Example:
    if isinstance(raw, Example):
        return raw
    check(isinstance(raw, Mapping), where, f"expected {{question, workflow, domain?}}, got {raw!r}")
    unknown = sorted(set(raw) - {"question", "workflow", "domain"})
    check(not unknown, where, f"unknown key(s) {unknown}; use question, workflow, domain")
    for key in ("question", "workflow"):
        value = raw.get(key)
        check(isinstance(value, str) and bool(value.strip()), where, f"give a non-empty {key}")
    domain = raw.get("domain")
    check(domain is None or isinstance(domain, str), where, "domain must be a domain name")
    return Example(raw["question"].strip(), raw["workflow"].strip(), domain)


def _meta_keys(raw: Any) -> tuple[str, ...]:
    where = f"{_NAME}.meta_keys"
    check(isinstance(raw, (list, tuple)), where, f"must be a list of key names, got {raw!r}")
    for key in raw:
        check(isinstance(key, str) and bool(key.strip()), where, f"{key!r} is not a key name")
    check(len(set(raw)) == len(raw), where, f"{list(raw)} repeats a key; list each once")
    return tuple(raw)


def _check_example(
    example: Example, where: str, table: OperatorTable, limits: StaticLimits
) -> None:
    domains = [example.domain] if example.domain else list(DOMAINS)
    for domain in domains:
        if domain not in table.domains:
            raise ConfigError(
                f"{where}.domain: {domain!r}; choose one of {', '.join(table.domains)}"
            )
        report = validate(example.workflow, domain=domain, operators=table, limits=limits)
        if not report.ok:
            first = report.errors[0]
            hint = f" ({first.hint})" if first.hint else ""
            scope = "" if example.domain else "; or set domain: for an example of one domain"
            raise ConfigError(
                f"{where}: workflow {example.workflow!r} is not valid for domain {domain}: "
                f"{first.message}{hint}{scope}"
            )


def _read(path: str, where: str) -> dict:
    p = Path(path)
    check(p.is_file(), where, f"{p} does not exist; give a YAML or JSON file with {_FILE_KEYS}")
    text = read_text(p)
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else load_yaml(text, str(p))
    except (json.JSONDecodeError, ConfigError) as exc:
        raise ConfigError(f"{where}: {p} is not valid YAML/JSON: {exc}") from None
    check(isinstance(data, Mapping), where, f"{p} must hold a mapping with keys {_FILE_KEYS}")
    unknown = sorted(set(data) - set(_FILE_KEYS))
    check(not unknown, where, f"{p} has unknown key(s) {unknown}; use {', '.join(_FILE_KEYS)}")
    return dict(data)


@dataclass(frozen=True)
class PromptSpec:
    """The policy's prompt: system text and few-shot examples (None: the built-in ones).

    Attributes:
        system: the system message; ``{operators}`` in it becomes the names of the operators
            allowed for the problem's domain (write ``{{``/``}}`` for literal braces). None: the
            built-in text.
        examples: worked examples ``{question, workflow, domain?}`` shown as chat turns before
            the problem; those of the problem's domain (or without a domain) are shown. Each is
            validated for its domain(s) by :meth:`check` (the run environment's build calls it
            with the run's operators); an invalid one is an error naming its index.
            None: the built-in examples; ``[]``: none (zero-shot).
        file: a YAML or JSON file with the keys ``system`` and ``examples``; a key set here as
            well overrides the file's. Read at load; the loaded spec holds the file's contents
            (``file`` becomes null), so a saved config does not depend on the file.
        meta_keys: keys of a problem's ``meta`` shown under its question, one ``key: value``
            line each, in this order (e.g. ``[level, type]`` for MATH-style records, ``[template,
            difficulty]`` for the arithmetic task): the labels a task exposes, so the policy can
            choose its workflow by them. Every training problem must hold every key (checked
            when the run environment is built). Empty (default): the question alone. Never list
            a key that holds the answer (the arithmetic task's ``expression`` does).
    """

    system: str | None = None
    examples: tuple[Example, ...] | None = None
    file: str | None = None
    meta_keys: tuple[str, ...] = ()

    def __post_init__(self):
        if self.file is not None:
            data = _read(self.file, f"{_NAME}.file")
            system = self.system if self.system is not None else data.get("system")
            examples = self.examples if self.examples is not None else data.get("examples")
            object.__setattr__(self, "system", system)
            object.__setattr__(self, "examples", examples)
            object.__setattr__(self, "file", None)
        if self.system is not None:
            check(isinstance(self.system, str), f"{_NAME}.system", "must be a string or null")
            try:
                self.system.format(operators="Custom")
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(
                    f"{_NAME}.system: bad placeholder ({exc!r}); the only one is "
                    "{operators}; write {{ and }} for literal braces"
                ) from None
        if self.examples is not None:
            raw = self.examples
            check(isinstance(raw, (list, tuple)), f"{_NAME}.examples", "must be a list")
            examples = tuple(_example(e, f"{_NAME}.examples[{i}]") for i, e in enumerate(raw))
            object.__setattr__(self, "examples", examples)
        object.__setattr__(self, "meta_keys", _meta_keys(self.meta_keys))
        check_types(self, "prompt.")  # after the checks above: they name the fix for a type

    def check(
        self,
        operators: OperatorTable | None = None,
        limits: StaticLimits = DEFAULT_STATIC_LIMITS,
    ) -> PromptSpec:
        """Validate every example for its domain(s) against ``operators`` (default: the
        process-wide table) within ``limits`` (a run's: an example its reward would refuse for
        its calls is no example) and return self; ``ConfigError`` names ``prompt.examples[i]``.
        Not done at construction: the operators an example may use are those of the run (its
        plugins and ``operators:``), known when the run environment is built."""
        table = default_table() if operators is None else operators
        for i, example in enumerate(self.examples or ()):
            _check_example(example, f"{_NAME}.examples[{i}]", table, limits)
        return self

    def for_domain(self, domain: str) -> tuple[Example, ...] | None:
        """The examples shown for ``domain`` (None when the built-in ones are meant)."""
        if self.examples is None:
            return None
        return tuple(e for e in self.examples if e.domain in (None, domain))

    def to_dict(self) -> dict:
        """Plain data (the saved config): examples as mappings, without ``name``."""
        examples = None
        if self.examples is not None:
            examples = [
                {"question": e.question, "workflow": e.workflow}
                | ({"domain": e.domain} if e.domain else {})
                for e in self.examples
            ]
        return {
            "system": self.system,
            "examples": examples,
            "file": self.file,
            "meta_keys": list(self.meta_keys),
        }

    def meta_lines(self, problem_id: str, meta: Mapping[str, Any]) -> list[str]:
        """The ``key: value`` lines of :attr:`meta_keys` for one problem; a key the problem
        lacks is a ``ConfigError`` naming it, the problem and the keys it has."""
        missing = [key for key in self.meta_keys if key not in meta]
        if missing:
            raise ConfigError(
                f"{_NAME}.meta_keys: problem {problem_id} has no meta key(s) {missing} (it has "
                f"{sorted(meta)}); list only keys every problem of the task holds"
            )
        return [f"{key}: {meta[key]}" for key in self.meta_keys]
