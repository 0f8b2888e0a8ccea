"""cellvm_shell - the Python half of cellvm-kernel.

C owns the protocol, threads, I/O capture, signals and output files; this
module owns Python semantics. The C side calls Kernel.handle(msg_type,
content_json) on the main thread and gets the reply content as JSON. Everything
published on iopub goes through _cellvm.publish(), which flushes captured
output first so streams always precede displays, errors and replies.

With IPython importable, an InteractiveShell gives displayhook formatting,
magics, completion, inspection, history and is_complete, as in ipykernel.
Without it (or with CELLVM_NO_IPYTHON=1) a plain fallback runs cells
(cellvm_plain); see docs/kernel.md for what it covers. What all of them
publish with is in cellvm_io.
"""
import base64
import json
import os
import sys
import time
import traceback

import _cellvm
import cellvm_comm
import cellvm_debug
import cellvm_fast
import cellvm_jedi
import cellvm_warm
from cellvm_io import _StdinHooks, _dumps, _flush_std, publish
from cellvm_plain import FallbackBackend

IMPLEMENTATION_VERSION = "0.1.0"


# ----------------------------------------------------------------------------
#  Time budgets: a completion or an inspection never holds the kernel (and the
#  user's next cell) for long. Seconds of work, from the request's start.

COMPLETE_BUDGET_S = 0.8     # a complete_request: IPython's own completer, then jedi
INSPECT_BUDGET_S = 1.0      # an inspect_request's full answer (object_inspect_mime)
BRIEF_BUDGET_S = 0.3        # then its signature-and-docstring answer
_TIMED_OUT = object()


class _Deadline(BaseException):
    """Raised into the main thread when a budget is spent. A BaseException, so that the
    `except Exception` of jedi and IPython does not swallow it."""


def _left(end):
    return None if end is None else max(end - time.monotonic(), 0.0)


def _reraise_deadline(hook):
    """IPython's completer hands a matcher's exception to sys.excepthook and goes on."""
    def excepthook(etype, value, tb):
        if isinstance(value, _Deadline):
            raise value
        return hook(etype, value, tb)
    return excepthook


_armed_until = None         # the end of the budget in force (monotonic), None outside one
_fired = None               # the end of the budget whose timer last fired


def _on_deadline(signum, frame):
    if _armed_until is not None and _fired == _armed_until:
        raise _Deadline()


def _deadline_signal():
    """The signal a budget's timer sends the main thread, with our handler (set again if
    something replaced it); None where Python cannot take signals (not the main thread)."""
    import signal
    sig = signal.SIGRTMAX - 1
    try:
        if signal.getsignal(sig) is not _on_deadline:
            signal.signal(sig, _on_deadline)
    except ValueError:
        return None
    return sig


def _bounded(fn, seconds):
    """fn(), or _TIMED_OUT once `seconds` have passed (None: no bound). A watchdog thread
    then signals the main thread, every 0.1 s until fn is gone (IPython's inspector
    swallows exceptions with bare excepts), and the handler raises _Deadline: Python code
    (jedi, parso, the inspector, a __repr__ or __dir__ in Python) stops at its next
    bytecode, a sleep or a read at once, a C call when it returns. The handler raises
    only while this budget is in force and its watchdog fired, so a late signal lands
    nowhere. (Not PyThreadState_SetAsyncExc: clearing one still pending leaves CPython
    3.11's eval breaker set for good, and a profiler or debugger started later hangs.)"""
    global _armed_until
    sig = None if seconds is None or _armed_until is not None else _deadline_signal()
    if sig is None:
        return fn()
    import signal
    import threading
    end, main, stop = time.monotonic() + seconds, threading.get_ident(), threading.Event()

    def watch():
        global _fired
        stop.wait(seconds)
        while _armed_until == end and not stop.is_set():
            _fired = end
            signal.pthread_kill(main, sig)
            stop.wait(0.1)
    hook, sys.excepthook = sys.excepthook, _reraise_deadline(sys.excepthook)
    _armed_until = end
    try:
        threading.Thread(target=watch, name="cellvm-budget", daemon=True).start()
        try:
            return fn()
        finally:
            _armed_until = None
    except _Deadline:
        return _TIMED_OUT
    finally:
        _armed_until = None
        stop.set()
        sys.excepthook = hook


