"""Freed host memory goes back to the system between a run's phases (trainer/loop/memory.py)."""

import gc
import platform
import weakref

import pytest

from flowgrpo.trainer.loop import memory


def _resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(row for row in status if row.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_blocks_inside_the_heap_are_returned():
    memory.release_memory()
    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # 256 MB of malloc'd blocks, touched
    kept = blocks[::10]  # one block in ten stays: the heap's top cannot shrink past them
    del blocks
    before = _resident_bytes()
    assert memory.release_memory() is True
    after = _resident_bytes()
    assert before - after > 150 * 1024 * 1024, (before, after)
    assert len(kept) == 400


def test_without_malloc_trim_only_garbage_is_collected(monkeypatch):
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the collector frees it
    alive = weakref.ref(a)
    gc.disable()
    try:
        del a, b
        assert alive() is not None
        assert memory.release_memory() is False
        assert alive() is None
    finally:
        gc.enable()
