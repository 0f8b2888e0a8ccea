"""The kernel's fast paths give what IPython gives (docs/kernel.md "A cheaper cell").

kernel/py/cellvm_fast.py cuts costs of every cell under TCG:
- `_plain_transforms`: transform_cell returns a cell that none of IPython's static transformations
  could change without tokenizing it;
- `_plain_format_calls`: the display formatters' __call__ without `decorator`'s argument binding;
- `plain_should_run_async`: no compile to look for a top-level await in a cell that has none;
- `plain_format`: a builtin-typed value (`1`) asks text/plain alone when no other formatter could
  answer for it.

Both are checked here against IPython itself, on the host, with Debian's IPython (the guest's):
a corpus of cells users write, then 30,000 random cells over an alphabet rich in the characters the
transformations look for. Wherever the fast path answers, its answer must equal IPython's; where
IPython raises, the fast path must not have answered. The formatters must give the same bundles,
the same error display for a failing _repr_html_, and accept obj= by keyword.
"""
import pathlib
import subprocess
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(r'''
    import random, sys, types
    stub = types.ModuleType("_cellvm")
    stub.OutStream = type("OutStream", (), {})
    stub.OutBuffer = type("OutBuffer", (), {})
    stub.fence = lambda: None
    sys.modules["_cellvm"] = stub
    sys.path.insert(0, sys.argv[1])
    import cellvm_fast as cs
    from IPython.core.inputtransformer2 import TransformerManager

    slow = TransformerManager()
    fast = TransformerManager()
    cs._plain_transforms(fast)
    corpus = ["1", "pass", "x = 1", "print(x)", "df.head()", "for i in range(3):\n    print(i)\n",
              "import numpy as np\nnp.arange(3)", "a = 5 % 3", "!ls", "%time 1", "%%timeit\n1",
              "x?", "x??", "?x", "  x = 1", "\nx = 1", ">>> 1 + 1", "In [1]: 1", "   ...: 1",
              "/f 1", ",f a b", ";f a", "def f():\n    \"\"\">>> f()\"\"\"\n    return 1", "x = (1\n/ 2)",
              "s = 'a?b'", "# just a comment", "x = 1\r\ny = 2", "\t1", "", "\n", "1\n\n",
              "...", "x = ...", "a = !ls", "b = %pwd", "lambda: 0", "print('%d' % 3)"]
    rng = random.Random(11)
    alphabet = "ab =()\n\t'\"#:.,;/%!?>[]In01 \\\r\x0c\x85\u2028"
    for _ in range(30000):
        corpus.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24))))
    taken = 0
    for cell in corpus:
        try:
            want = slow.transform_cell(cell)
        except Exception as e:
            want = e
        try:
            got = fast.transform_cell(cell)
        except Exception as e:
            got = e
        plain = bool(cell) and not cell[0].isspace() and not cs._MAYBE_SPECIAL.search(cell)
        taken += plain
        if isinstance(want, Exception):
            assert not plain, ("fast path answered where IPython raises", cell, want)
            assert type(got) is type(want), (cell, got, want)
        else:
            assert got == want, (cell, got, want)
    assert taken > 1000, taken          # the fast path was exercised, not just the slow one

    from IPython.core.interactiveshell import InteractiveShell
    import IPython.core.formatters as F
    shell = InteractiveShell.instance()
    fmt = shell.display_formatter.format

    class Rich:
        def _repr_html_(self): return "<b>r</b>"
        def _repr_markdown_(self): return "*r*"
        def __repr__(self): return "Rich()"

    class Bad:
        def _repr_html_(self): raise ValueError("boom")
        def __repr__(self): return "Bad()"

    class NotImpl:
        def _repr_html_(self): raise NotImplementedError
        def __repr__(self): return "NotImpl()"

    objs = [1, 2.5, "s", [1, 2], {"a": 1}, None, Rich(), NotImpl(), list(range(200))]
    before = [fmt(o) for o in objs]
    import io, contextlib
    def bad_display():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            out = fmt(Bad())
        return out, buf.getvalue()
    bad_before = bad_display()
    cs._plain_format_calls()
    assert getattr(F.BaseFormatter.__call__, "_cellvm_plain", False)
    after = [fmt(o) for o in objs]
    assert before == after, (before, after)
    bad_after = bad_display()
    assert bad_after[0] == bad_before[0], (bad_before[0], bad_after[0])
    assert "ValueError" in bad_after[1] and "boom" in bad_after[1], bad_after[1]
    assert bad_after[1] == bad_before[1], (bad_before[1], bad_after[1])
    assert shell.display_formatter.formatters["text/plain"](obj=5) == "5"
    assert shell.display_formatter.formatters["text/html"](obj=Rich()) == "<b>r</b>"

    # should_run_async: the same answer, or the same exception, as IPython's compile.
    slow_async = shell.should_run_async
    cs.plain_should_run_async(shell)
    fast_async = shell.should_run_async
    cells = corpus[:2000] + ["await x", "x = await f()", "async def f(): pass", "[x async for x in y]",
                             "async with a: pass", "return 1", "yield 1", "x = 1\x00", "'\ud800'",
                             "-" * 400 + "1", "-" * 5000 + "1", "1" + "+1" * 3000, "f" + "(1)" * 600, "1" + "+1" * 100000,
                             "x" + ".a" * 20000,
                             "asyncio.run(main())", "x.await_me", "print('é')", "pass"]
    async_taken = 0
    for cell in cells:
        outs = []
        for fn in (slow_async, fast_async):
            try:
                outs.append(fn(cell, transformed_cell=cell))
            except BaseException as e:      # RecursionError, ValueError: escape run_cell
                outs.append(type(e))
        assert outs[0] == outs[1], (cell[:80], outs)
        async_taken += cs.plain_async_cell(cell)
    assert slow_async("await x", transformed_cell="await x") is True
    assert async_taken > 1000, async_taken

    # format: the same bundles as IPython's, whatever was registered or replaced.
    df = shell.display_formatter
    calls = []
    ipython_format = df.format
    def counted(obj, include=None, exclude=None):
        calls.append(obj)
        return ipython_format(obj, include=include, exclude=exclude)
    df.format = counted
    cs.plain_format(df)
    fast_format = df.format
    import warnings
    values = [1, -5, 2 ** 70, 2.5, float("nan"), 1j, True, None, "s", "x\x00", b"b",
              bytearray(b"x"), [1, 2], (1,), {"a": 1}, {1, 2}, frozenset(), range(3), ...,
              NotImplemented, list(range(200)), [Rich()], Rich(), NotImpl()]
    def both(obj, **kw):
        got = []
        for fn in (fast_format, ipython_format):     # fast first: IPython's lookup moves
            # a deferred printer to type_printers, which the fast path must not rely on
            buf = io.StringIO()
            with warnings.catch_warnings(record=True) as w, contextlib.redirect_stdout(buf):
                warnings.simplefilter("always")
                got.append((fn(obj, **kw), buf.getvalue(), [str(x.message) for x in w]))
        assert got[0] == got[1], (obj, kw, got)
    def check_all():
        for v in values:
            both(v)
        both(1, include={"text/plain"})
        both(1, include={"text/html"})
        both([1], exclude={"text/plain"})
    F_ = df.formatters
    check_all()
    del calls[:]
    fast_format(1), fast_format("s"), fast_format([1, 2])
    assert calls == [], calls          # the fast path answered these itself
    class Custom(F.BaseFormatter):             # answers for anything, whatever it is given
        format_type = "text/x-custom"
        def __call__(self, obj):
            return "custom"
    custom = Custom(parent=df)
    custom.type_printers, custom.deferred_printers, custom.singleton_printers
    custom.print_method = "_repr_custom_"     # a name no builtin type has: only __call__ tells
    def printer(o, *a, **k):
        return "<i>%r</i>" % (o,)
    configs = [
        (lambda: F_["text/html"].for_type(int, printer), lambda: F_["text/html"].pop(int)),
        (lambda: F_["text/markdown"].for_type_by_name("builtins", "str", printer),
         lambda: F_["text/markdown"].type_printers.pop(str, None)
         or F_["text/markdown"].deferred_printers.pop(("builtins", "str"), None)),
        (lambda: F_["text/latex"].for_type(object, printer), lambda: F_["text/latex"].pop(object)),
        (lambda: F_["application/json"].singleton_printers.__setitem__(id(values[0]), lambda o: {"v": o}),
         lambda: F_["application/json"].singleton_printers.pop(id(values[0]))),
        (lambda: setattr(F_["text/html"], "print_method", "__repr__"),
         lambda: setattr(F_["text/html"], "print_method", "_repr_html_")),
        (lambda: F_.__setitem__("text/x-custom", custom), lambda: F_.pop("text/x-custom")),
        (lambda: df.mimebundle_formatter.for_type(dict, lambda o, include=None, exclude=None:
                                                   {"text/x-d": "d"}),
         lambda: df.mimebundle_formatter.pop(dict)),
        (lambda: df.ipython_display_formatter.for_type(tuple, lambda o: print("shown", o)),
         lambda: df.ipython_display_formatter.pop(tuple)),
        (lambda: F_["text/plain"].for_type(int, lambda o, p, cycle: p.text("int!")),
         lambda: F_["text/plain"].pop(int)),
        (lambda: setattr(F_["text/html"], "enabled", False),
         lambda: setattr(F_["text/html"], "enabled", True)),
    ]
    for do, undo in configs:
        do()
        try:
            check_all()
        finally:
            undo()
    check_all()
    F_["text/html"].for_type(int, printer)
    assert "text/html" in fast_format(1)[0], fast_format(1)     # the registration is seen
    F_["text/html"].pop(int)
    print("ok", taken, async_taken)
''')


def test_fast_paths_match_ipython(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    p = subprocess.run(["/usr/bin/python3", str(probe), str(ROOT / "kernel" / "py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout[-3000:] + p.stderr[-6000:]
