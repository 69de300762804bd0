"""Run generated Python code in a separate, limited process and return what happened.

:func:`run_python` runs one program; :func:`run_python_batch` runs several on a thread pool.
Neither raises on anything the program does: every outcome, including a failure of the sandbox
itself, is an :class:`ExecResult` (``reason`` says what happened). Only bad *arguments* (a
caller bug, e.g. ``timeout_s=0``) raise ``TypeError``/``ValueError`` before anything runs.

What one run does:

* the program runs under the current interpreter (``sys.executable -s -B``) in a new session and
  process group, with a fresh temporary directory as its working directory (also ``HOME`` and
  ``TMPDIR``), removed afterwards;
* the environment is scrubbed: only ``PATH``, ``LANG``/``LC_ALL``, ``PYTHONHASHSEED=0``,
  ``PYTHONIOENCODING``, one-thread settings for BLAS/OpenMP, a per-run marker variable and the
  caller's ``env`` extras. No variable of the parent is inherited. (``-I`` is not used because it
  also ignores ``PYTHONHASHSEED``; the child's ``PYTHON*`` variables are all set here, so ``-E``
  isolation would add nothing, and the hash seed keeps outputs such as ``print(set_of_str)``
  reproducible between runs, which the result cache relies on.)
* resource limits set in ``preexec_fn`` (soft = hard, lowered only): ``RLIMIT_AS`` =
  ``memory_mb``, ``RLIMIT_CPU`` ~ ``timeout_s`` + 1 s, ``RLIMIT_FSIZE`` = 32 MiB per file,
  ``RLIMIT_NOFILE`` = 256, ``RLIMIT_CORE`` = 0 and ``RLIMIT_NPROC`` = the user's current task count
  + 64;
* a wall-clock timeout (``timeout_s``, seconds) after which the whole process group gets SIGKILL;
* stdout and stderr are read incrementally by one thread each; only the first
  ``max_output_bytes`` bytes of each are kept (the rest is read and dropped, so the parent's
  memory stays bounded), and a marker line says when something was dropped;
* after the program exits (or is killed) its process group is killed, then every process that
  still carries the run's marker variable in ``/proc/<pid>/environ`` is killed (this catches
  children that left the group with ``setsid``), and only then is the leader reaped;
* a Python prelude in the child installs an audit hook (``sys.addaudithook``) before the program
  runs. It refuses, with ``PermissionError``: opening files for writing, creating, removing,
  renaming, linking, truncating or changing the mode/owner/times of paths outside the working
  directory (``/dev/null`` is allowed); reading ``/proc/*/environ`` and ``/proc/*/mem``;
  ``os.fork``/``forkpty``/``exec*``/``spawn*``/``posix_spawn``/``system``, ``subprocess.Popen``
  and ``_posixsubprocess.fork_exec`` (so ``multiprocessing`` cannot start processes either);
  ``os.kill`` of any other process and ``os.killpg`` of any other group; ``socket`` connect, bind,
  sendto, sendmsg; and raising resource limits with ``resource.setrlimit``/``prlimit``.

What is NOT protected (this is not a security boundary against hostile code, only against the
accidents of generated code: infinite loops, memory or fork bombs, huge output, stray writes):

* audit hooks are a Python-level mechanism. Code that uses ``ctypes`` (or a C extension) can call
  libc directly: fork, kill the parent, write anywhere, open sockets. A determined attacker
  escapes easily. Use a container/VM (namespaces, seccomp) for untrusted code.
* as root (uid 0 of the initial user namespace) the kernel does not enforce ``RLIMIT_NPROC``,
  and root may raise its own hard limits (only the audit hook stops ``resource.setrlimit``).
  A fork bomb that bypasses the hook (ctypes) is contained only by ``RLIMIT_AS`` per process, the
  wall-clock timeout and the group/marker kill afterwards; it can load the machine meanwhile.
* reading files outside the working directory is allowed (except ``/proc/*/environ|mem``); so is
  network access through anything that is not an audited ``socket`` call.
* path checks resolve paths relative to the current directory; calls with ``dir_fd`` are checked
  as if the path were relative to the working directory. Hard links made *inside* the working
  directory to files outside are refused (``os.link`` checks both paths).
* a process that rewrites its own environment block can hide the marker; one that is in a new
  session *and* has erased the marker survives the cleanup.
* ``RLIMIT_FSIZE`` bounds each file, not the number of files; the directory is removed after the
  run, so disk use lasts only while the program runs.
* ``preexec_fn`` is documented as unsafe in processes with threads (the child could deadlock
  before ``exec``); here it only calls ``resource.setrlimit`` with precomputed values, which
  takes no locks other threads could hold, and a stuck child still hits the wall-clock timeout.
* if the parent itself is killed (SIGKILL) mid-run, nobody cleans up: the temporary directory
  stays, and the program runs on until it exits or, if busy, hits ``RLIMIT_CPU``.
* only Linux is supported (``/proc``, ``pidfd_open``; other POSIX systems lose the marker sweep).
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
