"""Session set-up shared by every test.

Under pytest-xdist (the README's ``-n 2``) each worker gets its share of the cores for torch's
intra-op threads: left to itself every worker starts one thread per core, the workers' threads
outnumber the cores and spin against each other (on the 2-core CI machine the 100 constrained
SmolLM2 samples took 31 s alone and 227 s beside another worker). Set through
``OMP_NUM_THREADS``, so the subprocesses tests start (studies, the CLI) inherit it; an explicit
``OMP_NUM_THREADS`` is left alone.
"""

import os
import struct
import sys
import zlib

import pytest


def _share_the_cores() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:  # imported before this file (a plugin): set it directly too
        sys.modules["torch"].set_num_threads(threads)


_share_the_cores()


@pytest.fixture(scope="session", autouse=True)
def _converted_models_in_the_runs_temp(tmp_path_factory):
    """GGUF conversions (operators/converted.py) are kept in this run's pytest temp folder,
    shared by its xdist workers and the subprocesses tests start: the embedded model is
    converted once per run, and never into the user's own cache."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ["FLOWGRPO_CACHE"] = str(shared / "flowgrpo-cache")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


@pytest.fixture
def write_png():
    """``write_png(path, text=None)``: a 1x1 grey PNG built here by the PNG layout (not by the
    code under test), with a ``tEXt`` chunk ``text`` (``b"keyword\\0value"``) when given: a plot
    flowgrpo wrote carries ``b"flowgrpo\\0plot"``, a user's PNG none."""

    def write(path, text: bytes | None = None):
        header = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
        marked = _png_chunk(b"tEXt", text) if text is not None else b""
        pixels = _png_chunk(b"IDAT", zlib.compress(b"\x00\x80"))
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + header + marked + pixels + _png_chunk(b"IEND", b""))
        return path

    return write
