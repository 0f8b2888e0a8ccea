"""The kernel's fast paths give what IPython gives (issue 11, item 3; docs/kernel.md "A cheaper cell").

kernel/py/cellvm_shell.py cuts two costs of every cell under TCG:
- `_plain_transforms`: transform_cell returns a cell that none of IPython's static transformations
  could change without tokenizing it;
- `_plain_format_calls`: the display formatters' __call__ without `decorator`'s argument binding.

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
    import cellvm_shell as cs
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
    print("ok", taken)
''')


def test_fast_paths_match_ipython(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    p = subprocess.run(["/usr/bin/python3", str(probe), str(ROOT / "kernel" / "py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout[-3000:] + p.stderr[-6000:]
