"""The Python-level layer of the sandbox: an audit hook the child installs before the program runs.

Loaded only in the sandboxed child (by ``_child.py``). :func:`install` adds a
``sys.addaudithook`` hook that raises ``PermissionError("sandbox: ...")`` on:

* opening a file or directory for reading whose real path (``os.path.realpath``: symlinks,
  ``..`` and ``/proc/self/fd/N`` links resolved) is outside the read allowlist; this covers
  ``open``, ``io.open``, ``io.FileIO``, ``os.open``, ``pathlib`` and ``mmap`` (which needs a
  descriptor from one of them). Re-opening the process's own pipes and sockets
  (``/dev/stdin``, ``/dev/stdout``, ``/proc/self/fd/0``) stays allowed, for reading and
  writing: it grants nothing the open descriptor does not already give;
* listing a directory (``os.listdir``, ``os.scandir``) outside the read allowlist and its
  list-only folders (those above a path cut out of it);
* opening for writing, creating, removing, renaming, linking, truncating or changing the
  mode/owner/times of a path outside the working directory (``/dev/null`` excepted);
* starting processes (``os.fork``/``exec*``/``spawn*``/``system``/``posix_spawn``,
  ``subprocess.Popen``; ``_posixsubprocess.fork_exec`` is replaced so ``multiprocessing``
  cannot start processes either);
* signalling another process or process group, ``socket`` connect/bind/sendto/sendmsg, and
  ``resource.setrlimit``/``prlimit``.

Paths passed with ``dir_fd`` are resolved against that descriptor's directory (read from
``/proc/self/fd``). The ``open`` audit event does not carry ``dir_fd``, so ``os.open`` is
wrapped to check the descriptor-relative path first; the event then still checks the same
path relative to the current directory, so a ``dir_fd`` open must pass both (with the working
directory as current directory, which it is unless the program changed it, a name inside the
working directory passes both).

This layer is a convenience and a first line, not a boundary: ``ctypes`` or any C extension
calls libc without raising audit events, a second thread can swap a symlink between the check
and the open, and the original functions stay reachable to determined code. The kernel layers
(Landlock, the unprivileged user) are what hold against that; see the package docstring.
"""

from __future__ import annotations

import os
import posixpath
import sys

_SPAWN = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.spawn",
        "os.posix_spawn",
        "os.system",
        "subprocess.Popen",
        "os.startfile",
    }
)
_NET = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})
_LIMITS = frozenset({"resource.setrlimit", "resource.prlimit"})
# event -> index of its dir_fd argument (None: the event has none), checked against the
# argument layout of CPython 3.10-3.13.
_ONE_PATH = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 2,
    "os.chmod": 2,
    "os.chown": 3,
    "os.utime": 3,
    "shutil.rmtree": 1,
    "os.truncate": None,
    "os.chflags": None,
    "os.lchflags": None,
    "os.setxattr": None,
    "os.removexattr": None,
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Policy:
    """Which real paths may be read and written; every check resolves the path first."""

    def __init__(
        self, work: str, readable: list[str], writable_files: list[str], listable=()
    ) -> None:
        self.work = work
        self.work_prefix = work.rstrip("/") + "/"
        self.write_exact = frozenset([work, *writable_files])
        roots = [work, *writable_files, *readable]
        self.read_exact = frozenset(roots)
        self.read_prefixes = tuple(r.rstrip("/") + "/" for r in roots)
        self.list_exact = frozenset(listable)

    def resolve(self, path, dir_fd=None) -> str:
        text = os.fsdecode(os.fspath(path))
        if isinstance(dir_fd, int) and dir_fd >= 0 and not text.startswith("/"):
            text = os.readlink(f"/proc/self/fd/{dir_fd}") + "/" + text
        return posixpath.realpath(text)

    def own_stream(self, real: str) -> bool:
        # /dev/stdin -> /proc/self/fd/0 -> "pipe:[123]": our own pipe or socket, not a file.
        own = f"/proc/{os.getpid()}/fd/"
        return real.startswith(own) and ":" in real[len(own) :]

    def readable(self, real: str) -> bool:
        return real in self.read_exact or real.startswith(self.read_prefixes)

    def listable(self, real: str) -> bool:
        """Readable, or a directory whose names (not its files) may be read."""
        return real in self.list_exact or self.readable(real)

    def writable(self, real: str) -> bool:
        return real in self.write_exact or real.startswith(self.work_prefix)


