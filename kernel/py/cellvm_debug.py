"""cellvm_debug - the Jupyter debugger: debug_request/debug_reply on control, debug_event on
iopub, through debugpy's pydevd, as ipykernel's debugger.py does it (docs/kernel.md
"Debugger").

C calls handle() on the kernel's debug thread (kn_jobq: one request at a time, never the
reader), even while a cell runs or sits at a breakpoint. pydevd runs in this process and
speaks DAP itself (debugpy.listen with in_process_debug_adapter: no adapter process); this
module talks to it over a loopback TCP socket. Replies come back to the waiting handle() by request seq; events go out on iopub from
this module's own socket thread, parented to the last debug_request.

Cells are compiled under the file name ipykernel gives them (murmur2 of the cell's text under
tmpFilePrefix) once the debugger has been started in this kernel, so breakpoints set in a
dumped cell hit in the code the cell defines.
"""
import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading

import _cellvm

HASH_SEED = 0xC70F6907
REPLY_TIMEOUT_S = 30.0     # for each of pydevd's replies

_SHELL = None           # IPython's InteractiveShell; None: no debugger
_DEBUGGER = None


def _log(level, text):
    try:
        _cellvm.log(level, "debug", text.replace("\n", " ")[:500])
    except Exception:
        pass


# ----------------------------------------------------------------------------
#  Cell file names, as ipykernel.compiler names them.

def murmur2_x86(data, seed):
    """ipykernel.compiler.murmur2_x86, word by word with struct (same results)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    b = data.encode("utf8")
    length = len(b)
    h = (seed ^ length) & mask
    rounded = length & 0xFFFFFFFC
    for (k,) in struct.iter_unpack("<I", b[:rounded]):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = b[rounded:]
    if tail:
        k = 0
        for i, c in enumerate(tail):
            k |= c << (8 * i)
        h ^= k
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def tmp_directory():
    return tempfile.gettempdir() + os.sep + "ipykernel_" + str(os.getpid())


def get_file_name(code):
    name = os.environ.get("IPYKERNEL_CELL_NAME")
    if name is None:
        name = tmp_directory() + os.sep + str(murmur2_x86(code, HASH_SEED)) + ".py"
    return name


# ----------------------------------------------------------------------------
#  Set-up, from cellvm_shell

def _have_debugpy():
    import importlib.util
    try:
        return all(importlib.util.find_spec(n) is not None
                   for n in ("debugpy", "_pydevd_bundle", "pydevd"))
    except (ImportError, ValueError):
        return False


def install(shell):
    """The IPython shell (None without IPython: no debugger)."""
    global _SHELL, _AVAILABLE
    _SHELL = shell
    _AVAILABLE = shell is not None and _have_debugpy()


_AVAILABLE = False


def available():
    """For kernel_info_reply's debugger and supported_features."""
    return _AVAILABLE


def _import_debugpy():
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")    # no frozen-modules note
    # ipykernel: "This import is required to have the next ones working..."
    from debugpy.server import api  # noqa: F401
    import debugpy
    return debugpy


# ----------------------------------------------------------------------------
#  The variables of the user's namespace when no thread is stopped (ipykernel's
#  VariableExplorer, on pydevd's own frame tracker).

class _FakeCode:
    def __init__(self, co_filename, co_name):
        self.co_filename = co_filename
        self.co_name = co_name


class _FakeFrame:
    def __init__(self, f_code, f_globals, f_locals):
        self.f_code = f_code
        self.f_globals = f_globals
        self.f_locals = f_locals
        self.f_back = None