def _or_logged(what, fn, failed=None):
    """fn(), or `failed` when it raises: a completion or an inspection answers `ok` whatever
    jedi or the inspector do (IPython's answer, or none), and the failure goes to the
    kernel's log, not to the client."""
    try:
        return fn()
    except Exception as e:
        text = ("%s: %s" % (type(e).__name__, e))[:300]
        try:
            _cellvm.log("warn", "kernel." + what, text.replace("\\", "\\\\").replace('"', '\\"')
                        .replace("\n", " "))
        except Exception:
            pass
        return failed


# ----------------------------------------------------------------------------
#  The IPython-backed shell.

def _make_ipython_shell():
    from traitlets import Type
    from traitlets.config import Config
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core import page, payloadpage

    class CellvmDisplayHook(DisplayHook):
        def start_displayhook(self):
            self.msg = {"execution_count": self.prompt_count, "data": {}, "metadata": {}}

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            self.msg["data"] = format_dict
            self.msg["metadata"] = md_dict or {}

        def finish_displayhook(self):
            _flush_std()
            if self.msg and self.msg["data"]:
                publish("execute_result", self.msg)
            self.msg = None

    class CellvmDisplayPublisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None,
                    update=False, **kwargs):
            _flush_std()
            content = {"data": data, "metadata": metadata or {}, "transient": transient or {}}
            publish("update_display_data" if update else "display_data", content)

        def clear_output(self, wait=False):
            _flush_std()
            publish("clear_output", {"wait": bool(wait)})

    class CellvmShell(InteractiveShell):
        displayhook_class = Type(CellvmDisplayHook)
        display_pub_class = Type(CellvmDisplayPublisher)
        last_error = None

        def init_io(self):
            pass

        def _showtraceback(self, etype, evalue, stb):
            _flush_std()
            name = getattr(etype, "__name__", str(etype))
            self.last_error = {"ename": name, "evalue": str(evalue), "traceback": list(stb)}
            publish("error", self.last_error)

        def ask_exit(self):
            self.exit_now = True
            self.payload_manager.write_payload({"source": "ask_exit", "keepkernel": False})

        def enable_gui(self, gui=None):
            pass

        @property
        def parent_header(self):
            """The running request as ipykernel's shell gives it: the whole message (header,
            msg_id, msg_type, parent_header, metadata, content), {} outside a request. Code
            sends with it (`session.send(..., parent=ip.parent_header)`)."""
            kernel = getattr(self, "kernel", None)
            return kernel.get_parent("shell") if kernel is not None else {}

        def get_parent(self):
            return self.parent_header

    cellvm_fast._plain_format_calls()
    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    cfg.InteractiveShell.colors = "Linux"
    cfg.InteractiveShell.xmode = "Context"
    shell = CellvmShell.instance(config=cfg)
    shell.set_hook("show_in_pager", page.as_hook(payloadpage.page), 99)
    cellvm_fast._plain_transforms(shell.input_transformer_manager)
    cellvm_fast.plain_should_run_async(shell)
    cellvm_fast.plain_format(shell.display_formatter)
    shell.events.register("post_execute", _inline_figures_first(shell))
    return shell


def _inline_figures_first(shell):
    """A post_execute callback registered before pyplot's: the inline backend sends its
    PNGs and closes the figures before pyplot's own callback draws every stale figure,
    once more and for nothing (print_figure draws anew; a draw costs ~0.5 s under TCG).
    The same figures and bytes as ipykernel's; its own flush_figures then finds none."""
    def flush_inline_figures():
        mod = sys.modules.get("matplotlib_inline.backend_inline")
        if mod is not None and mod.flush_figures in shell.events.callbacks["post_execute"]:
            mod.flush_figures()
    return flush_inline_figures


def _complete_reply(code, cursor_pos, comps):
    """complete_reply content from IPython Completions, shaped as ipykernel shapes it."""
    if not comps:
        return {"matches": [], "cursor_start": cursor_pos, "cursor_end": cursor_pos,
                "metadata": {}, "status": "ok"}
    start = min(c.start for c in comps)
    end = max(c.end for c in comps)
    matches, types = [], []
    for c in comps:
        text = code[start:c.start] + c.text + code[c.end:end]
        if text not in matches:
            matches.append(text)
            types.append({"start": start, "end": end, "text": text, "type": c.type,
                          "signature": c.signature})
    return {"matches": matches, "cursor_start": start, "cursor_end": end,
            "metadata": {"_jupyter_types_experimental": types}, "status": "ok"}


