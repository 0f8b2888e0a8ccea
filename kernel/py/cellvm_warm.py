"""cellvm_warm - the snapshot template's warm-up (docs/snapshots.md): what a clone's first
error, completion, inspection, chart and DataFrame would otherwise pay, paid once in the
template. cellvm_shell.warm_up() calls warm_up() here with the kernel's backend.
"""
import gc
import sys
import time

WARM_UP_SECONDS = {}        # step -> seconds it took in the template
WARM_UP_ERRORS = []         # "step: error" for each step that failed
_W = "_cellvm_warm_"        # prefix of the names a step puts in the namespace, then removes


def warm_up(backend, ipython):
    """Run once, by the template's silent warm-up cell (gateway/gw_template.c, through
    cellvm_shell.warm_up) with the kernel's backend (ipython: it is IPython's), so that
    every clone starts with it done: the usual imports, and once each the code paths of a
    user's first error, completion (jedi's parse of the builtins' stubs and of pandas'
    DataFrame and Series sources: tens of seconds under TCG; IPython's own completer),
    inspection (detail levels 0 and 1, and `?`), matplotlib inline chart (a PNG) and
    DataFrame repr (HTML and text). The cell is silent, so nothing is published; nothing
    is stored or counted, and the names a step adds go again. A step that fails is noted
    in WARM_UP_ERRORS, and the others still run. Last gc.freeze(): what the template
    made is never traversed by a collection again, which keeps its pages shared between
    clones (a full collection writes to every object) and collections short."""
    steps = [("imports", lambda b: _warm_imports(b, ipython))]
    if ipython:
        steps += [("error", _warm_error), ("complete", _warm_complete),
                  ("inspect", _warm_inspect), ("chart", _warm_chart), ("repr", _warm_repr)]
    for name, step in steps:
        t = time.monotonic()
        try:
            step(backend)
        except Exception as e:
            WARM_UP_ERRORS.append("%s: %s: %s" % (name, type(e).__name__, e))
        WARM_UP_SECONDS[name] = round(time.monotonic() - t, 3)
    gc.collect()
    gc.freeze()


def _warm_imports(backend, ipython):
    import base64, json, os, random, uuid  # noqa: F401,E401
    import numpy, pandas  # noqa: F401,E401
    import matplotlib, matplotlib.pyplot  # noqa: F401,E401
    if ipython:
        import IPython  # noqa: F401


class _Scratch:
    """Objects under _W names in the user's namespace for one step, removed after it."""

    def __init__(self, backend, **objs):
        self.ns, self.objs = backend.shell.user_ns, objs

    def __enter__(self):
        self.ns.update({_W + k: v for k, v in self.objs.items()})

    def __exit__(self, *exc):
        for k in self.objs:
            self.ns.pop(_W + k, None)


def _warm_frames():
    import numpy as np
    import pandas as pd
    small = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, np.nan], "c": ["x", "y", None],
                          "d": pd.date_range("2024-01-01", periods=3)})
    big = pd.DataFrame(np.random.rand(200, 25))      # over max_rows and max_columns
    return small, big


def _warm_error(backend):
    backend.shell.run_cell("1/0", store_history=False, silent=True)
    backend.shell.last_error = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)


def _warm_complete(backend):
    """IPython's own completer on the usual objects, and jedi on plain names only: jedi
    on builtins costs ~14 s under TCG once, here; on pandas' DataFrame it would cost a
    minute and ~60 MB of every template's RAM, so a session's first `df.` gets IPython's
    answer when jedi overruns its budget (docs/kernel.md "Completion")."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    small, big = _warm_frames()
    with _Scratch(backend, df=big, s=small["a"], np=np, pd=pd, plt=plt):
        for code in ("pri", "zi", "import o"):
            backend.complete(code, len(code), budget=None)
        for code in ("df.gro", "s.st", "np.ar", "pd.re", "plt.pl"):
            code = _W + code
            backend._completions(code, len(code), False, None)
    backend.jedi_too_slow.clear()

def _warm_inspect(backend):
    small, big = _warm_frames()
    with _Scratch(backend, df=big):
        code = _W + "df.groupby"
        for level in (0, 1):
            backend.inspect(code, len(code), level, budget=None)
        backend.inspect(code, len(code), 0)
        backend._inspect_brief(code)
        backend.inspect("len", 3, 0)
        backend.shell.run_cell(code + "?", store_history=False, silent=True)
        backend.shell.payload_manager.clear_payload()


def _warm_chart(backend):
    import matplotlib.pyplot as plt
    lines = plt.plot([1, 2, 3])
    backend.shell.display_formatter.format(lines)
    backend.shell.events.trigger("post_execute")    # the inline backend's PNG, as a cell's
    plt.close("all")


def _warm_repr(backend):
    fmt = backend.shell.display_formatter.format
    fmt(1)      # the formatters' first use: 0.24 s on a clone's first `1`
    for obj in _warm_frames():
        fmt(obj)
        fmt(obj.iloc[:, 0])