class _VariableExplorer:
    def __init__(self):
        _import_debugpy()
        from _pydevd_bundle.pydevd_suspended_frames import SuspendedFramesManager, _FramesTracker
        from _pydevd_bundle.pydevd_api import PyDevdAPI

        class _DummyPyDB:
            variable_presentation = PyDevdAPI.VariablePresentation()
        self.manager = SuspendedFramesManager()
        self.tracker = _FramesTracker(self.manager, _DummyPyDB())
        self.frame = None

    def track(self):
        from _pydevd_bundle import pydevd_frame_utils
        ns = _SHELL.user_ns
        self.frame = _FakeFrame(_FakeCode("<module>", get_file_name("sys._getframe()")), ns, ns)
        self.tracker.track("thread1", pydevd_frame_utils.create_frames_list_from_frame(self.frame))

    def untrack_all(self):
        self.tracker.untrack_all()

    def children(self, ref=None):
        v = self.manager.get_variable(ref or id(self.frame))
        return [x.get_var_data() for x in v.get_children_variables()]


_FORBIDDEN = frozenset(("__name__", "__doc__", "__package__", "__loader__", "__spec__",
                        "__annotations__", "__builtins__", "__builtin__", "__display__",
                        "get_ipython", "debugpy", "exit", "quit", "In", "Out", "_oh", "_dh",
                        "_", "__", "___"))


def accept_variable(name):
    return (name not in _FORBIDDEN and not re.search(r"^_\d", name)
            and name[0:2] != "_i")


# ----------------------------------------------------------------------------
#  DAP over the socket to pydevd

class _Client:
    """One connection to pydevd: requests with our own seq, answered by request_seq."""

    def __init__(self, port, on_event):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.settimeout(None)
        self.on_event = on_event
        self.lock = threading.Lock()
        self.seq = 0
        self.waiting = {}           # our seq -> [threading.Event, response]
        self.closed = False
        t = threading.Thread(target=self._read, name="cellvm-debug-dap", daemon=True)
        t.pydev_do_not_trace = True         # pydevd never traces or suspends it
        t.is_pydev_daemon_thread = True
        t.start()

    def request(self, msg, timeout=REPLY_TIMEOUT_S):
        """Send msg (a DAP request) under a fresh seq; pydevd's response, or None."""
        slot = [threading.Event(), None]
        with self.lock:
            self.seq += 1
            seq = self.seq
            self.waiting[seq] = slot
        body = json.dumps(dict(msg, seq=seq), ensure_ascii=False).encode("utf-8")
        try:
            self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            slot[0].wait(timeout)
        except OSError as e:
            _log("warn", "send failed: %s" % e)
        with self.lock:
            self.waiting.pop(seq, None)
        return slot[1]

    def _read(self):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = self.sock.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                m = re.search(rb"Content-Length:\s*(\d+)", head, re.I)
                n = int(m.group(1)) if m else 0
                while len(buf) < n:
                    data = self.sock.recv(max(65536, n - len(buf)))
                    if not data:
                        return
                    buf += data
                self._dispatch(buf[:n])
                buf = buf[n:]
        except OSError:
            pass
        finally:
            self.closed = True
            with self.lock:
                for slot in self.waiting.values():
                    slot[0].set()

    def _dispatch(self, raw):
        try:
            msg = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            _log("warn", "pydevd sent a message that is not JSON")
            return
        if msg.get("type") == "response":
            with self.lock:
                slot = self.waiting.get(msg.get("request_seq"))
            if slot is not None:
                slot[1] = msg
                slot[0].set()
        elif msg.get("type") == "event" and isinstance(msg.get("event"), str):
            self.on_event(msg)      # the gateway wants both strings (gw_check.c)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _response(request, success=True, body=None, message=None):
    r = {"type": "response", "seq": 0, "request_seq": request.get("seq", 0),
         "success": success, "command": request.get("command", "")}
    if body is not None:
        r["body"] = body
    if message is not None:
        r["message"] = message
    return r


# ----------------------------------------------------------------------------
#  The debugger

