"""One sandboxed process: spawn it, feed and drain it, wait, kill what it left, clean up."""

from __future__ import annotations

import logging
import math
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from flowgrpo.operators.sandbox import _limits, _policy, _result
from flowgrpo.operators.sandbox._result import ExecResult

logger = logging.getLogger("flowgrpo.operators.sandbox")

#: Environment variable every sandboxed process carries (value: a per-run id).
SANDBOX_MARKER_VAR = "FLOWGRPO_SANDBOX_ID"
CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")

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
        self.policy = _policy.Policy(None, None, 0)

    def execute(self) -> ExecResult:
        self.policy = _policy.current()  # raises on a bad configuration: reported as a failure
        _policy.log_once(self.policy)
        root = tempfile.mkdtemp(prefix="flowgrpo-sandbox-")
        proc = None
        try:
            work = os.path.join(root, "work")
            os.mkdir(work)
            code_path = os.path.join(root, "main.py")
            with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(self.code)
            _policy.prepare_dirs(root, work, code_path, self.policy)
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
            _remove_tree(root)

    def _spawn(self, code_path: str, work: str) -> subprocess.Popen:
        env = {**_BASE_ENV, "HOME": work, "TMPDIR": work, **self.extra_env}
        env[SANDBOX_MARKER_VAR] = self.marker
        policy = self.policy
        uid = policy.uid if policy.uid is not None else os.getuid()
        limits = _limits.limits(self.timeout_s, self.memory_mb, uid)
        argv = [sys.executable, "-s", "-B", CHILD_SCRIPT, code_path, work]
        exits = (_result.SYNTAX_EXIT, _result.MEMORY_EXIT, _result.SETUP_EXIT)
        ids = (-1, -1) if policy.uid is None else (policy.uid, policy.gid)
        argv += [str(v) for v in (*exits, *ids, policy.landlock_abi)]

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
        every process carrying this run's marker; then the SysV objects the sandbox user left
        where the run had no IPC namespace of its own."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        killed = _kill_marked(f"{SANDBOX_MARKER_VAR}={self.marker}".encode())
        if killed:
            logger.info("sandbox: sent SIGKILL %d time(s) to processes left by the run", killed)
        if self.policy.uid is not None:
            _remove_ipc(self.policy.uid)

    def _result(self, returncode, timed_out, readers, seconds) -> ExecResult:
        out, err = readers
        stdout, stderr = out.text(), err.text()
        truncated = out.total > self.max_output or err.total > self.max_output
        if returncode == -signal.SIGXCPU:
            timed_out = True
        why = _result.reason(
            returncode,
            timed_out,
            stderr,
            truncated,
            self.timeout_s,
            self.memory_mb,
            self.max_output,
        )
        return ExecResult(
            ok=why == "",
            stdout=stdout,
            stderr=stderr,
            returncode=returncode,
            timed_out=timed_out,
            reason=why,
            seconds=seconds,
        )


def _remove_tree(root: str) -> None:
    """Remove the run's directory whatever the program left in it; never raises (the run's
    answer is kept when cleanup fails, with a warning). Runs after every process of the run is
    dead, so the tree no longer changes."""
    try:
        stuck = _remove_tree_fd(root)
    except (OSError, RecursionError) as exc:  # the top folder itself: nothing else to try
        logger.warning("sandbox: could not remove %s: %s", root, exc)
        return
    if stuck or os.path.lexists(root):
        logger.warning("sandbox: could not remove %s entirely (%d entries left)", root, stuck)


def _remove_tree_fd(root: str) -> int:
    """Delete ``root`` bottom-up without recursion and through one directory descriptor at a
    time (a tree 100,000 folders deep or with paths past PATH_MAX is no harder than a flat
    one; links are removed, never followed). Returns the number of entries it had to leave."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd, names, stuck = os.open(root, flags), [], set()
    try:
        while True:
            child = _clear_files(fd, names, stuck)
            if child is not None:  # descend into the first folder left
                _make_traversable(child, fd)
                try:
                    new = os.open(child, flags, dir_fd=fd)
                except OSError:
                    stuck.add((*names, child))
                    continue
                os.close(fd)
                fd = new
                names.append(child)
                continue
            if not names:
                break
            parent = os.open("..", flags, dir_fd=fd)  # the tree is static: '..' is the parent
            os.close(fd)
            fd, name = parent, names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((*names, name))
    finally:
        os.close(fd)
    if not stuck:
        os.rmdir(root)
    return len(stuck)


def _clear_files(fd: int, names: list, stuck: set) -> str | None:
    """Unlink every non-folder entry of the directory ``fd``; the first folder still in it."""
    folder = None
    with os.scandir(fd) as entries:
        for entry in entries:
            if (*names, entry.name) in stuck:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    folder = folder or entry.name
                else:
                    os.unlink(entry.name, dir_fd=fd)
            except OSError:
                stuck.add((*names, entry.name))
    return folder


def _make_traversable(name: str, dir_fd: int) -> None:
    """Give a folder the program locked (mode 000) back to its owner: only a non-root parent
    needs it. ``name`` is a folder, not a link (checked by the caller's scan)."""
    try:
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
    except OSError:
        pass


#: SysV object kinds: (file under /proc/sysvipc, libc function, its IPC_RMID call arguments).
_SYSV = (("shm", "shmctl", (0, None)), ("msg", "msgctl", (0, None)), ("sem", "semctl", (0, 0)))


def _remove_ipc(uid: int) -> int:
    """Remove every SysV shared-memory segment, message queue and semaphore set of ``uid`` (the
    sandbox user, never the trainer's) visible here; returns how many. A run in its own IPC
    namespace leaves none here; this is for kernels that refused one."""
    removed = 0
    for kind, call, tail in _SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        header = {"shm": 7, "msg": 7, "sem": 4}[kind]  # the uid column of each file
        ids = [int(r[1]) for r in rows if len(r) > header and r[header] == str(uid)]
        if ids:
            import ctypes  # heavy: libc, only when a run left SysV objects behind

            libc = ctypes.CDLL(None, use_errno=True)
            for ipc_id in ids:
                removed += getattr(libc, call)(ipc_id, *tail) == 0
    if removed:
        logger.info("sandbox: removed %d SysV IPC object(s) of uid %d", removed, uid)
    return removed


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
