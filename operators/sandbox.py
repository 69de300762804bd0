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

from __future__ import annotations

import logging
import math
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: Environment variable every sandboxed process carries (value: a per-run id).
SANDBOX_MARKER_VAR = "FLOWGRPO_SANDBOX_ID"

_SYNTAX_EXIT = 113  # exit code the prelude uses when the program does not compile
_MEMORY_EXIT = 114  # exit code the prelude uses when the program raised MemoryError
_MIN_MEMORY_MB = 64  # the interpreter plus prelude needs ~25 MB of address space
_MAX_FILE_BYTES = 32 * 1024 * 1024
_MAX_OPEN_FILES = 256
_EXTRA_TASKS = 64
_READ_CHUNK = 64 * 1024
_JOIN_SECONDS = 2.0
_SWEEP_ROUNDS = 50
_BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONSAFEPATH": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_MEMORY_RE = re.compile(r"MemoryError\b|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")
_SYNTAX_RE = re.compile(r"\b(?:Syntax|Indentation|Tab)Error\b")

# Runs in the child via ``-c`` before the program. argv: code path, work dir, exit codes.
_PRELUDE = r"""
import os, sys


def _flowgrpo_guard(work):
    import posixpath, re
    realpath, fspath, fsdecode = posixpath.realpath, os.fspath, os.fsdecode
    getpid, getpgrp = os.getpid, os.getpgrp
    prefix = work.rstrip("/") + "/"
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    secret = re.compile(r"/proc/[^/]+/(?:task/[^/]+/)?(?:environ|mem)\Z").match
    spawn = {"os.fork", "os.forkpty", "os.exec", "os.spawn", "os.posix_spawn", "os.system",
             "subprocess.Popen", "os.startfile"}
    net = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
    one_path = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.utime",
                "os.truncate", "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr",
                "shutil.rmtree"}

    def resolve(path):
        return realpath(fsdecode(fspath(path)))

    def inside(path):
        if path is None or isinstance(path, int):
            return True
        p = resolve(path)
        return p == work or p.startswith(prefix) or p == "/dev/null"

    def deny(event, what):
        raise PermissionError(f"sandbox: {event} is not allowed ({what})")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            if secret(resolve(path)):
                deny(event, f"reading {path!r}")
            writing = isinstance(flags, int) and flags & write_flags
            if isinstance(mode, str) and any(c in mode for c in "wax+"):
                writing = True
            if writing and not inside(path):
                deny(event, f"writing {path!r} outside the working directory")
        elif event in one_path:
            if not inside(args[0]):
                deny(event, f"{args[0]!r} is outside the working directory")
        elif event in ("os.rename", "os.link"):
            if not (inside(args[0]) and inside(args[1])):
                deny(event, f"{args[0]!r} -> {args[1]!r} leaves the working directory")
        elif event == "os.symlink":
            if not inside(args[1]):
                deny(event, f"{args[1]!r} is outside the working directory")
        elif event in spawn:
            deny(event, "starting processes")
        elif event == "os.kill":
            if args[0] != getpid():
                deny(event, f"signalling pid {args[0]}")
        elif event == "os.killpg":
            if args[0] != getpgrp():
                deny(event, f"signalling process group {args[0]}")
        elif event in net:
            deny(event, "network access")
        elif event in ("resource.setrlimit", "resource.prlimit"):
            deny(event, "changing resource limits")

    sys.addaudithook(hook)
    try:
        import _posixsubprocess
    except ImportError:
        return

    def no_fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting processes is not allowed")

    _posixsubprocess.fork_exec = no_fork_exec


def _flowgrpo_report(exc):
    try:
        import traceback
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
    except BaseException:
        os.write(2, (type(exc).__name__ + "\n").encode())


def _flowgrpo_main():
    import builtins, traceback, types
    code_path, work, syntax_exit, memory_exit = sys.argv[1:5]
    sys.argv[:] = [code_path]
    sys.dont_write_bytecode = True
    with open(code_path, encoding="utf-8", errors="surrogateescape") as f:
        source = f.read()
    try:
        code = compile(source, code_path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if not isinstance(exc, SyntaxError):
            exc = SyntaxError(str(exc))
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        sys.stderr.flush()
        os._exit(int(syntax_exit))
    del source
    _flowgrpo_guard(work)
    main = types.ModuleType("__main__")
    main.__file__ = code_path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except MemoryError as exc:
        _flowgrpo_report(exc)
        raise SystemExit(int(memory_exit)) from None
    except BaseException as exc:
        _flowgrpo_report(exc)
        raise SystemExit(1) from None


_flowgrpo_main()
"""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one sandboxed run.

    Attributes:
        ok: exit code 0, no timeout, no limit hit (memory, CPU, output).
        stdout / stderr: decoded as UTF-8 (invalid bytes replaced), cut to ``max_output_bytes``
            bytes each, followed by a ``[sandbox: ... truncated ...]`` line when cut.
        returncode: the exit status (negative: killed by that signal); None if it never ran.
        timed_out: the wall-clock timeout or the CPU-time limit was hit.
        reason: "" when ok; otherwise e.g. "timeout after 5.0 s", "memory limit",
            "exit code 1", "syntax error", "killed by signal 9 (SIGKILL)",
            "output limit: ...", "sandbox failure: ...".
        seconds: wall time from start to exit (or kill), in seconds.
    """

    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    reason: str
    seconds: float


def run_python(
    code: str,
    stdin: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    env: dict[str, str] | None = None,
) -> ExecResult:
    """Run Python source ``code`` in the sandbox (see the module docstring) and report.

    Args:
        code: the program, as ``python file.py`` would run it (``__name__ == "__main__"``).
        stdin: text fed to the program's stdin (UTF-8); None gives it ``/dev/null``.
        timeout_s: wall-clock limit in seconds (> 0); CPU time is limited to about the same + 1 s.
        memory_mb: address-space limit in MiB (>= 64).
        max_output_bytes: bytes kept from each of stdout and stderr (>= 0).
        env: extra environment variables for the program (nothing else is inherited).

    Raises:
        TypeError/ValueError: only for bad arguments; never for what the program does.
    """
    _validate(code, stdin, timeout_s, memory_mb, max_output_bytes, env)
    start = time.monotonic()
    try:
        return _Run(code, stdin, timeout_s, memory_mb, max_output_bytes, env or {}).execute()
    except Exception as exc:  # the sandbox itself failed: report, never raise into the caller
        logger.warning("sandbox failure: %r", exc, exc_info=True)
        return ExecResult(
            ok=False,
            stdout="",
            stderr="",
            returncode=None,
            timed_out=False,
            reason=f"sandbox failure: {type(exc).__name__}: {exc}",
            seconds=time.monotonic() - start,
        )


def run_python_batch(
    codes: Sequence[str],
    stdins: Sequence[str | None] | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    env: dict[str, str] | None = None,
    max_workers: int = 2,
) -> list[ExecResult]:
    """Run each program of ``codes`` like :func:`run_python`, ``max_workers`` at a time.

    ``stdins``, when given, has one entry per program. Results are in the order of ``codes``.
    Arguments are validated before anything runs.
    """
    if isinstance(codes, str) or not isinstance(codes, Sequence):
        raise TypeError(f"codes must be a sequence of program strings, got {type(codes).__name__}")
    if stdins is None:
        stdins = [None] * len(codes)
    elif isinstance(stdins, str) or len(stdins) != len(codes):
        raise ValueError("stdins must be a sequence with one entry (str or None) per program")
    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
    for code, stdin in zip(codes, stdins):
        _validate(code, stdin, timeout_s, memory_mb, max_output_bytes, env)
    if not codes:
        return []

    def one(pair: tuple[str, str | None]) -> ExecResult:
        return run_python(pair[0], pair[1], timeout_s, memory_mb, max_output_bytes, env)

    with ThreadPoolExecutor(max_workers=min(max_workers, len(codes))) as pool:
        return list(pool.map(one, zip(codes, stdins)))


def _validate(
    code: object,
    stdin: object,
    timeout_s: object,
    memory_mb: object,
    max_output_bytes: object,
    env: object,
) -> None:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    if stdin is not None and not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str or None, got {type(stdin).__name__}")
    ok_timeout = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if not ok_timeout or not (0 < timeout_s < math.inf):
        raise ValueError(f"timeout_s must be a positive finite number (seconds), got {timeout_s!r}")
    if not isinstance(memory_mb, int) or memory_mb < _MIN_MEMORY_MB:
        raise ValueError(
            f"memory_mb must be an int >= {_MIN_MEMORY_MB} (the interpreter alone needs ~25 MB),"
            f" got {memory_mb!r}"
        )
    if not isinstance(max_output_bytes, int) or max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be an int >= 0, got {max_output_bytes!r}")
    if env is None:
        return
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a dict of str to str, got {type(env).__name__}")
    for key, value in env.items():
        bad_key = not isinstance(key, str) or not key or "=" in key or "\0" in key
        if bad_key or not isinstance(value, str) or "\0" in value:
            raise ValueError(f"env entry {key!r}: names and values must be str without NUL or '='")
        if key == SANDBOX_MARKER_VAR:
            raise ValueError(f"env may not set {SANDBOX_MARKER_VAR}; the sandbox owns it")


class _BoundedReader:
    """Reads a pipe to EOF on a daemon thread, keeping only the first ``limit`` bytes."""

    def __init__(self, pipe, limit: int) -> None:
        self.pipe, self.limit = pipe, limit
        self.kept = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="sandbox-reader")
        self.thread.start()

    def _run(self) -> None:
        fd = self.pipe.fileno()
        try:
            while chunk := os.read(fd, _READ_CHUNK):
                self.total += len(chunk)
                room = self.limit - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        except OSError:
            pass
        finally:
            self.pipe.close()

    def text(self) -> str:
        text = bytes(self.kept).decode("utf-8", errors="replace")
        if self.total > self.limit:
            text += (
                f"\n[sandbox: output truncated: {self.total} bytes written,"
                f" first {self.limit} kept]\n"
            )
        return text


def _feed(pipe, data: bytes) -> None:
    """Write ``data`` to the program's stdin and close it (runs on its own daemon thread)."""
    try:
        pipe.write(data)
    except OSError:  # the program exited or closed stdin without reading everything
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