class Debugger:
    # Answered even before initialize (ipykernel's static_debug_msg_types).
    STATIC = ("debugInfo", "inspectVariables", "richInspectVariables", "modules")

    def __init__(self):
        self.port = None            # pydevd's DAP port, once listening (for good)
        self.client = None
        self.started = False
        self.parent = "{}"          # the last debug_request's header, for events
        self.breakpoints = {}       # source path -> breakpoints, for debugInfo
        self.stopped_threads = set()
        self.removed_cleanup = {}
        self.explorer = None

    # --- start and stop

    def _listen(self):
        debugpy = _import_debugpy()
        import pydevd
        from debugpy.server import api
        tmp = tmp_directory()
        os.makedirs(tmp, exist_ok=True)
        api.listen(("127.0.0.1", 0), in_process_debug_adapter=True)
        db = pydevd.get_global_debugger()
        if not db._server_socket_ready_event.wait(10) or not db._server_socket_name:
            raise RuntimeError("pydevd did not start listening")
        self.port = db._server_socket_name[1]
        _SHELL.compile.get_code_name = lambda raw, code, number: get_file_name(raw)
        _SHELL.events.register("pre_execute", _trace_main_thread)
        _SHELL.events.register("post_execute", self.unstick)
        _log("info", "pydevd listening on 127.0.0.1:%d (debugpy %s)"
             % (self.port, debugpy.__version__))

    def start(self):
        if self.port is None:
            self._listen()
        self.client = _Client(self.port, self._on_event)
        # Leading empty lines stay, so that breakpoints land on the lines dumped.
        from IPython.core.inputtransformer2 import leading_empty_lines
        cleanup = _SHELL.input_transformer_manager.cleanup_transforms
        if leading_empty_lines in cleanup:
            i = cleanup.index(leading_empty_lines)
            self.removed_cleanup[i] = cleanup.pop(i)
        self.started = True

    def stop(self):
        if self.client is not None:
            self.client.close()
        self.client = None
        cleanup = _SHELL.input_transformer_manager.cleanup_transforms
        for i in sorted(self.removed_cleanup):
            cleanup.insert(i, self.removed_cleanup.pop(i))
        self.started = False
        self.breakpoints = {}
        self.stopped_threads = set()

    def unstick(self):
        """On the main thread, between cells (post_execute, pre_execute). An interrupt that
        ended a cell stopped at a breakpoint raised out of pydevd's wait, which still takes
        the thread for suspended: the next cell would wait at its first line, and the client
        would show a stop that is over. The thread runs; the client hears "continued"."""
        if not self.started:
            return
        try:
            from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
            from _pydevd_bundle.pydevd_constants import STATE_RUN, STATE_SUSPEND
            info = set_additional_thread_info(threading.current_thread())
            if info.pydev_state == STATE_SUSPEND:
                info.pydev_state = STATE_RUN
                info.pydev_step_cmd = -1
                info.pydev_step_stop = None
        except Exception as e:
            _log("warn", "unstick: %s: %s" % (type(e).__name__, e))
        for tid in sorted(self.stopped_threads):
            self._on_event({"type": "event", "seq": 0, "event": "continued",
                            "body": {"threadId": tid, "allThreadsContinued": True}})

    # --- events, on the socket thread

    def _on_event(self, msg):
        ev, body = msg.get("event"), msg.get("body") or {}
        if ev == "stopped" and "threadId" in body:
            self.stopped_threads.add(body["threadId"])
        elif ev == "continued":
            if body.get("allThreadsContinued", True):
                self.stopped_threads = set()
            else:
                self.stopped_threads.discard(body.get("threadId"))
        try:
            _cellvm.publish("debug_event", json.dumps(msg), None, self.parent)
        except Exception as e:
            _log("warn", "debug_event not sent: %s" % e)

    # --- requests

    def forward(self, msg):
        if self.client is None or self.client.closed:
            return _response(msg, False, message="the debugger's connection to pydevd is gone")
        r = self.client.request(msg)
        if r is None:
            return _response(msg, False, message="pydevd did not answer %s within %g s"
                             % (msg.get("command"), REPLY_TIMEOUT_S))
        r["request_seq"] = msg.get("seq", 0)
        return r

    def process(self, msg):
        cmd = msg["command"]
        if cmd == "initialize" and not self.started:
            try:
                self.start()
            except Exception as e:
                _log("error", "start failed: %s: %s" % (type(e).__name__, e))
                return _response(msg, False, message="the debugger cannot start: %s: %s"
                                 % (type(e).__name__, e))
        if cmd in self.STATIC:
            return getattr(self, "do_" + cmd)(msg)
        if not self.started:
            return _response(msg, False, message="the debugger is not started: send an "
                             "initialize request first")
        fn = getattr(self, "do_" + cmd, None)
        reply = fn(msg) if fn is not None else self.forward(msg)
        if cmd == "disconnect":
            self.stop()
        return reply

    def do_dumpCell(self, msg):
        code = msg.get("arguments", {}).get("code")
        if not isinstance(code, str):
            return _response(msg, False, message="dumpCell needs arguments.code, a string")
        name = get_file_name(code)
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "w", encoding="utf-8") as f:
            f.write(code)
        return _response(msg, body={"sourcePath": name})

    def do_setBreakpoints(self, msg):
        args = msg.get("arguments") or {}
        path = (args.get("source") or {}).get("path")
        if isinstance(path, str):
            self.breakpoints[path] = args.get("breakpoints", [])
        return self.forward(msg)

    def do_source(self, msg):
        path = ((msg.get("arguments") or {}).get("source") or {}).get("path")
        if isinstance(path, str) and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return _response(msg, body={"content": f.read()})
        return _response(msg, False, body={}, message="source unavailable")

    def do_attach(self, msg):
        """pydevd answers attach itself, after its initialized event; configurationDone,
        which the adapter would wait for, is ours to send (as ipykernel's client does)."""
        msg = dict(msg)
        msg["arguments"] = dict(msg.get("arguments") or {})
        msg["arguments"].setdefault("justMyCode", True)
        reply = self.forward(msg)
        if reply.get("success"):
            done = self.forward({"type": "request", "command": "configurationDone", "seq": 0})
            if not done.get("success"):
                _log("warn", "configurationDone failed: %s" % done.get("message"))
        return reply

    def do_configurationDone(self, msg):
        return _response(msg)

    def do_stackTrace(self, msg):
        """Only the cell's frames: drop those of the kernel below the cell's <module>."""
        reply = self.forward(msg)
        frames = (reply.get("body") or {}).get("stackFrames")
        if isinstance(frames, list):
            tmp = tmp_directory() + os.sep
            keep = [i for i, f in enumerate(frames)
                    if str((f.get("source") or {}).get("path", "")).startswith(tmp)]
            if keep:
                reply["body"]["stackFrames"] = frames[:keep[-1] + 1]
        return reply

    def do_variables(self, msg):
        if not self.stopped_threads:
            ref = (msg.get("arguments") or {}).get("variablesReference")
            if self.explorer is None:
                return _response(msg, body={"variables": []})
            return self._variables(msg, self.explorer.children(ref))
        reply = self.forward(msg)
        body = reply.get("body") or {}
        if isinstance(body.get("variables"), list):
            body["variables"] = [v for v in body["variables"]
                                 if accept_variable(str(v.get("name", "")))]
        return reply

    def _variables(self, msg, variables):
        return _response(msg, body={"variables": [v for v in variables
                                                  if accept_variable(v["name"])]})

    def do_debugInfo(self, msg):
        return _response(msg, body={
            "isStarted": self.started, "hashMethod": "Murmur2", "hashSeed": HASH_SEED,
            "tmpFilePrefix": tmp_directory() + os.sep, "tmpFileSuffix": ".py",
            "breakpoints": [{"source": k, "breakpoints": v}
                            for k, v in self.breakpoints.items()],
            "stoppedThreads": sorted(self.stopped_threads), "richRendering": True,
            "exceptionPaths": ["Python Exceptions"]})

    def do_inspectVariables(self, msg):
        if self.explorer is not None:
            self.explorer.untrack_all()
        self.explorer = _VariableExplorer()
        self.explorer.track()
        return self._variables(msg, self.explorer.children())

    def do_richInspectVariables(self, msg):
        args = msg.get("arguments") or {}
        name = args.get("variableName")
        if not isinstance(name, str) or not name.isidentifier():
            ok = name in ("special variables", "function variables")
            return _response(msg, ok, body={"data": {}, "metadata": {}},
                             message=None if ok else "variableName must be an identifier")
        data, meta = {}, {}
        if not self.stopped_threads:
            r = _SHELL.user_expressions({name: name})[name]
            if r.get("status", "error") == "ok":
                data, meta = r.get("data", {}), r.get("metadata", {})
        else:
            code = "get_ipython().display_formatter.format(%s)" % name
            r = self.forward({"type": "request", "command": "evaluate", "seq": msg.get("seq", 0),
                              "arguments": {"expression": code, "frameId": args.get("frameId"),
                                            "context": "clipboard"}})
            if r.get("success"):
                import ast
                data, meta = ast.literal_eval(r["body"]["result"])
        return _response(msg, body={"data": data,
                                    "metadata": {k: v for k, v in meta.items() if k in data}})

    def do_modules(self, msg):
        mods = []
        for i, m in enumerate(list(sys.modules.values())):
            origin = getattr(getattr(m, "__spec__", None), "origin", None)
            if origin and origin.endswith(".py"):
                mods.append({"id": i, "name": m.__name__, "path": origin})
        return _response(msg, body={"modules": mods, "totalModules": len(sys.modules)})


