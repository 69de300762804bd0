"""The two programs of the code checker, each run in its own sandbox process.

* The **candidate program** runs the solution, then answers *requests*: call the solution's
  function ``name`` with these arguments. Arguments come in and results go out as plain data
  only (None, bool, int, float, complex, str, bytes, and lists, tuples, sets, frozensets and
  dicts of them, each checked by its exact type): an object whose ``__eq__`` is always True, or
  any other object of the solution's making, is not plain data and answers as an error. The
  candidate never sees a test or an expected value.
* The **test program** never runs a line of the solution. It runs the tests (and, for a problem
  whose question is code such as a HumanEval prompt, that code first: trusted helpers like
  ``poly``) with every name the tests use but do not define bound to a proxy; a proxy call
  looks its answer up in the table the parent collected from the candidate program. An answer
  not there yet returns a permissive placeholder and marks the test *incomplete*, so one round
  gathers every call whose arguments do not depend on an earlier answer.

The parent (:func:`..code.check_code`) alternates the two until no test is incomplete. A test
passes only in the test program, with real answers, so nothing the solution does (forged
output lines, ``sys.exit``, patching the harness or ``AssertionError``) can make it pass; the
nonce on each line only keeps a test's own prints apart.
"""

from __future__ import annotations

import ast

# The plain-data codec, in both programs. Every value is [tag, payload]; exact types only.
CODEC = r"""
import json as _fg_json, math as _fg_math

_FG_SCALARS = {type(None): "n", bool: "b", int: "i", float: "f", str: "s"}
_FG_SEQUENCES = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_FG_MAX_ITEMS = 200000


def _fg_enc(x, depth=0, count=None):
    count = [0] if count is None else count
    count[0] += 1
    if depth > 64 or count[0] > _FG_MAX_ITEMS:
        raise TypeError("too large or too deep to be plain data")
    t = type(x)
    if t in _FG_SCALARS:
        if t is float and not _fg_math.isfinite(x):
            return ["f", repr(x)]
        return [_FG_SCALARS[t], x]
    if t is complex:
        return ["c", [repr(x.real), repr(x.imag)]]
    if t is bytes:
        return ["y", x.hex()]
    if t in _FG_SEQUENCES:
        items = sorted(x, key=repr) if t in (set, frozenset) else x
        return [_FG_SEQUENCES[t], [_fg_enc(i, depth + 1, count) for i in items]]
    if t is dict:
        return ["d", [[_fg_enc(k, depth + 1, count), _fg_enc(v, depth + 1, count)]
                      for k, v in x.items()]]
    if depth == 0:  # any other result: only its type name and truth value cross
        return ["o", [t.__name__, bool(x)]]
    raise TypeError("a %s is not plain data" % t.__name__)


def _fg_dec(node):
    tag, value = node
    if tag == "n":
        return None
    if tag in ("b", "i", "s"):
        return {"b": bool, "i": int, "s": str}[tag](value)
    if tag == "f":
        return float(value)
    if tag == "c":
        return complex(float(value[0]), float(value[1]))
    if tag == "y":
        return bytes.fromhex(value)
    if tag == "d":
        return {_fg_dec(k): _fg_dec(v) for k, v in value}
    if tag == "o":
        return _FgOpaque(str(value[0]), value[1] is True)
    items = [_fg_dec(i) for i in value]
    return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)


class _FgOpaque:
    # A result that is not plain data (a re.Match, an object of the solution's class): it
    # equals nothing but itself and has the truth value the candidate gave it, no more than a
    # solution returning True or False could claim.

    __slots__ = ("kind", "truth")

    def __init__(self, kind, truth):
        self.kind, self.truth = kind, truth

    def __bool__(self):
        return self.truth

    def __repr__(self):
        return "<%s object>" % self.kind


def _fg_dumps(x):
    return _fg_json.dumps(_fg_enc(x), separators=(",", ":"))
"""

# What both programs run first, after the codec: their imports, the output channel (lines
# "<nonce> <json>"), and a call under the per-call time limit with its stdout discarded.
RUNTIME = (
    CODEC
    + r"""
import builtins as _fg_builtins, contextlib as _fg_ctx, io as _fg_io
import signal as _fg_signal, sys as _fg_sys

_FG_OUT = _fg_sys.stdout


class _FgTimeout(BaseException):
    pass


def _fg_alarm(signum, frame):
    raise _FgTimeout()


def _fg_emit(*parts):
    _FG_OUT.write(_FG_NONCE + " " + _fg_json.dumps(parts) + "\n")
    _FG_OUT.flush()


def _fg_limited(fn, *args, **kwargs):
    _fg_signal.setitimer(_fg_signal.ITIMER_REAL, _FG_LIMIT)
    try:
        with _fg_ctx.redirect_stdout(_fg_io.StringIO()):
            return fn(*args, **kwargs)
    finally:
        _fg_signal.setitimer(_fg_signal.ITIMER_REAL, 0)


def _fg_error(exc):
    if isinstance(exc, _FgTimeout):
        return "timeout after %g s" % _FG_LIMIT
    return ("%s: %s" % (type(exc).__name__, exc))[:300]


_fg_signal.signal(_fg_signal.SIGALRM, _fg_alarm)
"""
)