def _jedi_key(code, cursor_pos):
    """What a completion completes on: the expression before the last dot (`df[0]` in
    `x = df[0].st`), or "" for a plain name."""
    import re
    line = code[:cursor_pos].rsplit("\n", 1)[-1]
    m = re.search(r"([^\s=,;(]*)\.\w*$", line)
    return m.group(1) if m else ""


class IPythonBackend:
    """Semantics from IPython's InteractiveShell, as ipykernel does it."""

    name = "ipython"

    def __init__(self):
        self.shell = _make_ipython_shell()
        self.shell.register_magic_function(_pip_magic, "line", "pip")
        cellvm_jedi.install()           # IPython's completer imported jedi, and parso
        self.jedi_too_slow = set()      # _jedi_key()s whose jedi completion overran
        import IPython
        self.banner = "Python %s\nIPython %s (cellvm-kernel)" % (
            sys.version.split("\n")[0], IPython.__version__)

    def execute(self, code, silent, store_history, user_expressions, allow_stdin):
        shell = self.shell
        count = shell.execution_count
        if not silent:
            publish("execute_input", {"code": code, "execution_count": count})
        shell.last_error = None
        with _StdinHooks(allow_stdin):
            result = shell.run_cell(code, store_history=store_history, silent=silent)
        reply = {"execution_count": shell.execution_count - 1, "payload": [],
                 "user_expressions": {}}
        err = result.error_before_exec or result.error_in_exec
        if err is not None:
            e = shell.last_error or {"ename": type(err).__name__, "evalue": str(err),
                                      "traceback": []}
            reply.update(status="error", **e)
        else:
            reply["status"] = "ok"
            reply["user_expressions"] = shell.user_expressions(user_expressions or {})
        reply["payload"] = shell.payload_manager.read_payload()
        shell.payload_manager.clear_payload()
        return reply

    def complete(self, code, cursor_pos, budget=COMPLETE_BUDGET_S):
        """IPython's own completer first (names from the live objects, no jedi: tens of
        ms), then jedi with what is left of the budget: jedi's answer (what ipykernel
        gives) if it came in time with matches, else the first. Neither ever raises out of
        here (_or_logged); jedi's cache is cellvm_jedi's. Jedi's first look at a big module
        costs tens of seconds under TCG (parso parses, e.g., all of pandas' DataFrame
        sources): warm_up() pays that in the template for the usual ones. Where jedi
        overran, it is not asked again for the same object (`df[0].` makes it infer
        DataFrame.__getitem__ from source: a minute, every time). budget None: no bound
        (the warm-up)."""
        end = None if budget is None else time.monotonic() + budget
        comps = _or_logged("complete", lambda: self._completions(code, cursor_pos, False,
                                                                 _left(end)), _TIMED_OUT)
        key, left = _jedi_key(code, cursor_pos), _left(end)
        if self.shell.Completer.use_jedi and key not in self.jedi_too_slow and \
                (left is None or left > 0.1):
            got = _or_logged("complete", lambda: self._completions(code, cursor_pos, True, left))
            if got is _TIMED_OUT:
                if len(self.jedi_too_slow) < 1000:
                    self.jedi_too_slow.add(key)
            elif got:           # IPython swallows jedi's failures into no matches
                comps = got
        return _complete_reply(code, cursor_pos, [] if comps is _TIMED_OUT else comps)

    def _completions(self, code, cursor_pos, jedi, seconds):
        from IPython.core.completer import provisionalcompleter
        completer = self.shell.Completer

        def run():
            with provisionalcompleter():
                return list(completer.completions(code, cursor_pos))
        saved, completer.use_jedi = completer.use_jedi, jedi
        try:
            return _bounded(run, seconds)
        finally:
            completer.use_jedi = saved

    def inspect(self, code, cursor_pos, detail_level, budget=INSPECT_BUDGET_S):
        """object_inspect_mime within the budget; past it, the signature, type and
        docstring alone (what costs is mostly the object's repr: a bound method of a big
        DataFrame prints the DataFrame); past that too, found: false."""
        from IPython.utils.tokenutil import token_at_cursor
        name = token_at_cursor(code, cursor_pos)
        bundle = _or_logged("inspect", lambda: _bounded(
            lambda: self._inspect_mime(name, detail_level), budget), _TIMED_OUT)
        if bundle is _TIMED_OUT:
            bundle = _or_logged("inspect", lambda: _bounded(
                lambda: self._inspect_brief(name), None if budget is None else BRIEF_BUDGET_S))
        found = isinstance(bundle, dict)
        return {"status": "ok", "data": bundle if found else {}, "metadata": {},
                "found": found}

    def _inspect_mime(self, name, detail_level):
        try:
            bundle = self.shell.object_inspect_mime(name, detail_level=detail_level)
        except KeyError:
            return None
        if not self.shell.enable_html_pager:
            bundle.pop("text/html", None)
        return bundle

    def _inspect_brief(self, name):
        import inspect
        info = self.shell._object_find(name)
        if not info.found:
            return None
        obj, lines = info.obj, []
        try:
            lines.append("Signature: %s%s" % (name, inspect.signature(obj)))
        except (TypeError, ValueError):
            pass
        lines.append("Type:      %s" % type(obj).__name__)
        doc = inspect.getdoc(obj)
        if doc:
            lines.append("Docstring:\n" + doc)
        return {"text/plain": "\n".join(lines)}

    def is_complete(self, code):
        status, indent = self.shell.input_transformer_manager.check_complete(code)
        reply = {"status": status}
        if status == "incomplete":
            reply["indent"] = " " * (indent or 0)
        return reply

    def history(self, c):
        hm = self.shell.history_manager
        kind = c.get("hist_access_type", "tail")
        raw, output = bool(c.get("raw", True)), bool(c.get("output", False))
        if kind == "tail":
            hist = hm.get_tail(int(c.get("n", 10)), raw=raw, output=output, include_latest=True)
        elif kind == "range":
            hist = hm.get_range(int(c.get("session", 0)), int(c.get("start", 1)),
                                c.get("stop"), raw=raw, output=output)
        elif kind == "search":
            hist = hm.search(c.get("pattern", "*"), raw=raw, output=output,
                             n=c.get("n"), unique=bool(c.get("unique", False)))
        else:
            hist = []
        # IPython names the current session 0 in ranges; tail says its number.
        return {"status": "ok",
                "history": [[s or hm.session_number, n, line] for s, n, line in hist]}


