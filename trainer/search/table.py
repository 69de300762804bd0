"""The search's pick as a policy: what ``flowgrpo eval --search FILE`` evaluates.

A plain search's JSON (``flowgrpo search --out``) holds one table of workflows, best first: its
pick is the first, for every problem. A per-label search's (``--by KEY``) holds one table per
label: each problem gets its own label's first. Evaluated on the held-out problems like a
checkpoint's samples, the pick is the baseline a trained policy has to beat (issue 40: RL is
worth more than a search only where it beats this).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.search.by_label import label_of

__all__ = ["load_search_pick", "search_pick"]


def _first(table: Mapping, where: str) -> str:
    top = table.get("top") if isinstance(table, Mapping) else None
    if not top or not isinstance(top[0], Mapping) or "workflow" not in top[0]:
        raise ValueError(f"{where} has no workflow in its 'top' list; make the file with "
                         "flowgrpo search --out FILE (a --top of at least 1)")  # fmt: skip
    return str(top[0]["workflow"])


def search_pick(data: Mapping, name: str = "the search result") -> Callable[[Problem], str]:
    """``problem -> workflow`` from a search's JSON: the first pick, or the first of the
    problem's own label (a ``ValueError`` naming a label the table lacks)."""
    if not isinstance(data, Mapping) or not ("labels" in data or "top" in data):
        raise ValueError(f"{name} is not a flowgrpo search result (no 'top' or 'labels'); "
                         "make one with flowgrpo search --out FILE")  # fmt: skip
    if "top" in data and "labels" not in data:
        workflow = _first(data, name)
        return lambda problem: workflow
    keys, labels = list(data.get("by") or []), data["labels"]
    if not keys or not isinstance(labels, Mapping):
        raise ValueError(f"{name}: a per-label search result needs 'by' and 'labels'")
    table = {label: _first(entry, f"{name}, label {label!r}") for label, entry in labels.items()}

    def pick(problem: Problem) -> str:
        label = label_of(problem, keys)
        if label not in table:
            raise ValueError(
                f"{name} has no workflow for label {label!r} (problem {problem.id}); it holds "
                f"{sorted(table)}: search with the same task, or with the labels of these problems"
            )
        return table[label]

    return pick


def load_search_pick(path: str | Path) -> Callable[[Problem], str]:
    """:func:`search_pick` of the JSON file at ``path``; a missing or unreadable file is a
    ``ValueError`` that says what to do."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"--search {path}: no such file; make it with flowgrpo search "
                         f"--out {path}") from exc  # fmt: skip
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--search {path}: not a readable JSON file ({exc})") from exc
    return search_pick(data, f"--search {path}")
