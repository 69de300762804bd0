"""Execution result cache: by (canonical workflow, problem id, executor settings, limits).

A key is a tuple of strings: the interpreter builds it from the canonical workflow, the problem
id, the backend's ``settings_key`` and :meth:`operators.interpreter.Limits.cache_key` (canonical
JSON of the limits), so equal settings give equal keys in every process and on every restart.

Real runs repeat the same few workflows (20 distinct workflows in 570 samples), so caching
decides the step time once workflows become valid. In memory, optionally persisted to a JSONL
file (one line per result, appended) so a resumed run or an evaluation reuses earlier results.
Unscorable results (executor failures) are never cached.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from flowgrpo.files import replace_text
from flowgrpo.operators.state import ExecutionResult

logger = logging.getLogger(__name__)


class ExecutionCache:
    """A dict of results with hit/miss counts and an optional JSONL file behind it."""

    def __init__(self, path: str | os.PathLike | None = None, max_entries: int = 200_000):
        self._data: dict[str, ExecutionResult] = {}
        self.hits = self.misses = 0
        self.lines = 0  # complete lines the file holds: what a checkpoint records
        self.max_entries = max_entries
        self.path = Path(path) if path else None
        if self.path is not None and self.path.exists():
            self._load()

    @staticmethod
    def _key(key: tuple[str, ...]) -> str:
        if not all(isinstance(part, str) for part in key):
            raise TypeError(f"cache key parts must be strings, got {key!r}")
        return json.dumps(list(key))

    def get(self, key: tuple[str, ...]) -> ExecutionResult | None:
        """The result stored under ``key``, or None (counted as a hit or a miss)."""
        value = self._data.get(self._key(key))
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: tuple[str, ...], result: ExecutionResult) -> None:
        """Store ``result`` (evicting the oldest entry when full) and append it to the file."""
        if len(self._data) >= self.max_entries:
            self._data.pop(next(iter(self._data)))  # oldest first
        k = self._key(key)
        self._data[k] = result
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": k, "result": result.to_dict()}) + "\n")
                self.lines += 1
            except OSError as exc:  # a full disk: keep caching in memory, stop appending
                logger.warning("execution cache: cannot append to %s (%s); results are kept "
                               "in memory only from now on", self.path, exc)  # fmt: skip
                self.path = None

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict:
        return {
            "entries": len(self),
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": self.hit_rate,
        }

    def cut_back(self, lines: int, rewrite: bool = True) -> None:
        """Keep the first ``lines`` lines of the file (what it held when a checkpoint was saved)
        and reload (``rewrite`` False: reload only, the file cut by another process): a resumed
        run must not find results of the steps it is about to redo, or its hit rate and executor
        calls differ from a run that never stopped (and a sampling executor's draws with them)."""
        if self.path is None or not self.path.exists():
            return
        if rewrite:
            kept = self.path.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]
            replace_text(self.path, "".join(line for line in kept if line.endswith("\n")))
        self._data.clear()
        self.lines = 0
        self._load()

    def _load(self) -> None:
        bad = 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                self._data[row["key"]] = ExecutionResult.from_dict(row["result"])
            except (ValueError, KeyError, TypeError):
                bad += 1  # a torn last line after a kill: skip it
                continue
            self.lines += 1
        if bad:
            logger.warning("execution cache %s: skipped %d unreadable lines", self.path, bad)
