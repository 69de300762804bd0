"""Regenerate the metrics table in docs/METRICS.md from the code's schema.

    python scripts/metrics_table.py

Replaces the text between ``<!-- metrics:start -->`` and ``<!-- metrics:end -->``;
tests/trainer/monitoring/test_metrics_schema.py fails when the file is out of date.
"""

from __future__ import annotations

from pathlib import Path

from flowgrpo.metrics_hooks import METRICS_HOOKS
from flowgrpo.operators.backends import available_backends, find_backend
from flowgrpo.trainer.monitoring.metrics import metrics_table

START, END = "<!-- metrics:start -->", "<!-- metrics:end -->"


def documented_table() -> str:
    """The table docs/METRICS.md holds: the core schema and the built-in plugins' keys (each
    built-in plugin is imported, which registers its metrics hook)."""
    for kind in available_backends():
        find_backend(kind)
    return metrics_table((name, METRICS_HOOKS.get(name)) for name in METRICS_HOOKS.names())


def main() -> None:
    path = Path(__file__).parents[1] / "docs" / "METRICS.md"
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{documented_table()}{END}{tail}", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
