"""Linux Landlock through ``ctypes``: the kernel-enforced file-system layer of the sandbox.

Used twice: the parent calls :func:`abi_version` to learn whether the kernel supports Landlock
(and which version), and the sandboxed child builds a :func:`ruleset` (:func:`add_rule` for each
granted path, while still privileged) and calls :func:`restrict_self` before the program runs.
Once that returns, the kernel refuses, for this process and everything it starts, whatever the
ruleset does not grant; no later call (``ctypes`` included) can undo it.

What one ruleset handles (the rights known to the kernel's ABI version, see ``landlock(7)``):

* file system (ABI >= 1): executing, reading, writing, listing, creating and removing files
  anywhere except beneath the granted directories; ``REFER`` (ABI 2: renames and links across
  directories), ``TRUNCATE`` (ABI 3) and ``IOCTL_DEV`` (ABI 5) when the kernel knows them;
* TCP ``bind``/``connect`` (ABI >= 4), with no port granted: every TCP bind/connect is refused
  (UDP and other protocols are not covered by Landlock);
* scoping (ABI >= 6): signals to processes outside the sandbox and connections to abstract
  UNIX sockets created outside it are refused.

Opening a path stays a matter of the real file: a rule is attached to the inode of the granted
directory, so symlinks, ``..`` and ``/proc/self/fd/N`` links are judged by where they lead.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import sys

# Syscall numbers from the unified table (the same on x86_64, aarch64, riscv64, ...);
# alpha is the one Linux port with its own numbers.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
_ABI1_FS = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
MAKE_CHAR, MAKE_BLOCK = 1 << 6, 1 << 11
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # valid on a non-directory
_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP | CONNECT_TCP, ABI 4
_SCOPE_ALL = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET | SIGNAL, ABI 6

#: Rights granted beneath a read-only directory and on a read-only file.
READ = READ_FILE | READ_DIR


def handled_fs(abi: int) -> int:
    """Every file-system right the kernel of ``abi`` knows (all of them are handled)."""
    rights = _ABI1_FS
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def read_write(abi: int) -> int:
    """Rights for the working directory: everything but executing and making device nodes."""
    return handled_fs(abi) & ~(EXECUTE | MAKE_CHAR | MAKE_BLOCK)


def _long(value: int) -> ctypes.c_long:
    # syscall(2) is variadic and reads every argument as a long: pass full-width values.
    return ctypes.c_long(value)


@functools.cache  # one handle per process: a cut allowlist adds hundreds of rules
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is unsupported or disabled.

    Never raises: a missing syscall (ENOSYS), Landlock built in but not enabled at boot
    (EOPNOTSUPP), a seccomp filter returning EPERM, or no ``ctypes`` all read as 0.
    """
    if not sys.platform.startswith("linux") or os.uname().machine.startswith("alpha"):
        return 0
    try:
        libc = _libc()
        flags = _long(_CREATE_RULESET_VERSION)
        version = libc.syscall(_long(_CREATE_RULESET), None, _long(0), flags)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def ruleset(abi: int) -> int:
    """A new ruleset handling every right the kernel of ``abi`` knows (file system, TCP from
    ABI 4, scoping from ABI 6); its descriptor is the caller's, for :func:`add_rule` and
    :func:`restrict_self`. Rules may be added while privileged and enforced after dropping
    privileges: a descriptor per granted path is then open only while its rule is added.

    Raises:
        OSError: the kernel refused.
    """
    fs = handled_fs(abi)
    fields = [fs]
    if abi >= 4:
        fields.append(_NET_TCP)
    if abi >= 6:
        fields.append(_SCOPE_ALL)
    attr = struct.pack(f"={len(fields)}Q", *fields)
    return _check(
        _libc().syscall(_long(_CREATE_RULESET), ctypes.c_char_p(attr), _long(len(attr)), _long(0)),
        "create_ruleset",
    )


def add_rule(ruleset_fd: int, abi: int, fd: int, rights: int, is_dir: bool) -> None:
    """Grant ``rights`` beneath the file or directory of the ``O_PATH`` descriptor ``fd`` (a
    file only takes file rights); the descriptor may be closed afterwards."""
    fs = handled_fs(abi)
    allowed = rights & fs if is_dir else rights & fs & _FILE_RIGHTS
    beneath = struct.pack("=Qi", allowed, fd)  # struct landlock_path_beneath_attr, packed
    result = _libc().syscall(
        _long(_ADD_RULE), _long(ruleset_fd), _long(_RULE_PATH_BENEATH), beneath, _long(0)
    )
    _check(result, f"add_rule (fd {fd})")


def restrict_self(ruleset_fd: int) -> None:
    """Confine the calling process (and its future children) to the ruleset; irreversible.

    Raises:
        OSError: the kernel refused a step; the process is then NOT confined.
    """
    libc = _libc()
    # Without CAP_SYS_ADMIN the kernel demands no_new_privs; it also keeps set-uid programs
    # from regaining privileges, which the sandbox wants anyway.
    args = [ctypes.c_ulong(v) for v in (1, 0, 0, 0)]
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, *args), "prctl(NO_NEW_PRIVS)")
    _check(libc.syscall(_long(_RESTRICT_SELF), _long(ruleset_fd), _long(0)), "restrict_self")
