"""Files a command writes: replaced whole (a reader, or a process killed half-way, sees the old
file or the new one, never an empty or half-written one) and removed without following links."""

from __future__ import annotations

import os
import shutil
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


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path``; a file that is not UTF-8 text is a ``ValueError`` naming it
    (Python's own error names the byte, not the file, so a user cannot tell which file)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}): "
            "give a text file (a binary file, or text in another encoding, cannot be read)"
        ) from None


def remove(path: str | os.PathLike) -> bool:
    """Delete what stands at ``path``: a folder with what it holds, a file, or a link (the link
    itself, never what it points to: a link to the user's folder leaves that folder whole).
    Returns False when nothing stands there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    else:
        return False
    return True