# The candidate program, after a header defining _FG_NONCE, _FG_LIMIT (seconds per call),
# _FG_SOLUTION, _FG_ENTRY and _FG_REQUESTS ([key, name, arguments] each).
CANDIDATE = (
    RUNTIME
    + r"""
_fg_ns = {"__name__": "solution", "__builtins__": _fg_builtins}
try:
    _fg_limited(exec, compile(_FG_SOLUTION, "<solution>", "exec"), _fg_ns)
    _fg_emit("solution", None)
except BaseException as _fg_exc:
    _fg_emit("solution", _fg_error(_fg_exc))
for _fg_key, _fg_name, _fg_payload in _FG_REQUESTS:
    _fg_fn = _fg_ns.get(_FG_ENTRY if _fg_name == "candidate" else _fg_name)
    if not callable(_fg_fn):
        _fg_emit("answer", _fg_key, "err", "the solution does not define %r" % _fg_name)
        continue
    try:
        _fg_args, _fg_kwargs = _fg_dec(_fg_json.loads(_fg_payload))
        _fg_value = _fg_limited(_fg_fn, *_fg_args, **_fg_kwargs)
        _fg_emit("answer", _fg_key, "ok", _fg_enc(_fg_value))
    except BaseException as _fg_exc:
        _fg_emit("answer", _fg_key, "err", _fg_error(_fg_exc))
"""
)

# The test program, after a header defining _FG_NONCE, _FG_LIMIT, _FG_SETUP, _FG_TESTS,
# _FG_NAMES (the names proxied), _FG_MODULES (standard modules the tests use unimported) and
# _FG_ANSWERS (key -> [status, value]).
TESTER = (
    RUNTIME
    + r'''
import random as _fg_random

_FG_STATE = {"pending": False}


class _FgPending:
    """What an unanswered call returns for now: anything done with it goes on quietly."""

    def __bool__(self):
        return True

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __float__(self):
        return 0.0

    def __int__(self):
        return 0

    def __index__(self):
        return 0

    def __hash__(self):
        return 0

    def __repr__(self):
        return "<pending answer>"

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


def _fg_same(self, *args):
    return self


for _fg_op in ("eq ne lt le gt ge add radd sub rsub mul rmul truediv rtruediv floordiv "
               "rfloordiv mod rmod pow rpow neg pos abs and rand or ror xor rxor getitem "
               "contains round invert lshift rshift matmul").split():
    setattr(_FgPending, "__%s__" % _fg_op, _fg_same)


class _FgCandidateError(Exception):
    pass


def _fg_failed(message=None):
    """A failed assert (the tests' asserts are rewritten to call this): an error, unless the
    test is waiting for an answer, when it goes on to gather the calls after it."""
    if not _FG_STATE["pending"]:
        raise AssertionError(message) if message is not None else AssertionError()


class _FgProxy:
    """The solution's function ``name``, answered from the table; never the solution itself."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        try:
            payload = _fg_dumps([list(args), kwargs])
        except TypeError as exc:
            raise TypeError("%s: an argument is not plain data (%s)" % (self.name, exc))
        key = self.name + " " + payload
        if key not in _FG_ANSWERS:
            _fg_emit("request", key, self.name, payload)
            _FG_STATE["pending"] = True
            return _FgPending()
        status, value = _FG_ANSWERS[key]
        if status == "ok":
            return _fg_dec(value)
        raise _FgCandidateError(value)


def _fg_run(source, name, namespace):
    try:
        _fg_limited(exec, compile(source, name, "exec"), namespace)
    except BaseException as exc:
        return _fg_error(exc)
    return None


_fg_random.seed(0)  # tests that draw random inputs draw the same ones in every round
_fg_ns = {"__name__": "tests", "__builtins__": _fg_builtins, "_fg_failed": _fg_failed}
if _FG_SETUP:
    _fg_run(_FG_SETUP, "<question>", _fg_ns)
for _fg_name in _FG_MODULES:
    try:
        _fg_ns[_fg_name] = __import__(_fg_name)
    except ImportError:
        pass
for _fg_name in _FG_NAMES:
    _fg_ns[_fg_name] = _FgProxy(_fg_name)
for _fg_i, _fg_test in enumerate(_FG_TESTS):
    _FG_STATE["pending"] = False
    _fg_failure = _fg_run(_fg_test, "<test %d>" % _fg_i, _fg_ns)
    _fg_emit("test", _fg_i, "incomplete" if _FG_STATE["pending"] else "done", _fg_failure)
_fg_emit("end")
'''
)


def program(body: str, **constants) -> str:
    """``body`` after a header assigning each constant (``nonce`` -> ``_FG_NONCE = '...'``)."""
    header = "".join(f"_FG_{name.upper()} = {value!r}\n" for name, value in constants.items())
    return header + body


class _AssertsGoOn(ast.NodeTransformer):
    """``assert X, m`` -> ``if not X: _fg_failed(m)``: a failure while answers are pending
    does not end the test, so one round gathers the calls after it too."""

    def visit_Assert(self, node: ast.Assert):
        call = ast.Call(ast.Name("_fg_failed", ast.Load()), [node.msg] if node.msg else [], [])
        check = ast.If(ast.UnaryOp(ast.Not(), node.test), [ast.Expr(call)], [])
        return ast.copy_location(check, node)


def rewrite_asserts(test: str) -> str:
    """``test`` with its asserts rewritten (:class:`_AssertsGoOn`); as it is when it does not
    parse (the test program then reports its SyntaxError)."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError):
        return test
    return ast.unparse(ast.fix_missing_locations(_AssertsGoOn().visit(tree)))
