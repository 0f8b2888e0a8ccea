"""The first use is as fast as the second (docs/kernel.md, docs/snapshots.md).

On the `cellvm` kernelspec (microvm, restored from the snapshot template), each case in a FRESH
session, as a notebook user meets it:
- the first Tab completion of `df.gro` on a DataFrame (after the cell that makes `df`);
- the first `inspect_request` of `df.groupby` (detail levels 0 and 1);
- the first `df.groupby?` cell (the pager payload);
- the first matplotlib chart (an image/png display_data);
- the first DataFrame rendered as HTML.

Each must answer, correctly, and its seconds are printed (run with -s). The timing assertion is
loose (FIRST_USE_MAX_S, 15 s) and only catches a regression to tens of seconds (a first Tab took
68-75 s before the template's warm-up paid jedi's parse of pandas); p50 figures belong in
bench/bench.py. Also: the template's warm-up ran every step without an error and left no name
behind, and a completion or inspection that would run for 30 s (a `__dir__` or `__repr__` that
loops, or sleeps) answers within its budget plus SLACK_S, status ok, and the kernel is
unharmed.
"""
import subprocess
import time

import pytest

from sessions import GATEWAY, IMAGE, TIMEOUT, require_image, start_session

FIRST_USE_MAX_S = 15.0      # catches tens of seconds; a busy host can triple a chart
BUDGET_S = 1.0              # cellvm_shell.COMPLETE_BUDGET_S and INSPECT_BUDGET_S
SLACK_S = 2.0               # the request's round trip, and a slow TCG guest on a busy host
BRIEF_S = 0.3               # cellvm_shell.BRIEF_BUDGET_S: an inspection's second chance
SETUP = "import pandas as pd, numpy as np; df = pd.DataFrame(np.random.rand(2000, 8))"
SLOW = '''
import time
class Slow:
    """A slow object."""
    def __dir__(self):
        t = time.monotonic()
        while time.monotonic() < t + 30:
            pass
        return ["abcdef"]
    def __repr__(self):
        time.sleep(30)
        return "slow"
    def method(self, x, y=1):
        """Does nothing."""
class Sleepy:
    def __dir__(self):
        time.sleep(30)
        return ["abcdef"]
slow, sleepy = Slow(), Sleepy()
'''


@pytest.fixture(scope="module")
def template():
    """The template for the default options (built unless intact: milliseconds when it is)."""
    require_image(IMAGE)
    deadline = time.monotonic() + 900
    while True:
        p = subprocess.run([str(GATEWAY), "--build-template", "--image", str(IMAGE)],
                           capture_output=True, text=True, timeout=900)
        if p.returncode == 0:
            return
        assert p.returncode == 3, p.stderr[-2000:]      # 3: another process builds it
        assert time.monotonic() < deadline, "another process never finished the template"
        time.sleep(5)


@pytest.fixture
def session(template, request):
    s = start_session("cellvm", name=f"first-{request.node.name}", image=IMAGE)
    try:
        log = s.log_text()
        assert "event=vm.restored" in log or "event=vm.from_pool" in log, log[-3000:]
        yield s
    finally:
        s.close()


def shell_request(s, send, timeout=TIMEOUT):
    """Send a shell request; (seconds to its reply, the reply's content)."""
    t = time.monotonic()
    msg_id = send()
    while True:
        msg = s.kc.get_shell_msg(timeout=max(0.1, timeout - (time.monotonic() - t)))
        if msg["parent_header"].get("msg_id") == msg_id:
            return time.monotonic() - t, msg["content"]


def make_df(s):
    r = s.run(SETUP)
    assert r.status == "ok", r.describe()


def report(name, seconds):
    print(f"\nfirst use: {name} {seconds:.3f} s")
    assert seconds < FIRST_USE_MAX_S, f"{name} took {seconds:.1f} s"


def cell_seconds(r):
    return r.reply["t_recv"] - r.t_sent


