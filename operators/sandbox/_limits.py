"""Resource limits for the child, computed in the parent and applied in ``preexec_fn``."""

from __future__ import annotations

import math
import os
import resource

MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_OPEN_FILES = 256
EXTRA_TASKS = 64


def limits(timeout_s: float, memory_mb: int, uid: int) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) pairs, each clamped to the current hard limit.

    ``uid`` is the user the program will run as: ``RLIMIT_NPROC`` counts that user's tasks, so
    the allowance is its current task count plus :data:`EXTRA_TASKS`. The kernel ignores this
    limit for root, which is one reason a root parent drops privileges.
    """
    cpu = math.ceil(timeout_s) + 1  # SIGXCPU at the soft limit, SIGKILL one second later
    memory = memory_mb * 1024 * 1024
    wanted = [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES, MAX_FILE_BYTES),
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    tasks = count_user_tasks(uid)
    if tasks is not None:
        wanted.append((resource.RLIMIT_NPROC, tasks + EXTRA_TASKS, tasks + EXTRA_TASKS))
    pairs = []
    for which, soft, hard in wanted:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        pairs.append((which, (soft, hard)))
    return pairs


def count_user_tasks(uid: int) -> int | None:
    """Threads of all processes whose real uid is ``uid`` (what RLIMIT_NPROC counts); None if
    unknown (no ``/proc``)."""
    wanted = str(uid)
    total = 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [wanted]:
            threads = fields.get("Threads", "1").strip()
            total += int(threads) if threads.isdigit() else 1
    return total
