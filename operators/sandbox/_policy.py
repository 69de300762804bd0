"""Which layers a run gets on this machine, and who the program runs as (parent side).

Configuration, read from the parent's environment at every run (so a test or a launcher can
change it without code):

* ``FLOWGRPO_SANDBOX_UID`` / ``FLOWGRPO_SANDBOX_GID``: user and group (name or number) the
  program runs as when the parent is root. Default ``nobody`` and ``nogroup`` (or group
  ``nobody``; 65534 when neither exists). 0 is refused: that would not drop anything.
* ``FLOWGRPO_SANDBOX_LANDLOCK``: ``0``/``off``/``false``/``no`` turns the Landlock layer off
  (for a kernel whose Landlock misbehaves); by default it is on whenever the kernel has it.
"""

from __future__ import annotations

import functools
import grp
import logging
import os
import pwd
import sys
from dataclasses import dataclass

logger = logging.getLogger("flowgrpo.operators.sandbox")

UID_VAR = "FLOWGRPO_SANDBOX_UID"
GID_VAR = "FLOWGRPO_SANDBOX_GID"
LANDLOCK_VAR = "FLOWGRPO_SANDBOX_LANDLOCK"
_OFF = frozenset({"0", "off", "false", "no"})
_NOBODY = 65534


@dataclass(frozen=True)
class Policy:
    """What one run enforces besides the audit hook and the resource limits.

    Attributes:
        uid / gid: who the program runs as; None: it keeps the parent's ids (parent not root).
        landlock_abi: the Landlock ABI the child confines itself with; 0: no Landlock layer.
    """

    uid: int | None
    gid: int | None
    landlock_abi: int


def running_as_root() -> bool:
    """Whether the parent has root's effective uid (then the child must drop privileges)."""
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def kernel_landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none); probed once per process."""
    # heavy: ctypes, only when a run needs Landlock
    from flowgrpo.operators.sandbox import _landlock

    return _landlock.abi_version()


def landlock_disabled() -> bool:
    return os.environ.get(LANDLOCK_VAR, "").strip().lower() in _OFF


@functools.lru_cache(maxsize=32)
def _lookup(value: str, kind: str) -> int:
    if value.isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value).pw_uid if kind == "user" else grp.getgrnam(value).gr_gid
    except KeyError:
        raise ValueError(f"sandbox: unknown {kind} {value!r} (set {UID_VAR}/{GID_VAR})") from None


def _default_gid() -> int:
    for name in ("nogroup", "nobody"):
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    return _NOBODY


def identity() -> tuple[int, int] | None:
    """(uid, gid) the program runs as when the parent is root; None when it is not.

    Raises:
        ValueError: the configured user or group is unknown, or is root (uid/gid 0).
    """
    if not running_as_root():
        return None
    user = os.environ.get(UID_VAR, "").strip()
    group = os.environ.get(GID_VAR, "").strip()
    if user:
        uid = _lookup(user, "user")
    else:
        try:
            uid = pwd.getpwnam("nobody").pw_uid
        except KeyError:
            uid = _NOBODY
    gid = _lookup(group, "group") if group else _default_gid()
    if uid == 0 or gid == 0:
        raise ValueError(f"sandbox: {UID_VAR}/{GID_VAR} must not be root (got {uid}:{gid})")
    return uid, gid


def current() -> Policy:
    """The policy of a run started now (environment variables read afresh)."""
    ident = identity()
    abi = 0 if landlock_disabled() else kernel_landlock_abi()
    uid, gid = ident if ident is not None else (None, None)
    return Policy(uid=uid, gid=gid, landlock_abi=abi)


def sandbox_capabilities() -> dict:
    """Which protection layers a run started now gets on this machine.

    Keys: ``platform``, ``kernel`` (release), ``audit_hook`` and ``rlimits`` (always True),
    ``landlock`` (the Landlock layer is on), ``landlock_abi`` (the kernel's version, 0: none),
    ``landlock_disabled`` (turned off by ``FLOWGRPO_SANDBOX_LANDLOCK``), ``landlock_network``
    (TCP bind/connect refused by the kernel, ABI >= 4), ``landlock_scoping`` (signals and
    abstract UNIX sockets out of the sandbox refused, ABI >= 6), ``privilege_drop`` (the parent
    is root and the program runs as ``uid``/``gid``), ``uid``/``gid`` (the ids the program runs
    with). A run never proceeds with less than this: a layer that fails to apply fails the run.

    Raises:
        ValueError: the configured user or group is invalid (runs would fail the same way).
    """
    policy = current()
    abi = policy.landlock_abi
    return {
        "platform": sys.platform,
        "kernel": os.uname().release,
        "audit_hook": True,
        "rlimits": True,
        "landlock": abi > 0,
        "landlock_abi": kernel_landlock_abi(),
        "landlock_disabled": landlock_disabled(),
        "landlock_network": abi >= 4,
        "landlock_scoping": abi >= 6,
        "privilege_drop": policy.uid is not None,
        "uid": policy.uid if policy.uid is not None else os.geteuid(),
        "gid": policy.gid if policy.gid is not None else os.getegid(),
    }


_reported: set[Policy] = set()


def log_once(policy: Policy) -> None:
    """Log the layers of a policy the first time a run uses it (warn when Landlock is off)."""
    if policy in _reported:
        return
    _reported.add(policy)
    who = "parent's ids" if policy.uid is None else f"uid {policy.uid}, gid {policy.gid}"
    if policy.landlock_abi:
        logger.info(
            "sandbox layers: audit hook, rlimits, Landlock ABI %d, %s", policy.landlock_abi, who
        )
    else:
        logger.warning(
            "sandbox layers: audit hook, rlimits, %s; NO Landlock (%s): reads outside the "
            "allowlist are refused by the audit hook only, which ctypes bypasses",
            who,
            "disabled by " + LANDLOCK_VAR if landlock_disabled() else "kernel lacks it",
        )


def prepare_dirs(root: str, work: str, code_path: str, policy: Policy) -> None:
    """Let the unprivileged user use ``work`` and read the program, and nothing else of
    ``root`` (no-op when the program keeps the parent's ids).

    Raises:
        PermissionError: a directory above ``root`` does not let that user through (a private
            ``TMPDIR``); the run then fails instead of running with an unusable directory.
    """
    if policy.uid is None:
        return
    _check_reachable(os.path.dirname(root), policy.uid, policy.gid)
    os.chmod(root, 0o711)  # traverse only: the user reaches work/ and main.py by name
    os.chown(work, policy.uid, policy.gid)
    os.chmod(work, 0o700)
    os.chmod(code_path, 0o644)  # tracebacks re-read it for source lines


@functools.lru_cache(maxsize=8)
def _check_reachable(folder: str, uid: int, gid: int) -> None:
    """Raise unless ``uid``/``gid`` may search every directory from ``/`` down to ``folder``.

    Mode bits only: an ACL that would let the user through is not seen (the check then fails
    safe, with a message saying what to change).
    """
    path = "/"
    for part in [p for p in os.path.realpath(folder).split("/") if p] + [None]:
        st = os.stat(path)
        if st.st_uid == uid:
            allowed = st.st_mode & 0o100
        elif st.st_gid == gid:
            allowed = st.st_mode & 0o010
        else:
            allowed = st.st_mode & 0o001
        if not allowed:
            raise PermissionError(
                f"sandbox: uid {uid} cannot reach {folder} ({path} is mode "
                f"{st.st_mode & 0o777:o}); point TMPDIR at a directory every user can "
                "traverse, such as /tmp"
            )
        if part is not None:
            path = os.path.join(path, part)
