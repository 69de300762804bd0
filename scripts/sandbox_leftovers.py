"""What hostile programs leave behind after many sandbox runs: folders and bytes under the
temporary folder, SysV IPC objects (docs/SANDBOX.md, "What a run leaves behind").

    python scripts/sandbox_leftovers.py --runs 100

Runs ``--runs`` copies of each program two at a time through ``run_python_batch`` (as the
Programmer operator runs code): one that builds a 3,000-deep folder tree with ``ctypes`` and a
4 MB file at its bottom, then ``chmod 0``; one that makes SysV shared memory, a message queue
and a semaphore set. Counts before and after: ``flowgrpo-sandbox-*`` folders and their bytes in
a temporary folder of its own, and the lines of ``/proc/sysvipc/{shm,msg,sem}``. Prints one
JSON object. Linux only; the IPC count is the whole machine's, so run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from flowgrpo.operators.sandbox import run_python_batch

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


def _left(folder: Path) -> tuple[int, int]:
    """(sandbox folders, bytes under them) in ``folder``; never follows links."""
    found = list(folder.glob("flowgrpo-sandbox-*"))
    size = 0
    for top in found:
        for root, _, files in os.walk(top):
            size += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return len(found), size


def _sysv() -> int:
    return sum(
        len(Path(f"/proc/sysvipc/{kind}").read_text().splitlines()) - 1
        for kind in ("shm", "msg", "sem")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs of each program")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        parser.error("Linux only (/proc/sysvipc, Landlock)")
    folder = Path(tempfile.mkdtemp(prefix="flowgrpo-leftovers-"))
    folder.chmod(0o755)  # the sandbox user must traverse it
    old_tempdir, tempfile.tempdir = tempfile.tempdir, str(folder)
    try:
        report = _measure(args.runs, folder)
    finally:
        tempfile.tempdir = old_tempdir
        shutil.rmtree(folder, ignore_errors=True)  # the folder this script made
    print(json.dumps(report, indent=1))
    return 0


def _measure(runs: int, folder: Path) -> dict:
    ipc_before, started = _sysv(), time.perf_counter()
    answered = {}
    for name, program, expect in (("nested", NESTED, "answer 42"), ("sysv", SYSV, "True")):
        results = run_python_batch([program] * runs, timeout_s=30)
        answered[name] = sum(r.ok and expect in r.stdout for r in results)
    folders, size = _left(folder)
    return {
        "runs_each": runs,
        "answered": answered,
        "folders_left": folders,
        "bytes_left": size,
        "sysv_objects_before": ipc_before,
        "sysv_objects_after": _sysv(),
        "seconds": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
