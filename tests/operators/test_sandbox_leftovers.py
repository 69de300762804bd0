"""What a run leaves behind: nothing in /tmp whatever tree the program built, no SysV IPC object,
and nothing a later run can read (issue 44). Programs use ``ctypes`` (past the audit hook)."""

from __future__ import annotations

import glob
import os
import sys
import tempfile

import pytest

from flowgrpo.operators.sandbox import run_python, run_python_batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the sandbox user's IPC")

NESTED = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for i in range(3000):
    libc.mkdir(b"d", 0o700)
    libc.chdir(b"d")
fd = libc.open(b"big", 0o101, 0o600)
buf = ctypes.create_string_buffer(b"x" * 1_000_000)
for _ in range(4):
    libc.write(fd, buf, 1_000_000)
libc.close(fd)
libc.chmod(b".", 0)
print("answer 42")
"""
SYSV = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shm = libc.shmget(0x5eed, 1 << 20, 0o1666)
ptr = libc.shmat(shm, None, 0)
ctypes.memmove(ptr, b"secret of an earlier run", 24)
print(shm >= 0, libc.msgget(0x5eee, 0o1666) >= 0, libc.semget(0x5eef, 1, 0o1666) >= 0)
"""
READ_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("found" if libc.shmget(0x5eed, 0, 0) >= 0 else "none")
"""


@pytest.fixture
def own_tmp(monkeypatch):
    """A temporary folder for this test's runs alone (other test processes run sandboxes too),
    traversable by the sandbox user."""
    folder = tempfile.mkdtemp(prefix="flowgrpo-leftovers-")
    os.chmod(folder, 0o755)
    monkeypatch.setattr(tempfile, "tempdir", folder)
    yield folder
    os.rmdir(folder)  # fails the test's teardown if anything was left inside


def _sandbox_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "flowgrpo-sandbox-*")))


def _sysv_objects() -> int:
    return sum(
        len(open(f"/proc/sysvipc/{kind}").read().splitlines()) - 1 for kind in ("shm", "msg", "sem")
    )


def test_a_tree_3000_folders_deep_is_removed_and_the_answer_kept(own_tmp):
    before = _sandbox_dirs()
    result = run_python(NESTED, timeout_s=30)
    assert result.ok and result.stdout.strip() == "answer 42", result.reason
    assert before == set() and _sandbox_dirs() == set()


def test_ten_deep_trees_at_once_leave_nothing_in_tmp(own_tmp):
    before = _sandbox_dirs()
    results = run_python_batch([NESTED] * 10, timeout_s=30)
    assert all(r.ok and "answer 42" in r.stdout for r in results)
    assert before == set() and _sandbox_dirs() == set()


@needs_root
def test_sysv_objects_die_with_the_run():
    before = _sysv_objects()
    results = run_python_batch([SYSV] * 10)
    assert all(r.stdout.split() == ["True", "True", "True"] for r in results), results[0]
    assert _sysv_objects() == before


@needs_root
def test_a_later_run_sees_no_shared_memory_of_an_earlier_one():
    assert run_python(SYSV).ok
    assert run_python(READ_SHM).stdout.strip() == "none"