# ----------------------------------------------------------------------------
#  Matplotlib: figures a cell creates are shown without show().

def _setup_matplotlib(ipython):
    if "MPLBACKEND" in os.environ:
        return
    import importlib.util
    # find_spec, not import: importing matplotlib_inline imports pyplot, which
    # would fix the backend before MPLBACKEND is set (and cost start-up time).
    if ipython and importlib.util.find_spec("matplotlib_inline") is not None:
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        return
    os.environ["MPLBACKEND"] = "Agg"


def _flush_figures_plain():
    """Without IPython: show every open pyplot figure as image/png, then close it."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import io
    for num in plt.get_fignums():
        fig = plt.figure(num)
        if not fig.axes and not fig.artists:
            continue
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        display_data = {"image/png": buf.getvalue(), "text/plain": repr(fig)}
        _flush_std()
        publish("display_data", {"data": display_data, "metadata": {}, "transient": {}})
    plt.close("all")


# ----------------------------------------------------------------------------
#  The object C talks to.

class Kernel:
    def __init__(self):
        global _KERNEL
        _KERNEL = self
        want_ipython = os.environ.get("CELLVM_NO_IPYTHON", "") in ("", "0")
        self.backend = None
        if want_ipython:
            try:
                _setup_matplotlib(True)
                self.backend = IPythonBackend()
            except ImportError:
                self.backend = None
        if self.backend is None:
            _setup_matplotlib(False)
            self.backend = FallbackBackend()
        self.ipython = self.backend.name == "ipython"
        cellvm_comm.install(self.backend.shell if self.ipython else None)
        cellvm_debug.install(self.backend.shell if self.ipython else None)

    def info(self):
        """kernel_info_reply content, computed once at start-up by C."""
        v = sys.version_info
        return _dumps({
            "status": "ok", "protocol_version": "5.3",
            "implementation": "cellvm-kernel",
            "implementation_version": IMPLEMENTATION_VERSION,
            "language_info": {
                "name": "python", "version": "%d.%d.%d" % (v.major, v.minor, v.micro),
                "mimetype": "text/x-python", "file_extension": ".py",
                "pygments_lexer": "ipython3" if self.ipython else "python3",
                "codemirror_mode": {"name": "ipython" if self.ipython else "python",
                                    "version": 3},
                "nbconvert_exporter": "python"},
            "banner": self.backend.banner,
            "help_links": [{"text": "Python Reference", "url": "https://docs.python.org/3/"}],
            "debugger": cellvm_debug.available(),     # 5.5's supported_features: the gateway
            "ipython": self.ipython,
        })

    def handle(self, msg_type, content_json):
        c = json.loads(content_json)
        fn = getattr(self, "do_" + msg_type, None)
        if fn is None:
            return _dumps({"status": "error", "ename": "UnknownMessageType",
                           "evalue": "cellvm-kernel does not handle %r" % msg_type,
                           "traceback": []})
        cellvm_comm.set_request({"content": c})     # for get_ipython().kernel.get_parent()
        try:
            return _dumps(fn(c))
        except Exception as e:  # the kernel's own fault: answer, do not die
            return _dumps({"status": "error", "ename": type(e).__name__, "evalue": str(e),
                           "traceback": traceback.format_exc().splitlines()})
        finally:
            cellvm_comm.set_request(None)

    def do_execute_request(self, c):
        code = c.get("code", "")
        if not isinstance(code, str):
            raise TypeError("execute_request content.code must be a string")
        silent = bool(c.get("silent", False))
        store = bool(c.get("store_history", not silent)) and not silent
        exprs = c.get("user_expressions") or {}
        if not isinstance(exprs, dict):
            exprs = {}
        reply = self.backend.execute(code, silent, store, exprs, bool(c.get("allow_stdin", True)))
        if not self.ipython and not silent:
            _flush_figures_plain()
        return reply

    def do_complete_request(self, c):
        code = c.get("code", "")
        pos = c.get("cursor_pos")
        pos = len(code) if pos is None else max(0, min(int(pos), len(code)))
        return self.backend.complete(code, pos)

    def do_inspect_request(self, c):
        code = c.get("code", "")
        pos = c.get("cursor_pos")
        pos = len(code) if pos is None else max(0, min(int(pos), len(code)))
        return self.backend.inspect(code, pos, int(c.get("detail_level", 0) or 0))

    def do_is_complete_request(self, c):
        return self.backend.is_complete(c.get("code", ""))

    def do_history_request(self, c):
        return self.backend.history(c)

    def do_cellvm_reseed_request(self, c):
        """The driver's hello, before any cell: after a snapshot restore every clone holds
        the same generator states, so reseed them from the driver's entropy mixed with the
        (reseeded) pool; and the environment a client passed (CELLVM_ENV_NAME, docs/gateway.md)
        goes into os.environ, once per kernel process, so that a later hello (a paused
        session resumed) does not undo what the user's code set since."""
        global _ENV_APPLIED
        env = c.get("env")
        # Only a hello that carries some (a pool's warm-up hello has none) counts as applied.
        if not _ENV_APPLIED and (env or c.get("ipython_options")):
            for k, v in (env.items() if isinstance(env, dict) else ()):
                if isinstance(k, str) and isinstance(v, str) and k and "=" not in k \
                        and "\0" not in k + v:
                    os.environ[k] = v
            if isinstance(self.backend, IPythonBackend):
                _apply_ipython_options(self.backend.shell, c.get("ipython_options"))
            _adopt_user_site(os.environ.get("PYTHONUSERBASE"))
            _ENV_APPLIED = True
        if not isinstance(c.get("entropy"), str):
            return {"status": "ok"}
        import hashlib
        import random
        seed = hashlib.sha512(base64.b64decode(c.get("entropy", "")) + os.urandom(32)).digest()
        random.seed(seed)
        np = sys.modules.get("numpy")
        if np is not None:
            np.random.seed(np.frombuffer(seed[:32], dtype=np.uint32))
        return {"status": "ok"}

    def do_comm_info_request(self, c):
        return cellvm_comm.comm_info(c)


