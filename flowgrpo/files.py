"""Replacing a file whole: a reader, or a process killed half-way, sees the old file or the new
one, never an empty or half-written one."""

from __future__ import annotations

import os
from pathlib import Path


def replace_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file beside it, flushed to disk
    and renamed over ``path`` (``os.replace``: atomic on one file system). Rewriting a file in
    place empties it first, so a kill in between lost what it held (a resumed run's
    ``metrics.jsonl`` cut back to its checkpoint lost every row)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # new files follow the umask
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