def _trace_main_thread():
    """pre_execute, on the main thread: pydevd traces the thread that runs the cell (it
    started listening on a thread of the kernel's, where it cannot set the main thread's
    trace). After a disconnect the trace goes, and with it pydevd's cost per call."""
    try:
        if _DEBUGGER is not None and _DEBUGGER.started:
            import pydevd
            _DEBUGGER.unstick()
            pydevd.settrace(suspend=False, trace_only_current_thread=True,
                            patch_multiprocessing=False)
        elif _DEBUGGER is not None and sys.gettrace() is not None:
            import pydevd_tracing
            pydevd_tracing.SetTrace(None)   # sys.settrace, which pydevd patched, would warn
            threading.settrace(None)
    except Exception as e:      # never the user's cell's problem
        _log("warn", "main thread trace: %s: %s" % (type(e).__name__, e))


def _check(msg):
    if not isinstance(msg, dict):
        return "a debug_request's content must be a DAP request (an object)"
    if msg.get("type") != "request" or not isinstance(msg.get("command"), str):
        return "a debug_request's content needs type \"request\" and a command (a string)"
    if not isinstance(msg.get("seq", 0), int):
        return "a debug_request's seq must be an integer"
    return None


def handle(header_json, content_json):
    """A debug_request (its header and content as JSON text): the debug_reply content as
    JSON text. Runs on the reader thread; never raises."""
    global _DEBUGGER
    me = threading.current_thread()     # the kernel's debug thread: pydevd leaves it alone
    me.pydev_do_not_trace = me.is_pydev_daemon_thread = True
    try:
        msg = json.loads(content_json)
    except ValueError:
        msg = None
    req = msg if isinstance(msg, dict) else {}
    try:
        why = _check(msg)
        if why is None and not _AVAILABLE:
            why = ("no debugger in this kernel: debugpy is not importable" if _SHELL is not None
                   else "no debugger in this kernel: it needs IPython")
        if why is not None:
            return json.dumps(_response(req, False, message=why))
        if _DEBUGGER is None:
            _DEBUGGER = Debugger()
        _DEBUGGER.parent = header_json
        return json.dumps(_DEBUGGER.process(msg), default=repr)
    except Exception as e:
        _log("error", "%s failed: %s: %s" % (req.get("command"), type(e).__name__, e))
        return json.dumps(_response(req, False, message="%s: %s" % (type(e).__name__, e)))
