"""A bounded record of the workflows of recent batches, for the rarity part of diversity."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any


class RecentWorkflows:
    """Counts of workflows over the last ``window_batches`` batches (the reward counts their
    :attr:`~flowgrpo.rewards.sample.Sample.diversity_key`: canonical forms without instructions).

    ``rarity(c) = 1 - count(c) / count(most common)`` over the window: the most common workflow
    scores 0, a workflow not seen in the window scores 1, and an empty window scores every
    workflow 1. Dividing by the top count (not by the number of samples) keeps the scale the same
    however large the batches are. ``None`` (no workflow) has rarity 0 and is never recorded.

    >>> h = RecentWorkflows(window_batches=2)
    >>> h.push(["Custom", "Custom", "Custom -> Format", None])
    >>> h.rarity("Custom"), h.rarity("Custom -> Format"), h.rarity("Programmer")
    (0.0, 0.5, 1.0)

    Not thread-safe. Checkpoint it with :meth:`to_dict` / :meth:`from_dict`.
    """

    def __init__(self, window_batches: int = 8):
        if isinstance(window_batches, bool) or not isinstance(window_batches, int):
            raise ValueError(f"window_batches must be an int, got {window_batches!r}")
        if window_batches < 1:
            raise ValueError(f"window_batches must be >= 1, got {window_batches}")
        self.window_batches = window_batches
        self._batches: deque[Counter] = deque()
        self._total: Counter = Counter()

    def push(self, batch_canonicals: Iterable[str | None]) -> None:
        """Record one batch (None entries are skipped); the oldest batch leaves a full window."""
        if isinstance(batch_canonicals, str):
            raise TypeError("push() takes an iterable of canonical forms, not one string")
        batch = Counter(c for c in batch_canonicals if c is not None)
        self._batches.append(batch)
        self._total.update(batch)
        while len(self._batches) > self.window_batches:
            old = self._batches.popleft()
            self._total.subtract(old)
            self._total = +self._total  # drop zero counts

    def rarity(self, canonical: str | None) -> float:
        """In [0, 1]: 1 for a workflow not in the window, 0 for the most common one."""
        if canonical is None:
            return 0.0
        if not self._total:
            return 1.0
        top = max(self._total.values())
        return 1.0 - self._total.get(canonical, 0) / top

    def __len__(self) -> int:
        """Number of batches in the window."""
        return len(self._batches)

    def counts(self) -> dict[str, int]:
        """Canonical form -> count over the window."""
        return dict(self._total)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot (window size and per-batch counts, oldest first)."""
        return {
            "window_batches": self.window_batches,
            "batches": [dict(b) for b in self._batches],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecentWorkflows:
        """Rebuild from :meth:`to_dict` output."""
        history = cls(int(data["window_batches"]))
        for batch in data.get("batches", []):
            history.push(Counter(dict(batch)).elements())
        return history
