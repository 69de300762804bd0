"""The one config-validation style: frozen dataclasses, one ``from_dict``, one error type.

Every config section of flowgrpo (``TrainConfig``'s sections, ``LossConfig``, ``HealthConfig``,
``RewardSpec``'s options, the simulated executor's parameters) is a frozen dataclass that

* documents every field in its docstring (units, paper link),
* checks its fields in ``__post_init__``: their types with :func:`check_types` (a section
  built in Python is held to the types ``from_dict`` asks of YAML; first, or last where the
  section's own rules check a field's type and say what to write: health, loss, prompt, reward
  options), and their ranges with :func:`check`, which raises :class:`ConfigError` naming the
  field and the fix, and
* is built from YAML data with :func:`from_dict`, which rejects unknown keys with a
  "did you mean" suggestion and coerces values to the annotated types (YAML reads ``3e-5``
  as a string and ``off`` as False; both are turned back into what the field expects).

A dataclass with special input syntax may define ``_from_raw(cls, value, path)`` (a
classmethod) that :func:`from_dict` calls instead of the generic rules.

This module imports nothing from flowgrpo's packages (it sits below ``flowgrpo.dsl``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["ConfigError", "check", "check_types", "from_dict", "to_dict"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad configuration value: the message names the field and the fix."""


def check(ok: bool, field: str, fix: str) -> None:
    """Raise ``ConfigError("field: fix")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{field}: {fix}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_types(section: Any, path: str) -> None:
    """Each field of the dataclass ``section`` as its annotation asks, by the rules of
    :func:`coerce` (what ``from_dict`` applies to YAML), or ``ConfigError`` naming
    ``path + field``: ``OptimConfig(max_steps=2.5)`` or ``RolloutConfig(execute="no")`` built
    in Python is refused as the same values in a YAML file are, not used. Values are stored
    as ``coerce`` returns them (a list given for a tuple field is kept as a tuple); a nested
    section must be given built (its own ``__post_init__`` checked it)."""
    hints = _hints(type(section))
    for f in dataclasses.fields(section):
        if f.init:
            value = coerce(getattr(section, f.name), hints[f.name], f"{path}{f.name}", None, True)
            object.__setattr__(section, f.name, value)


def finite_number(value: Any) -> bool:
    """A real number (int or float, not bool) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def whole_number(value: Any) -> bool:
    """An int that is not a bool (``True`` is an int to Python, never a count to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def from_dict(cls: type[T], data: Any, path: str = "", base: T | None = None) -> T:
    """Build dataclass ``cls`` from a nested mapping; unknown keys raise with a suggestion.

    Args:
        cls: a dataclass type.
        data: a mapping (None means all defaults).
        path: the dotted prefix of this section in the whole config (``"rollout."``), used in
            every message.
        base: the values the keys of ``data`` override (default: ``cls``'s own defaults). A
            section nested in a parent starts from the PARENT's default for it, so setting one
            key of a section never resets the parent's other choices for that section.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {path}{key}{hint} (valid: {', '.join(fields)})")
        kwargs[key] = coerce(value, hints[key], f"{path}{key}", _default(fields[key]))
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path.rstrip('.') or cls.__name__}: {exc}") from None


_YAML_BOOL_WORDS = {True: "on", False: "off"}


