"""cellvm_io - what every part of the kernel's Python half publishes with: strict JSON for
iopub, publish(), the output streams' set-up, and input() over the stdin channel. Loaded
before cellvm_plain and cellvm_shell, which import from it.
"""
import base64
import builtins
import json
import math
import os
import sys

import _cellvm


# ----------------------------------------------------------------------------
#  JSON helpers: iopub content must be strict JSON (no NaN, no bytes), and
#  JSON the gateway's parser takes: no NUL in strings, integers within 64
#  bits. What publish() makes goes into its message as it is (C never parses
#  it), so it is made so here.

_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1


def _clean(obj):
    if isinstance(obj, str):
        return obj.replace("\x00", "\ufffd") if "\x00" in obj else obj
    if isinstance(obj, dict):
        return {_clean(str(k)): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode("ascii")
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, int) and not isinstance(obj, bool) and not _INT_MIN <= obj <= _INT_MAX:
        return str(obj)
    if obj is None or isinstance(obj, (int, float, bool)):
        return obj
    return _clean(repr(obj))


def _dumps(obj):
    return json.dumps(_clean(obj), allow_nan=False, ensure_ascii=False)


def publish(msg_type, content):
    _cellvm.publish(msg_type, _dumps(content))


def _flush_std():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


# ----------------------------------------------------------------------------
#  Output: sys.stdout/sys.stderr are _cellvm.OutStream (C, kn_py): text is
#  queued in-process and sent within 50 ms, or at once on flush(). A child
#  process writes to fd 1/2 (pipes the C core reads). Once a child has been
#  reaped its output is all in those pipes: a fence makes the next print look
#  there first, so `os.system("echo b"); print("c")` gives b, then c.

def _install_output():
    import functools
    import io
    if isinstance(sys.stdout, _cellvm.OutStream):
        io.TextIOBase.register(_cellvm.OutStream)
        io.BufferedIOBase.register(_cellvm.OutBuffer)

    def fenced(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                _cellvm.fence()
        return call

    for name in ("system", "wait", "waitpid", "wait3", "wait4", "waitid"):
        fn = getattr(os, name, None)
        if fn is not None and not hasattr(fn, "__wrapped__"):
            setattr(os, name, fenced(fn))


_install_output()


# ----------------------------------------------------------------------------
#  stdin: input() and getpass() become input_request on the stdin channel.

class StdinNotImplementedError(RuntimeError):
    """input() was called but the client does not accept input requests."""


def _stdin_error_class():
    try:
        from IPython.core.error import StdinNotImplementedError as E
        return E
    except Exception:
        return StdinNotImplementedError


def _make_input(allow_stdin, password):
    def ask(prompt=""):
        if not allow_stdin:         # ipykernel's class and words: tools match on them
            raise _stdin_error_class()(
                "%s was called, but this frontend does not support input requests."
                % ("getpass" if password else "raw_input"))
        _flush_std()
        value = _cellvm.input(str(prompt), password)
        if value == "\x04":
            raise EOFError("EOF when reading a line")
        return value

    def getpass(prompt="Password: ", stream=None):
        return ask(prompt)

    return getpass if password else ask


class _StdinHooks:
    """Swap input()/getpass() for the duration of one execute request."""

    def __init__(self, allow_stdin):
        self.allow = allow_stdin

    def __enter__(self):
        import getpass as gp
        self.saved = (builtins.input, gp.getpass)
        builtins.input = _make_input(self.allow, False)
        gp.getpass = _make_input(self.allow, True)

    def __exit__(self, *exc):
        import getpass as gp
        builtins.input, gp.getpass = self.saved
