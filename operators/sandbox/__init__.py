"""Run generated Python code in a separate, limited process and return what happened.

:func:`run_python` runs one program; :func:`run_python_batch` runs several on a thread pool.
Neither raises on anything the program does: every outcome, including a failure of the sandbox
itself, is an :class:`ExecResult` (``reason`` says what happened). Only bad *arguments* (a
caller bug, e.g. ``timeout_s=0``) raise ``TypeError``/``ValueError`` before anything runs.
:func:`sandbox_capabilities` says which protection layers runs get on this machine.
docs/SANDBOX.md has the design, the measurements and the threat model in full.

What one run does:

* the program runs under the current interpreter (``sys.executable -s -B _child.py``) in a new
  session and process group, with a fresh temporary directory as its working directory (also
  ``HOME`` and ``TMPDIR``), removed afterwards;
* the environment is scrubbed: only ``PATH``, ``LANG``/``LC_ALL``, ``PYTHONHASHSEED=0``,
  ``PYTHONIOENCODING``, one-thread settings for BLAS/OpenMP, a per-run marker variable and the
  caller's ``env`` extras. No variable of the parent is inherited. (``-I`` is not used because it
  also ignores ``PYTHONHASHSEED``; the child's ``PYTHON*`` variables are all set here, so ``-E``
  isolation would add nothing, and the hash seed keeps outputs such as ``print(set_of_str)``
  reproducible between runs, which the result cache relies on.)
* resource limits set in ``preexec_fn`` (soft = hard, lowered only): ``RLIMIT_AS`` =
  ``memory_mb``, ``RLIMIT_CPU`` ~ ``timeout_s`` + 1 s, ``RLIMIT_FSIZE`` = 32 MiB per file,
  ``RLIMIT_NOFILE`` = 256, ``RLIMIT_CORE`` = 0 and ``RLIMIT_NPROC`` = the task count of the user
  the program runs as + 64;
* a wall-clock timeout (``timeout_s``, seconds) after which the whole process group gets SIGKILL;
* when the parent is root, the program gets its own IPC namespace (SysV shared memory, queues
  and semaphores die with it); the folder is removed bottom-up through directory descriptors
  (no tree shape defeats it), and a cleanup that fails only logs a warning: the answer is kept;
* stdout and stderr are read incrementally by one thread each; only the first
  ``max_output_bytes`` bytes of each are kept (the rest is read and dropped, so the parent's
  memory stays bounded), and a marker line says when something was dropped;
* after the program exits (or is killed) its process group is killed, then every process that
  still carries the run's marker variable in ``/proc/<pid>/environ`` is killed (this catches
  children that left the group with ``setsid``), and only then is the leader reaped.

Protection layers, set up by the child (``_child.py``) before the program's first line; a layer
the run should get but cannot set up fails the run (``reason`` "sandbox failure: setup: ...")
instead of running the program with less:

1. kernel, when the parent is root: the program runs as an unprivileged user and group
   (default ``nobody``/``nogroup``; ``FLOWGRPO_SANDBOX_UID``/``FLOWGRPO_SANDBOX_GID`` choose
   others, never 0), with no supplementary groups and no way back (real, effective and saved
   ids all changed, capabilities gone). The working directory is handed to that user. File
   permissions then apply to it (``/etc/shadow``, ``/root``, other users' files), it cannot
   signal or trace the trainer, and ``RLIMIT_NPROC`` is enforced (the kernel ignores it for
   root). The interpreter starts as root and drops before the program runs, because the Python
   installation may be unreachable to that user (here it lives under ``/root``, mode 0700): the
   directories the program imports from are then reached through descriptors opened before the
   drop (``/proc/self/fd/N`` in ``sys.path``), which opens nothing else under them.
2. kernel, when it supports Landlock (``FLOWGRPO_SANDBOX_LANDLOCK=0`` turns it off): the process
   confines itself (``landlock_restrict_self``, irreversible, inherited by children) to reading
   the read allowlist below, reading and writing its working directory, and executing nothing.
   With ABI >= 4 every TCP bind/connect is refused; with ABI >= 6 signals to and abstract UNIX
   sockets of processes outside the sandbox are refused. This holds against ``ctypes``.
3. Python, always: an audit hook (``_guard.py``) refuses with ``PermissionError("sandbox: ...")``
   reads and directory listings outside the read allowlist, writes and other changes outside
   the working directory (``/dev/null`` excepted), starting processes, signalling other
   processes, ``socket`` connect/bind/sendto/sendmsg and ``resource.setrlimit``/``prlimit``.
   Paths are judged by their real path (symlinks, ``..``, ``/proc/self/...`` resolved). It gives
   clear errors and works where layers 1-2 do not, but ``ctypes`` bypasses it.

The read allowlist (real paths): the working directory, the program file, the Python
installation (``sys.prefix``, ``sys.exec_prefix``, ``sys.base_prefix``, ``sys.base_exec_prefix``
and every ``sys.path`` entry), the shared-library folders (``/usr/lib``, ``/usr/lib64``,
``/lib``, ``/lib64``, ``/usr/local/lib``), ``/etc/ld.so.cache``, ``/etc/localtime``,
``/usr/share/zoneinfo``, ``/dev/null``, ``/dev/urandom``, and the process's own stdin/stdout/
stderr pipes (``/dev/stdin``). Everything else (``/etc``, ``/home``, ``/root``, ``/proc``, the
repository, other temporary directories) is refused.

Measured on the development machine (Linux 6.18, Landlock ABI 7, trainer running as root): all
three layers active; ``ctypes`` reading a world-readable file outside the allowlist, writing into
a world-writable folder, executing ``/bin/sh`` or connecting over TCP is refused by Landlock,
and reading ``/etc/shadow`` with Landlock off is refused by file permissions after the drop
(tests/operators/test_sandbox_layers.py checks each; test_sandbox_reads.py the Python paths).

What is NOT protected (use a container or VM, e.g. gVisor, Firecracker, or at least user, mount,
network and PID namespaces plus seccomp, for code written to attack you):

* kernel exploits: every layer relies on the kernel; one bug and the program is root.
* without Landlock (kernel < 5.13, Landlock not enabled at boot, or turned off), ``ctypes`` and
  C extensions bypass the read, write, exec and network rules of the audit hook: then only file
  permissions stand between the program and world-readable files (and, if the parent is not
  root, everything the parent's user can read and write).
* the network beyond TCP: UDP, raw sockets (need privileges) and UNIX sockets on the file system
  are not refused by the kernel layers (the hook refuses Python ``socket`` calls only).
* forking through ``ctypes`` is possible (contained by ``RLIMIT_NPROC`` when not root, the
  timeout and the cleanup); so are CPU and memory use up to the limits.
* the audit hook also loses to a second thread swapping a symlink between check and open, or to
  code that digs the original functions out of the hook's closures: it is a convenience, not a
  boundary. Without root there is no privilege drop: the program runs as the parent's user.
* concurrent runs share the sandbox user: without Landlock scoping they can signal each other.
* a process that rewrites its own environment block can hide the marker; one that is in a new
  session *and* has erased the marker survives the cleanup.
* ``RLIMIT_FSIZE`` bounds each file, not the number of files; the directory is removed after the
  run, so disk use lasts only while the program runs.
* ``preexec_fn`` is documented as unsafe in processes with threads (the child could deadlock
  before ``exec``); here it only calls ``resource.setrlimit`` with precomputed values, which
  takes no locks other threads could hold, and a stuck child still hits the wall-clock timeout.
* if the parent itself is killed (SIGKILL) mid-run, nobody cleans up: the temporary directory
  stays, and the program runs on until it exits or, if busy, hits ``RLIMIT_CPU``.
* only Linux is supported (``/proc``, ``pidfd_open``, Landlock); a private ``TMPDIR`` that the
  sandbox user cannot traverse fails every run with a message saying so.
"""

# ``_BASE_ENV`` and ``_Run`` are internals the tests reach through the package.
from flowgrpo.operators.sandbox._api import run_python, run_python_batch
from flowgrpo.operators.sandbox._policy import sandbox_capabilities
from flowgrpo.operators.sandbox._process import _BASE_ENV as _BASE_ENV
from flowgrpo.operators.sandbox._process import SANDBOX_MARKER_VAR
from flowgrpo.operators.sandbox._process import _Run as _Run
from flowgrpo.operators.sandbox._result import ExecResult

__all__ = [
    "SANDBOX_MARKER_VAR",
    "ExecResult",
    "run_python",
    "run_python_batch",
    "sandbox_capabilities",
]