class _Run:
    """One sandboxed execution: spawn, wait, kill leftovers, classify, clean up."""

    def __init__(self, code, stdin, timeout_s, memory_mb, max_output_bytes, env) -> None:
        self.code, self.stdin, self.timeout_s = code, stdin, float(timeout_s)
        self.memory_mb, self.max_output = memory_mb, max_output_bytes
        self.extra_env = dict(env)
        self.marker = uuid.uuid4().hex

    def execute(self) -> ExecResult:
        root = tempfile.mkdtemp(prefix="flowgrpo-sandbox-")
        proc = None
        try:
            work = os.path.join(root, "work")
            os.mkdir(work)
            code_path = os.path.join(root, "main.py")
            with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(self.code)
            start = time.monotonic()
            proc = self._spawn(code_path, work)
            readers = [_BoundedReader(p, self.max_output) for p in (proc.stdout, proc.stderr)]
            threads = [r.thread for r in readers]
            if self.stdin is not None:
                data = self.stdin.encode("utf-8", errors="replace")
                threads.append(threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True))
                threads[-1].start()
            exited = _wait_exit(proc.pid, start + self.timeout_s)
            seconds = time.monotonic() - start
            self._kill_all(proc)
            returncode = _reap(proc)
            for thread in threads:
                thread.join(_JOIN_SECONDS)
            return self._result(returncode, not exited, readers, seconds)
        finally:
            if proc is not None and proc.returncode is None:
                self._kill_all(proc)
                _reap(proc)
            shutil.rmtree(root, ignore_errors=True)

    def _spawn(self, code_path: str, work: str) -> subprocess.Popen:
        env = {**_BASE_ENV, "HOME": work, "TMPDIR": work, **self.extra_env}
        env[SANDBOX_MARKER_VAR] = self.marker
        limits = _limits(self.timeout_s, self.memory_mb)
        argv = [sys.executable, "-s", "-B", "-c", _PRELUDE, code_path, work]
        argv += [str(_SYNTAX_EXIT), str(_MEMORY_EXIT)]

        def preexec() -> None:  # runs in the child between fork and exec: setrlimit only
            for which, value in limits:
                resource.setrlimit(which, value)

        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if self.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
        )

    def _kill_all(self, proc: subprocess.Popen) -> None:
        """SIGKILL the process group (leader not yet reaped, so its id is not reused), then
        every process carrying this run's marker."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        killed = _kill_marked(f"{SANDBOX_MARKER_VAR}={self.marker}".encode())
        if killed:
            logger.info("sandbox: sent SIGKILL %d time(s) to processes left by the run", killed)

    def _result(self, returncode, timed_out, readers, seconds) -> ExecResult:
        out, err = readers
        stdout, stderr = out.text(), err.text()
        truncated = out.total > self.max_output or err.total > self.max_output
        if returncode == -signal.SIGXCPU:
            timed_out = True
        reason = _reason(returncode, timed_out, stderr, truncated, self)
        return ExecResult(
            ok=reason == "",
            stdout=stdout,
            stderr=stderr,
            returncode=returncode,
            timed_out=timed_out,
            reason=reason,
            seconds=seconds,
        )


def _reason(returncode: int, timed_out: bool, stderr: str, truncated: bool, run: _Run) -> str:
    if timed_out:
        if returncode == -signal.SIGXCPU:
            return f"timeout: cpu time limit after {_seconds(run.timeout_s)} s"
        return f"timeout after {_seconds(run.timeout_s)} s"
    if returncode == _SYNTAX_EXIT and _SYNTAX_RE.search(stderr):
        return "syntax error"
    if returncode != 0 and (returncode == _MEMORY_EXIT or _MEMORY_RE.search(stderr[-2000:])):
        return f"memory limit ({run.memory_mb} MB)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-returncode} ({name})"
    if returncode != 0:
        return f"exit code {returncode}"
    if truncated:
        return f"output limit: more than {run.max_output} bytes on stdout or stderr"
    return ""


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def _limits(timeout_s: float, memory_mb: int) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) pairs, each clamped to the current hard limit."""
    cpu = math.ceil(timeout_s) + 1  # SIGXCPU at the soft limit, SIGKILL one second later
    memory = memory_mb * 1024 * 1024
    wanted = [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, _MAX_FILE_BYTES, _MAX_FILE_BYTES),
        (resource.RLIMIT_NOFILE, _MAX_OPEN_FILES, _MAX_OPEN_FILES),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    tasks = _count_user_tasks()
    if tasks is not None:
        wanted.append((resource.RLIMIT_NPROC, tasks + _EXTRA_TASKS, tasks + _EXTRA_TASKS))
    limits = []
    for which, soft, hard in wanted:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        limits.append((which, (soft, hard)))
    return limits


