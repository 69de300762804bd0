"""Files a command writes: replaced whole (a reader, or a process killed half-way, sees the old
file or the new one, never an empty or half-written one), removed without following links, and
the mark that tells a plot flowgrpo wrote from a user's PNG of the same name."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

#: The PNG text keyword (a ``tEXt`` chunk) every plot flowgrpo writes carries: a command
#: replaces or deletes a PNG only when it carries it, so a user's ``plots/reward.png`` (or one
#: drawn by an older flowgrpo, which wrote no mark) is never lost.
PNG_MARK = "flowgrpo"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


def unwritable(path: str | os.PathLike) -> str | None:
    """Why no file can be written at ``path``, or None: a folder stands there, or a file where
    a folder of its path should be. Checked before a long run whose report goes there."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder: give a file name"
    above = next((p for p in path.parents if p.exists() or p.is_symlink()), None)
    if above is not None and not above.is_dir():
        return f"{above} is a file, so {path} cannot be written: give another path"
    return None


def png_marked(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a PNG file (not a link) with a ``tEXt`` chunk keyed :data:`PNG_MARK`.
    Chunks are read by the PNG layout (length, type, data, CRC: the PNG specification, section
    5.3) up to the image data; anything else, or a file that cannot be read, is not marked."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            if handle.read(8) != _PNG_SIGNATURE:
                return False
            while len(head := handle.read(8)) == 8:
                length, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND"):
                    return False
                data = handle.read(length)
                if kind == b"tEXt" and data.split(b"\0", 1)[0] == PNG_MARK.encode("latin-1"):
                    return True
                handle.read(4)  # the CRC
    except OSError:
        return False
    return False