# ----------------------------------------------------------------------------
#  The snapshot template's warm-up (docs/snapshots.md).

def _adopt_user_site(base):
    """What pip installs into PYTHONUSERBASE (a session with egress: /workspace/.local, so it
    survives restarts and snapshots) is importable at once, ahead of the image's packages, as
    in a fresh interpreter that had the variable. The kernel started isolated, in the
    template, before the variable existed; the directory is made now so the import system
    caches a finder for it rather than its absence."""
    if not base or not os.path.isabs(base):
        return
    import site
    ver = "python%d.%d" % sys.version_info[:2]
    path = os.path.join(base, "lib", ver, "site-packages")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return
    site.USER_BASE, site.USER_SITE = base, path
    import sysconfig                    # the template cached its own (~/.local): pip, run in
    sysconfig.get_config_vars()["userbase"] = base      # a fork (_pip_magic), reads it
    if path not in sys.path:
        first = next((i for i, p in enumerate(sys.path) if p.endswith(("-packages",))),
                     len(sys.path))
        sys.path.insert(first, path)
    site.addsitedir(path)              # its .pth files (it is already on the path)


_PIP_MODULES = ("pip._internal.cli.main", "pip._internal.commands.install",
                "pip._internal.network.session", "pip._internal.index.package_finder",
                "pip._internal.resolution.resolvelib.resolver",
                "pip._internal.operations.install.wheel", "pip._internal.req.req_install")


