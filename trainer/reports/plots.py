"""Small matplotlib helpers shared by ``flowgrpo diagnose`` and ``flowgrpo analyze``.

Figures are drawn on the Agg canvas directly (``matplotlib.figure.Figure``), so the global
pyplot backend and state are never touched and no display is needed. matplotlib is imported
inside the functions; without it a clear error says how to install it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path


def new_figure(width: float = 7.0, height: float = 3.6):
    """A (figure, axes) pair on an Agg canvas."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is installed in tests
        raise ImportError(
            "plots need matplotlib: pip install matplotlib (or run without plots)"
        ) from exc
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def save(figure, path: Path) -> Path:
    """Write ``figure`` as PNG to ``path`` (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def series(history: Sequence[Mapping], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key``: lines without a finite number for it are left out."""
    steps, values = [], []
    for index, line in enumerate(history):
        value = line.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            continue
        step = line.get("step", index)
        steps.append(step if isinstance(step, (int, float)) else index)
        values.append(float(value))
    return steps, values


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, xlabel: str, path: Path):
    """A horizontal bar chart (first label on top) written to ``path``; None when empty."""
    if not labels:
        return None
    short = [label if len(label) <= 60 else label[:57] + "..." for label in labels]
    figure, axes = new_figure(8.0, max(2.0, 0.4 * len(labels) + 1.2))
    positions = list(range(len(labels)))
    axes.barh(positions, list(values), color="tab:blue")
    axes.set_yticks(positions)
    axes.set_yticklabels(short, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    return save(figure, path)
