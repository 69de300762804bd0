"""Regenerate the metrics table in docs/METRICS.md from the code's schema.

    python scripts/metrics_table.py

Replaces the text between ``<!-- metrics:start -->`` and ``<!-- metrics:end -->``;
tests/trainer/monitoring/test_metrics_schema.py fails when the file is out of date.
"""

from __future__ import annotations

from pathlib import Path

from flowgrpo.trainer.monitoring.metrics import metrics_table

START, END = "<!-- metrics:start -->", "<!-- metrics:end -->"


def main() -> None:
    path = Path(__file__).parents[1] / "docs" / "METRICS.md"
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{metrics_table()}{END}{tail}", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