def _pip_magic(line):
    """%pip ARGS: pip's command line in a fork of this kernel, which imports pip once, on
    the first %pip, instead of a new interpreter importing it all again each time: that
    alone takes seconds under TCG. Not in the template: pip's modules there would cost every
    session's guest that memory. The child's output is the cell's (a fork writes to the
    captured fds), an interrupt reaches it, and what it installed is importable at once."""
    import importlib
    import shlex
    try:
        args = shlex.split(line)
        from pip._internal.cli.main import main as pip_main
        for name in _PIP_MODULES[1:]:
            try:
                importlib.import_module(name)
            except ImportError:
                pass                    # another pip: the child imports what it needs
    except (ValueError, ImportError) as e:
        print("%%pip: %s" % e, file=sys.stderr)
        return
    _flush_std()
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            sys.argv = ["pip"] + args
            rc = pip_main(args)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            os._exit(rc if isinstance(rc, int) else 1)
    _reap(pid)
    importlib.invalidate_caches()


def _reap(pid):
    """Wait for a child; an interrupt is passed on to it, then raised here once it is gone."""
    import signal
    interrupted = False
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except KeyboardInterrupt:       # a second one ends it
            os.kill(pid, signal.SIGKILL if interrupted else signal.SIGINT)
            interrupted = True
        except ChildProcessError:
            break
    if interrupted:
        raise KeyboardInterrupt


def _apply_ipython_options(shell, options):
    """--Class.trait=value options a runner passed (KernelManager's extra_arguments), set on
    the shell's configurables of that class, the value read as traitlets reads the command
    line (the trait's from_string). One that names no trait of ours, or a value the trait
    refuses, is left alone (the gateway already warned about other classes)."""
    targets = [shell] + list(getattr(shell, "configurables", []))
    targets += list(shell.display_formatter.formatters.values())
    for opt in options if isinstance(options, list) else ():
        if not isinstance(opt, str) or not opt.startswith("--") or "=" not in opt:
            continue
        name, _, raw = opt[2:].partition("=")
        cls, _, trait = name.rpartition(".")
        for obj in targets:
            if cls in {k.__name__ for k in type(obj).__mro__} and obj.has_trait(trait):
                try:
                    setattr(obj, trait, obj.traits()[trait].from_string(raw))
                except Exception:
                    pass


_KERNEL = None
_ENV_APPLIED = False        # the hello's env went into os.environ (do_cellvm_reseed_request)
WARM_UP_SECONDS = cellvm_warm.WARM_UP_SECONDS   # step -> seconds it took in the template
WARM_UP_ERRORS = cellvm_warm.WARM_UP_ERRORS     # "step: error" for each step that failed


def warm_up():
    """The template's warm-up (cellvm_warm.warm_up) on this kernel's backend."""
    backend = getattr(_KERNEL, "backend", None)
    cellvm_warm.warm_up(backend, isinstance(backend, IPythonBackend))
