"""cellvm_plain - the kernel without IPython (CELLVM_NO_IPYTHON=1, or IPython not importable):
plain CPython runs cells, with rich display through _repr_*_ methods, display ids, completion,
inspection, is_complete and history. docs/kernel.md says what it covers.
"""
import ast
import builtins
import sys
import traceback

from cellvm_io import _StdinHooks, _flush_std, publish


class _FallbackDisplayHook:
    def __init__(self, backend):
        self.backend = backend

    def __call__(self, value):
        if value is None:
            return
        builtins._ = value
        _flush_std()
        publish("execute_result", {"execution_count": self.backend.count,
                                   "data": mimebundle(value), "metadata": {}})


_REPR_METHODS = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
                 ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
                 ("image/jpeg", "_repr_jpeg_"), ("text/latex", "_repr_latex_"),
                 ("application/json", "_repr_json_"), ("application/javascript", "_repr_javascript_"))


def mimebundle(obj):
    """Rich representation without IPython: _repr_mimebundle_ and _repr_*_."""
    data = {}
    meth = getattr(obj, "_repr_mimebundle_", None)
    if callable(meth):
        try:
            got = meth(include=None, exclude=None)
            data.update(got[0] if isinstance(got, tuple) else got or {})
        except Exception:
            pass
    for mime, name in _REPR_METHODS:
        meth = getattr(obj, name, None)
        if mime not in data and callable(meth) and not isinstance(obj, type):
            try:
                val = meth()
            except Exception:
                val = None
            if isinstance(val, tuple):
                val = val[0]
            if val is not None:
                data[mime] = val
    data.setdefault("text/plain", repr(obj))
    return data


class DisplayHandle:
    """What display(..., display_id=True) returns, as in IPython."""

    def __init__(self, display_id):
        self.display_id = display_id

    def __repr__(self):
        return "<DisplayHandle display_id=%s>" % self.display_id

    def display(self, obj, **kw):
        display(obj, display_id=self.display_id, **kw)

    def update(self, obj, **kw):
        display(obj, display_id=self.display_id, update=True, **kw)


def display(*objs, display_id=None, update=False, raw=False, **kw):
    """display() for the fallback shell, with display ids and updates."""
    handle = None
    if display_id is True:
        import uuid
        display_id = uuid.uuid4().hex
        handle = DisplayHandle(display_id)
    transient = {"display_id": display_id} if display_id else {}
    for obj in objs:
        data = obj if raw else mimebundle(obj)
        _flush_std()
        publish("update_display_data" if update else "display_data",
                {"data": data, "metadata": {}, "transient": transient})
    return handle


class FallbackBackend:
    name = "plain"

    def __init__(self):
        import __main__
        self.ns = __main__.__dict__
        self.ns.setdefault("__builtins__", builtins)
        self.ns["display"] = display
        self.count = 1
        self.history_log = []
        self.banner = "Python %s (cellvm-kernel, no IPython)" % sys.version.split("\n")[0]

    def _run(self, code, silent):
        tree = ast.parse(code, filename="<cell-%d>" % self.count, mode="exec")
        last = None
        if not silent and tree.body and isinstance(tree.body[-1], ast.Expr) \
                and not code.rstrip().endswith(";"):
            last = ast.Interactive([tree.body.pop()])
        fname = "<cell-%d>" % self.count
        import linecache
        linecache.cache[fname] = (len(code), None, code.splitlines(True), fname)
        exec(compile(tree, fname, "exec"), self.ns)
        if last is not None:
            hook, sys.displayhook = sys.displayhook, _FallbackDisplayHook(self)
            try:
                exec(compile(last, fname, "single"), self.ns)
            finally:
                sys.displayhook = hook

    def execute(self, code, silent, store_history, user_expressions, allow_stdin):
        if not silent:
            publish("execute_input", {"code": code, "execution_count": self.count})
        reply = {"payload": [], "user_expressions": {}}
        try:
            with _StdinHooks(allow_stdin):
                self._run(code, silent)
            reply["status"] = "ok"
        except BaseException as e:  # noqa: B902 - user code may raise anything
            # Show the user's frames only: skip ours, down to the first cell frame.
            tb = e.__traceback__
            while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
                tb = tb.tb_next
            lines = traceback.format_exception(type(e), e, tb)
            err = {"ename": type(e).__name__, "evalue": str(e),
                   "traceback": [ln.rstrip("\n") for ln in lines]}
            _flush_std()
            if not silent:
                publish("error", err)
            reply.update(status="error", **err)
        if reply["status"] == "ok":
            reply["user_expressions"] = self._user_expressions(user_expressions or {})
        if store_history and not silent:
            self.history_log.append(code)
            self.count += 1
        reply["execution_count"] = self.count - 1
        return reply

    def _user_expressions(self, exprs):
        out = {}
        for name, expr in exprs.items():
            try:
                out[name] = {"status": "ok", "data": mimebundle(eval(expr, self.ns)),
                             "metadata": {}}
            except Exception as e:
                out[name] = {"status": "error", "ename": type(e).__name__,
                             "evalue": str(e), "traceback": []}
        return out

    def complete(self, code, cursor_pos):
        import re
        import rlcompleter
        m = re.search(r"[\w.]*$", code[:cursor_pos])
        token = m.group(0) if m else ""
        comp = rlcompleter.Completer(self.ns)
        matches, i = [], 0
        while True:
            s = comp.complete(token, i)
            if s is None or i > 1000:
                break
            s = s.rstrip("(")
            if s not in matches:
                matches.append(s)
            i += 1
        return {"matches": matches, "cursor_start": cursor_pos - len(token),
                "cursor_end": cursor_pos, "metadata": {}, "status": "ok"}

    def inspect(self, code, cursor_pos, detail_level):
        import re
        import pydoc
        left = re.search(r"[\w.]*$", code[:cursor_pos]).group(0)
        right = re.match(r"[\w]*", code[cursor_pos:]).group(0)
        name = (left + right).strip(".")
        try:
            obj = eval(name, self.ns) if name else None
        except Exception:
            obj = None
        if obj is None:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        text = pydoc.plain(pydoc.render_doc(obj, title="%s"))
        return {"status": "ok", "found": True, "data": {"text/plain": text}, "metadata": {}}

    def is_complete(self, code):
        import codeop
        try:
            ok = codeop.compile_command(code, "<cell>", "exec")
        except (SyntaxError, OverflowError, ValueError):
            return {"status": "invalid"}
        if ok is None or (code.rstrip("\n").split("\n")[-1].startswith((" ", "\t"))
                          and not code.endswith("\n\n")):
            return {"status": "incomplete", "indent": "    "}
        return {"status": "complete"}

    def history(self, c):
        items = [(0, i + 1, code) for i, code in enumerate(self.history_log)]
        if c.get("hist_access_type", "tail") == "tail":
            items = items[-int(c.get("n", 10)):]
        elif c.get("hist_access_type") == "search":
            import fnmatch
            pat = c.get("pattern", "*")
            items = [h for h in items if fnmatch.fnmatch(h[2], pat)]
        if c.get("output"):
            items = [(s, n, (code, None)) for s, n, code in items]
        return {"status": "ok", "history": [list(h) for h in items]}