def test_the_warm_up_ran_whole_and_left_nothing(session):
    r = session.run("print(len(In), len(Out), get_ipython().execution_count, "
                    "sorted(k for k in globals() if k.startswith('_cellvm') or k in "
                    "('numpy', 'pandas', 'os', 'matplotlib')))")
    assert r.status == "ok", r.describe()
    assert r.content["execution_count"] == 1
    assert r.stdout.strip() == "2 0 1 []", r.stdout
    w = session.run("w = __import__('cellvm_shell'); print(w.WARM_UP_ERRORS, "
                    "sorted(w.WARM_UP_SECONDS)); del w")
    assert w.status == "ok", w.describe()
    assert w.stdout.strip() == ("[] ['chart', 'complete', 'error', 'imports', 'inspect', "
                                "'repr']"), w.stdout


def test_first_completion_on_a_dataframe(session):
    make_df(session)
    dt, c = shell_request(session, lambda: session.kc.complete("df.gro", 6))
    assert c["status"] == "ok", c
    assert any(m.endswith("groupby") for m in c["matches"]), c
    assert c["cursor_end"] == 6 and c["cursor_start"] in (0, 3), c
    report("complete df.gro", dt)


@pytest.mark.parametrize("level", [0, 1])
def test_first_inspection(session, level):
    make_df(session)
    dt, c = shell_request(session, lambda: session.kc.inspect("df.groupby", 10, level))
    assert c["status"] == "ok" and c["found"], c
    assert "groupby" in c["data"]["text/plain"], c
    report(f"inspect df.groupby detail_level={level}", dt)


def test_first_help_cell(session):
    make_df(session)
    r = session.run("df.groupby?")
    assert r.status == "ok", r.describe()
    pages = [p for p in r.content["payload"] if p.get("source") == "page"]
    assert pages and "groupby" in pages[0]["data"]["text/plain"], r.content
    report("df.groupby? cell", cell_seconds(r))


def test_first_chart(session):
    r = session.run("import matplotlib.pyplot as plt; plt.plot([1, 2, 3]); plt.show()")
    assert r.status == "ok", r.describe()
    pngs = [m for m in r.of_type("display_data") if "image/png" in m["content"]["data"]]
    assert len(pngs) == 1, [m["msg_type"] for m in r.msgs]
    report("matplotlib chart", cell_seconds(r))


def test_first_dataframe_html(session):
    r = session.run(SETUP + "; df")
    assert r.status == "ok", r.describe()
    html = [m["content"]["data"]["text/html"] for m in r.of_type("execute_result")]
    assert html and "<table" in html[0], r.msgs
    report("DataFrame HTML", cell_seconds(r))


def test_a_slow_completion_or_inspection_is_bounded(session):
    r = session.run(SLOW)
    assert r.status == "ok", r.describe()
    for code in ("slow.abc", "sleepy.abc", "slow.abc"):        # jedi is skipped the 2nd time
        dt, c = shell_request(session, lambda: session.kc.complete(code, len(code)))
        print(f"\nbounded: complete {code} {dt:.3f} s")
        assert c["status"] == "ok" and c["matches"] == [], c
        assert dt < BUDGET_S + SLACK_S, f"complete {code} took {dt:.1f} s"
    # The repr (what IPython's inspector shows as the string form) sleeps 30 s: the full
    # answer is cut, the signature and docstring still come.
    dt, c = shell_request(session, lambda: session.kc.inspect("slow.method", 11, 0))
    print(f"\nbounded: inspect slow.method {dt:.3f} s")
    assert c["status"] == "ok" and c["found"], c
    assert "Does nothing." in c["data"]["text/plain"], c
    assert dt < BUDGET_S + BRIEF_S + SLACK_S, f"inspect took {dt:.1f} s"
    dt, c = shell_request(session, lambda: session.kc.inspect("slow", 4, 0))
    assert c["status"] == "ok", c
    assert dt < BUDGET_S + BRIEF_S + SLACK_S, f"inspect took {dt:.1f} s"
    # Nothing was left behind: the next cell runs at once and sees no stray exception.
    r = session.run("print(6 * 7)")
    assert r.status == "ok" and r.stdout == "42\n", r.describe()
    assert cell_seconds(r) < SLACK_S, cell_seconds(r)