def install(work: str, readable: list[str], writable_files: list[str], listable=()) -> None:
    """Install the hook for this process; irreversible (audit hooks cannot be removed).

    Args:
        work: real path of the working directory (read and write).
        readable: real paths (directories or files) that may be read and listed.
        writable_files: real paths of single files that may also be written (``/dev/null``).
        listable: real paths of directories that may be listed (and opened as directories)
            although not all of what lies beneath them may be read.
    """
    policy = _Policy(work, readable, writable_files, listable)
    sys.addaudithook(_make_hook(policy))
    _wrap_os_open(policy)
    try:
        import _posixsubprocess  # optional: absent on some Python builds
    except ImportError:
        return

    def no_fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting processes is not allowed")

    _posixsubprocess.fork_exec = no_fork_exec


def _deny(event: str, what: str):
    raise PermissionError(f"sandbox: {event} is not allowed ({what})")


def _check_open(policy: _Policy, event: str, path, mode, flags, dir_fd=None) -> None:
    if path is None or isinstance(path, int):
        return  # an already-open descriptor: checked when it was opened
    try:
        real = policy.resolve(path, dir_fd)
    except (OSError, ValueError, TypeError):
        _deny(event, f"unresolvable path {path!r}")
    writing = isinstance(flags, int) and flags & _WRITE_FLAGS
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        writing = True
    if writing:
        if not (policy.writable(real) or policy.own_stream(real)):
            _deny(event, f"writing {path!r} outside the working directory")
    elif not (policy.listable(real) or policy.own_stream(real)):
        _deny(event, f"reading {path!r} outside the read allowlist")


def _check_listing(policy: _Policy, event: str, path) -> None:
    if isinstance(path, int):
        return
    try:
        real = policy.resolve(path)
    except (OSError, ValueError, TypeError):
        _deny(event, f"unresolvable path {path!r}")
    if not policy.listable(real):
        _deny(event, f"listing {path!r} outside the read allowlist")


def _inside(policy: _Policy, path, dir_fd=None) -> bool:
    if path is None or isinstance(path, int):
        return True
    try:
        return policy.writable(policy.resolve(path, dir_fd))
    except (OSError, ValueError, TypeError):
        return False


def _arg(args: tuple, index: int | None):
    return args[index] if index is not None and index < len(args) else None


def _make_hook(policy: _Policy):
    getpid, getpgrp = os.getpid, os.getpgrp

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            _check_open(policy, event, *args[:3])
        elif event in ("os.listdir", "os.scandir"):
            _check_listing(policy, event, "." if args[0] is None else args[0])
        elif event in _ONE_PATH:
            if not _inside(policy, args[0], _arg(args, _ONE_PATH[event])):
                _deny(event, f"{args[0]!r} is outside the working directory")
        elif event in ("os.rename", "os.link"):
            src_ok = _inside(policy, args[0], _arg(args, 2))
            if not (src_ok and _inside(policy, args[1], _arg(args, 3))):
                _deny(event, f"{args[0]!r} -> {args[1]!r} leaves the working directory")
        elif event == "os.symlink":
            if not _inside(policy, args[1], _arg(args, 2)):
                _deny(event, f"{args[1]!r} is outside the working directory")
        elif event in _SPAWN:
            _deny(event, "starting processes")
        elif event == "os.kill" and args[0] != getpid():
            _deny(event, f"signalling pid {args[0]}")
        elif event == "os.killpg" and args[0] != getpgrp():
            _deny(event, f"signalling process group {args[0]}")
        elif event in _NET:
            _deny(event, "network access")
        elif event in _LIMITS:
            _deny(event, "changing resource limits")

    return hook


def _wrap_os_open(policy: _Policy) -> None:
    """Make ``os.open(..., dir_fd=fd)`` check the path relative to ``fd``, not to the cwd."""
    real_open = os.open

    def open_checked(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None:
            _check_open(policy, "open", path, None, flags, dir_fd)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    open_checked.__doc__ = real_open.__doc__
    os.open = open_checked
    posix = sys.modules.get("posix")
    if posix is not None:
        posix.open = open_checked
