"""Hand freed host memory back to the system between the phases of a run.

PyTorch's CPU tensors come from the C allocator. glibc's malloc keeps freed blocks in its heap
for reuse, and after a training step of a 135M model (~0.7 GB of activations freed in pieces of
many sizes) the process keeps that memory resident; the next phase (sampling, whose KV cache
grows a few megabytes per token) cannot always reuse the pieces, so the two phases' memory adds
up in the peak. ``malloc_trim(0)`` returns the free pages of every arena to the system (glibc
manual, "Memory Allocation Tunables" / malloc_trim(3)); it costs milliseconds. Elsewhere (musl,
macOS, Windows) it is absent and :func:`release_memory` only collects garbage.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from functools import cache

logger = logging.getLogger(__name__)


@cache
def _malloc_trim():
    """glibc's ``malloc_trim`` (None where the C library has none)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_memory() -> bool:
    """Collect garbage and return freed heap pages to the system; True when the C library
    could trim (glibc), False when only Python's garbage was collected."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
