"""What a run leaves behind: nothing in /tmp whatever tree the program built, no SysV IPC object,
and nothing a later run can read (issue 44). Programs use ``ctypes`` (past the audit hook)."""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

from flowgrpo.operators.sandbox import run_python, run_python_batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the sandbox user's IPC")


def _script_programs():
    """The two hostile programs, from the script that measures them at scale
    (scripts/sandbox_leftovers.py): one copy of each."""
    path = Path(__file__).parents[2] / "scripts" / "sandbox_leftovers.py"
    spec = importlib.util.spec_from_file_location("sandbox_leftovers_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NESTED, module.SYSV


NESTED, SYSV = _script_programs()
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


@pytest.mark.slow
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