def _count_user_tasks() -> int | None:
    """Threads of all processes of our real uid (what RLIMIT_NPROC counts); None if unknown."""
    uid = str(os.getuid())
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
        if fields.get("Uid", "").split()[:1] == [uid]:
            threads = fields.get("Threads", "1").strip()
            total += int(threads) if threads.isdigit() else 1
    return total


def _reap(proc: subprocess.Popen) -> int:
    """Reap the (killed or exited) leader; SIGKILL it directly if the group kill missed it.

    Raises ``subprocess.TimeoutExpired`` (reported as a sandbox failure) rather than hanging.
    """
    try:
        return proc.wait(timeout=_JOIN_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=_JOIN_SECONDS)


def _wait_exit(pid: int, deadline: float) -> bool:
    """Wait until ``pid`` exits or ``deadline`` (monotonic s); True if it exited.

    The child is left unreaped (a zombie), so its pid/process-group id cannot be reused
    before the group is killed.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            remaining = max(0.0, deadline - time.monotonic())
            return bool(poller.poll(math.ceil(remaining * 1000)))
        finally:
            os.close(pidfd)
    delay = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, 0.05)


def _kill_marked(marker: bytes) -> int:
    """SIGKILL every process whose initial environment contains ``marker``, until none is left.

    Returns how many were signalled. Silently does nothing without ``/proc``.
    """
    killed = 0
    me = os.getpid()
    for _ in range(_SWEEP_ROUNDS):
        found = []
        try:
            names = os.listdir("/proc")
        except OSError:
            return killed
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read():
                        found.append(int(name))
            except OSError:
                continue
        if not found:
            return killed
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.002)
    logger.warning("sandbox: processes with marker still alive after %d sweeps", _SWEEP_ROUNDS)
    return killed
