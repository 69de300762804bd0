"""Tests for operators.sandbox: each test runs a small program and checks one property.

Every test also checks that the test process itself is still alive and well afterwards.
Runtime: about 5 s on 2 cores (two 1 s timeouts; the rest are ~50 ms runs).
"""

from __future__ import annotations

import ast
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from flowgrpo.operators import sandbox
from flowgrpo.operators.sandbox import ExecResult, run_python, run_python_batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

TAG_VAR = "FLOWGRPO_TEST_TAG"


def _assert_alive() -> None:
    me = psutil.Process(os.getpid())
    assert me.is_running()
    assert me.status() != psutil.STATUS_ZOMBIE


def _tagged_pids(tag: str) -> list[int]:
    """Pids of live (non-zombie) processes whose initial environment holds TAG_VAR=tag."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def _run_tagged(code: str, **kwargs) -> tuple[ExecResult, str]:
    tag = uuid.uuid4().hex
    return run_python(code, env={TAG_VAR: tag}, **kwargs), tag


def _cleanup(tag: str) -> None:
    for pid in _tagged_pids(tag):  # only reached when the sandbox failed to clean up
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def test_normal_program_reads_stdin_and_prints():
    code = "a, b = map(int, input().split())\nprint(a + b)\nprint('done')\n"
    r = run_python(code, stdin="2 3\n", timeout_s=5)
    assert r == ExecResult(True, "5\ndone\n", "", 0, False, "", r.seconds)
    assert 0 < r.seconds < 5
    _assert_alive()


def test_infinite_loop_times_out_within_bound():
    start = time.monotonic()
    r = run_python("while True:\n    pass\n", timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert r.timed_out and not r.ok
    assert r.reason == "timeout after 1.0 s"
    assert r.returncode is not None and r.returncode < 0
    assert 1.0 <= elapsed < 3.0
    _assert_alive()


@pytest.mark.parametrize(
    "code",
    [
        "import os\nwhile True:\n    os.fork()\n",
        "import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-V'])\n",
        "import os\nwhile True:\n    os.system('true')\n",
        "import multiprocessing as mp\nmp.set_start_method('spawn')\n"
        "while True:\n    mp.Process(target=print).start()\n",
    ],
    ids=["os.fork", "subprocess", "os.system", "multiprocessing-spawn"],
)
def test_fork_bomb_is_contained(code):
    start = time.monotonic()
    r, tag = _run_tagged(code, timeout_s=1.0)
    try:
        assert not r.ok and r.returncode == 1 and r.reason == "exit code 1"
        assert "PermissionError: sandbox:" in r.stderr
        assert time.monotonic() - start < 3.0
        assert _tagged_pids(tag) == []
    finally:
        _cleanup(tag)
    _assert_alive()


def test_children_started_past_the_guard_are_killed():
    # ctypes bypasses the audit hook: one child stays in the group, one leaves it with setsid.
    code = (
        "import ctypes, time\n"
        "libc = ctypes.CDLL(None)\n"
        "for new_session in (False, True):\n"
        "    if libc.fork() == 0:\n"
        "        if new_session:\n"
        "            libc.setsid()\n"
        "        while True:\n"
        "            time.sleep(1)\n"
        "print('forked', flush=True)\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    r, tag = _run_tagged(code, timeout_s=1.0)
    try:
        assert r.timed_out and not r.ok
        assert r.stdout == "forked\n"
        assert _tagged_pids(tag) == []
    finally:
        _cleanup(tag)
    _assert_alive()


@pytest.mark.parametrize(
    "code",
    ["x = bytearray(4 * 1024**3)\n", "x = []\nwhile True:\n    x.append(bytearray(2**25))\n"],
    ids=["4GB-at-once", "growing"],
)
def test_memory_bomb_hits_memory_limit(code):
    r = run_python(code, timeout_s=5.0, memory_mb=256)
    assert not r.ok and not r.timed_out
    assert r.reason.startswith("memory limit")
    assert "MemoryError" in r.stderr
    _assert_alive()


def test_huge_output_is_truncated_with_bounded_parent_memory():
    code = "import sys\nchunk = 'x' * 10**6\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
    me = psutil.Process(os.getpid())
    rss_before = me.memory_info().rss
    peak = [rss_before]
    done = threading.Event()

    def sample() -> None:  # the peak matters: a buffer freed after the run would not show
        while not done.wait(0.002):
            peak.append(me.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        r = run_python(code, timeout_s=10.0, max_output_bytes=1000)
    finally:
        done.set()
        sampler.join()
    assert r.returncode == 0 and not r.ok
    assert r.reason.startswith("output limit")
    assert r.stdout.startswith("x" * 1000) and r.stdout[1000] != "x"
    assert "truncated: 100000000 bytes written" in r.stdout
    assert len(r.stdout) <= 1000 + 100
    assert max(peak) - rss_before < 50 * 1024 * 1024
    _assert_alive()


@pytest.mark.parametrize(
    "action",
    [
        "open({p!r}, 'w').write('x')",
        "import os\nos.close(os.open({p!r}, os.O_WRONLY | os.O_CREAT))",
        "import pathlib\npathlib.Path({p!r}).write_text('x')",
        "import os\nos.mkdir({p!r})",
        "import os\nos.symlink('/etc/hostname', {p!r})",
        "import os\nopen('inside', 'w').close()\nos.rename('inside', {p!r})",
        "import os\nos.chdir('/')\nopen({rel!r}, 'w')",
    ],
    ids=["open", "os.open", "pathlib", "mkdir", "symlink", "rename", "relative-after-chdir"],
)
def test_writing_outside_its_directory_is_refused(tmp_path, action):
    target = tmp_path / "escaped"
    code = action.format(p=str(target), rel=str(target).lstrip("/"))
    r = run_python(code, timeout_s=5.0)
    assert not r.ok and r.reason == "exit code 1"
    assert "PermissionError: sandbox:" in r.stderr
    assert not os.path.lexists(target)
    _assert_alive()


@pytest.mark.parametrize(
    "action",
    ["import os\nos.remove({p!r})", "import shutil\nshutil.rmtree({d!r})"],
    ids=["os.remove", "shutil.rmtree"],
)
def test_deleting_outside_its_directory_is_refused(tmp_path, action):
    victim = tmp_path / "keep" / "file.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    r = run_python(action.format(p=str(victim), d=str(victim.parent)), timeout_s=5.0)
    assert not r.ok and "PermissionError: sandbox:" in r.stderr
    assert victim.read_text() == "precious"
    _assert_alive()


def test_writing_inside_its_directory_works():
    code = (
        "import os, tempfile\n"
        "os.makedirs('a/b')\n"
        "with open('a/b/f.txt', 'w') as f:\n    f.write('hi')\n"
        "os.rename('a/b/f.txt', 'g.txt')\n"
        "with tempfile.NamedTemporaryFile('w') as t:\n    t.write('ok')\n"
        "print(open('g.txt').read())\n"
    )
    r = run_python(code, timeout_s=5.0)
    assert r.ok and r.stdout == "hi\n", r.stderr
    _assert_alive()


def test_environment_secret_is_not_inherited(monkeypatch):
    monkeypatch.setenv("FLOWGRPO_TEST_SECRET", "hunter2")
    code = "import os\nprint(os.environ.get('FLOWGRPO_TEST_SECRET'))\nprint(sorted(os.environ))\n"
    r = run_python(code, timeout_s=5.0)
    assert r.ok
    assert r.stdout.splitlines()[0] == "None"
    assert "hunter2" not in r.stdout + r.stderr
    names = set(ast.literal_eval(r.stdout.splitlines()[1]))
    assert names <= set(sandbox._BASE_ENV) | {"HOME", "TMPDIR", sandbox.SANDBOX_MARKER_VAR}
    _assert_alive()


def test_parent_environment_cannot_be_read_through_proc():
    code = "import os\nprint(open(f'/proc/{os.getppid()}/environ', 'rb').read())\n"
    r = run_python(code, timeout_s=5.0)
    assert not r.ok and r.stdout == ""
    assert "PermissionError: sandbox:" in r.stderr
    _assert_alive()


@pytest.mark.parametrize(
    "code",
    [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)\n",
    ],
    ids=["kill", "killpg"],
)
def test_killing_its_parent_is_refused(code):
    r = run_python(code, timeout_s=5.0)
    assert not r.ok and r.returncode == 1 and r.reason == "exit code 1"
    assert "PermissionError: sandbox:" in r.stderr
    _assert_alive()


def test_sys_exit_code_is_reported():
    r = run_python("import sys\nprint('before')\nsys.exit(3)\n", timeout_s=5.0)
    assert not r.ok and r.returncode == 3 and not r.timed_out
    assert r.reason == "exit code 3"
    assert r.stdout == "before\n"
    _assert_alive()


def test_syntax_error_is_reported():
    r = run_python("def f(:\n    return 1\n", timeout_s=5.0)
    assert not r.ok and not r.timed_out and r.returncode != 0
    assert r.reason == "syntax error"
    assert "SyntaxError" in r.stderr
    _assert_alive()


def test_runtime_exception_gives_traceback_without_prelude_frames():
    r = run_python("def f():\n    return 1 / 0\nf()\n", timeout_s=5.0)
    assert not r.ok and r.reason == "exit code 1"
    assert r.stderr.startswith("Traceback") and "ZeroDivisionError" in r.stderr
    assert "<string>" not in r.stderr
    _assert_alive()


def test_temp_dir_is_removed_afterwards():
    code = (
        "import os\nos.makedirs('deep/er')\nopen('deep/er/f', 'w').write('x')\n"
        "os.chmod('deep', 0)\nprint(os.getcwd())\n"
    )
    r = run_python(code, timeout_s=5.0)
    assert r.ok, r.stderr
    work = Path(r.stdout.strip())
    assert work.name == "work" and work.parent.name.startswith("flowgrpo-sandbox-")
    assert not work.parent.exists()
    _assert_alive()


def test_string_hashing_is_reproducible_between_runs():
    code = "print(hash('flowgrpo'), sorted({'a', 'b'}))\nprint(list({'x', 'y', 'z', 'w'}))\n"
    first, second = run_python(code, timeout_s=5.0), run_python(code, timeout_s=5.0)
    assert first.ok and first.stdout == second.stdout
    _assert_alive()


def test_batch_keeps_input_order():
    codes = [
        "import time\ntime.sleep(0.4)\nprint(0)\n",
        "print(input())\n",
        "import time\ntime.sleep(0.1)\nprint(2)\n",
        "import sys\nsys.exit(4)\n",
    ]
    results = run_python_batch(codes, stdins=[None, "one", None, None], timeout_s=5.0)
    assert [r.stdout for r in results] == ["0\n", "one\n", "2\n", ""]
    assert [r.ok for r in results] == [True, True, True, False]
    assert results[3].returncode == 4
    assert run_python_batch([]) == []
    _assert_alive()


def test_sandbox_failure_is_a_result_not_an_exception(monkeypatch):
    def boom(self, code_path, work):
        raise OSError("no processes left")

    monkeypatch.setattr(sandbox._Run, "_spawn", boom)
    r = run_python("print(1)")
    assert not r.ok and r.returncode is None
    assert r.reason == "sandbox failure: OSError: no processes left"
    _assert_alive()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"code": b"print(1)"}, TypeError),
        ({"code": "1", "timeout_s": 0}, ValueError),
        ({"code": "1", "memory_mb": 8}, ValueError),
        ({"code": "1", "max_output_bytes": -1}, ValueError),
        ({"code": "1", "env": {"A=B": "c"}}, ValueError),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error):
    with pytest.raises(error, match=r"must|may not"):
        run_python(**kwargs)
    with pytest.raises(TypeError, match="sequence"):
        run_python_batch("print(1)")