def _default(field: dataclasses.Field) -> Any:
    """A dataclass field's default value (None when it has none)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def coerce(value: Any, hint: Any, name: str, default: Any = None, built: bool = False) -> Any:
    """``value`` as the type ``hint`` asks for, or ``ConfigError`` naming ``name``.

    ``default``: the field's default; a nested section starts from it (see :func:`from_dict`).
    ``built``: the value was built in Python (:func:`check_types`): a nested section must be an
    instance already, and YAML's repairs are not applied (text for a number, ``False`` for the
    word ``off``): such a value is refused, not converted.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and (built or isinstance(value, hint)):
        if not isinstance(value, hint):
            kind = hint.__name__
            raise ConfigError(
                f"{name}: expected an instance of {kind}, got {value!r}; build it ({kind}(...)) "
                "or load the whole config from a mapping (from_dict)"
            )
        return value
    if dataclasses.is_dataclass(hint):
        raw = getattr(hint, "_from_raw", None)
        if raw:
            return raw(value, f"{name}.")
        base = default if isinstance(default, hint) else None
        return from_dict(hint, value, f"{name}.", base)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], name, built=built) if len(inner) == 1 else value
    if origin is typing.Literal:
        return _literal(value, args, name, yaml=not built)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        return tuple(value)
    if origin in (dict, Mapping, typing.Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        return dict(value)
    return _scalar(value, hint, name, yaml=not built)


def _literal(value: Any, choices: tuple, name: str, yaml: bool = True) -> Any:
    # YAML 1.1 reads the words off/on/no/yes as booleans; an enum field wants the word back.
    if yaml and isinstance(value, bool) and _YAML_BOOL_WORDS[value] in choices:
        value = _YAML_BOOL_WORDS[value]
    if value not in choices:
        raise ConfigError(f"{name}: got {value!r}; choose one of {', '.join(map(str, choices))}")
    return value


def _scalar(value: Any, hint: Any, name: str, yaml: bool = True) -> Any:
    """``value`` as a bool, int, float or str field asks; ``yaml``: apply YAML 1.1's repairs.
    A numpy number counts as the number it is, a path as its text."""
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return int(value)
    if hint is float:
        if yaml and isinstance(value, str):  # YAML 1.1 reads 3e-5 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{name}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint is str and not isinstance(value, str):
        if yaml and isinstance(value, bool):  # `guard: off` -> False; the field wants the word
            return _YAML_BOOL_WORDS[value]
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return value


def to_dict(config: Any) -> Any:
    """Plain nested dicts/lists of a config (a section's own ``to_dict`` when it has one)."""
    if dataclasses.is_dataclass(config) and hasattr(config, "to_dict"):
        return to_dict(config.to_dict())
    if dataclasses.is_dataclass(config):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, Mapping):
        return {k: to_dict(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [to_dict(v) for v in config]
    return config


#: The most values a YAML document may expand to, an alias counted each time it is used: far
#: above any real config (the shipped ones under configs/ hold 7 to 101), far below an alias
#: bomb's (nine levels of nine aliases: 387 million).
MAX_YAML_VALUES = 100_000


class _TooLarge(ValueError):
    pass


class _Repeated(ValueError):
    pass


@functools.cache
def _bounded_loader():
    """``yaml.SafeLoader`` that measures a document's expanded size before building it."""
    # heavy: yaml, imported on first use so `import flowgrpo` stays light (tests/test_api.py)
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        def construct_document(self, node):
            _expanded_size(node, {}, (yaml.SequenceNode, yaml.MappingNode))
            _refuse_repeated_keys(node, (yaml.SequenceNode, yaml.MappingNode))
            return super().construct_document(node)

    return BoundedLoader


def _refuse_repeated_keys(root, kinds: tuple) -> None:
    """A key written twice in one mapping (``model:`` twice: YAML keeps the last silently, so
    the first section's settings would be lost) is refused, naming the key and its lines;
    merge keys (``<<: *base``) may be overridden, as YAML means them to be."""
    todo, seen = [root], set()
    while todo:  # iterative: a deeply nested document must not exhaust the stack here
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, kinds[1]):
            lines: dict[str, int] = {}
            for key, _ in node.value:
                if key.tag.endswith(":merge") or not isinstance(key.value, str):
                    continue
                line = key.start_mark.line + 1
                if key.value in lines:
                    raise _Repeated(
                        f"key {key.value!r} is written twice in one mapping (lines "
                        f"{lines[key.value]} and {line}); YAML would keep only the last, so "
                        "merge the two"
                    )
                lines[key.value] = line
            todo += [part for pair in node.value for part in pair]
        elif isinstance(node, kinds[0]):
            todo += node.value


def _expanded_size(node, memo: dict, kinds: tuple) -> int:
    """Values of ``node`` with every alias expanded (memoised: a bomb costs its node count)."""
    key = id(node)
    if key in memo:
        if memo[key] is None:
            raise _TooLarge("an alias refers to a value that contains it (a cycle)")
        return memo[key]
    memo[key] = None
    children: list = []
    if isinstance(node, kinds[0]):
        children = node.value
    elif isinstance(node, kinds[1]):
        children = [part for pair in node.value for part in pair]
    total = 1 + sum(_expanded_size(child, memo, kinds) for child in children)
    if total > MAX_YAML_VALUES:
        raise _TooLarge(f"it expands to more than {MAX_YAML_VALUES:,} values (aliases)")
    memo[key] = total
    return total


def load_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` of ``text`` that refuses a document whose aliases expand beyond
    :data:`MAX_YAML_VALUES` values or into a cycle; errors are :class:`ConfigError` naming
    ``source``."""
    # heavy: yaml (see _bounded_loader)
    import yaml

    try:
        return yaml.load(text, Loader=_bounded_loader())  # a SafeLoader subclass: safe
    except _TooLarge as exc:
        raise ConfigError(f"{source}: refused: {exc}; write the values out instead") from None
    except _Repeated as exc:
        raise ConfigError(f"{source}: refused: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: refused: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
