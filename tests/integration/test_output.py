"""Output coalescing keeps the guarantees (docs/channel.md "Ordering guarantees"):
every byte a cell prints reaches the client, in order, in few stream messages; stdout comes
before a later display, error, input prompt or reply; stdout/stderr keep their interleaving;
a child process's output lands between the prints around it; a slow loop still streams.

Each test runs on both backends (one session per backend for the module), through the gateway
as a Jupyter client sees it. What only the kernel decides (how many frames a large text takes)
is checked on the kernel's channel directly, without a gateway in between.

No timing assertions, but one: the first line of a slow loop arrives before the cell's reply.
"""
import queue
import time

import pytest

from kernel_driver import assert_execute_ok, new_kernel  # noqa: F401  (fixture)
from sessions import BACKENDS, TIMEOUT, Session, collect, run_cell

LINES = 10**6


@pytest.fixture(scope="module", params=list(BACKENDS))
def s(request):
    backend = request.param
    sess = Session(BACKENDS[backend], name=f"output-{backend}")
    try:
        sess.start()
        yield sess
    finally:
        sess.close()


def streams(res):
    """[(name, text)] of the cell's stream messages, in arrival order."""
    return [(m["content"]["name"], m["content"]["text"]) for m in res.msgs
            if m["msg_type"] == "stream"]


def merged(res):
    """The stream messages with neighbours of the same name joined: what a frontend shows."""
    out = []
    for name, text in streams(res):
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + text)
        else:
            out.append((name, text))
    return out


def types(res):
    return [m["msg_type"] for m in res.msgs]


# ------------------------------------------------------------------------------ no loss
def test_a_million_numbered_lines_arrive_all_in_order(s):
    res = run_cell(s.kc, f"for i in range({LINES}):\n    print(i)", timeout=600)
    assert res.status == "ok", res.describe()
    lines = res.stdout.split("\n")
    assert lines[-1] == "", "the last line ends with a newline"
    lines.pop()
    assert len(lines) == LINES, f"{len(lines):,} of {LINES:,} lines arrived"
    bad = next((i for i, ln in enumerate(lines) if ln != str(i)), None)
    assert bad is None, f"line {bad} is {lines[bad][:40]!r}"
    n = len(streams(res))
    assert n < LINES // 100, f"{n:,} stream messages for {LINES:,} prints: not coalesced"


def test_fd_level_and_binary_writes_are_not_lost(s):
    code = ("import os, sys\n"
            "for i in range(3000):\n"
            "    os.write(1, b'fd %d\\n' % i)\n"
            "    sys.stdout.buffer.write(b'bin %d\\n' % i)\n"
            "    print('py', i)\n")
    res = run_cell(s.kc, code, timeout=300)
    assert res.status == "ok", res.describe()
    out = res.stdout.splitlines()
    assert sorted(out) == sorted(f"{k} {i}" for i in range(3000) for k in ("fd", "bin", "py"))
    # Python text (print and .buffer) keeps its own order exactly; so does each fd.
    assert [ln for ln in out if not ln.startswith("fd")] == \
        [f"{k} {i}" for i in range(3000) for k in ("bin", "py")]
    assert [ln for ln in out if ln.startswith("fd")] == [f"fd {i}" for i in range(3000)]


def test_invalid_utf8_from_fd_and_buffer_is_replaced_not_fatal(s):
    res = run_cell(s.kc, "import os, sys\nos.write(1, b'a\\xffb\\n')\n"
                         "sys.stdout.buffer.write(b'c\\xfe\\xc3')\nsys.stdout.buffer.write(b'\\xa9\\n')\n"
                         "print('\\udcff-esc')\nprint('after')")
    assert res.status == "ok", res.describe()
    assert res.stdout == "a\ufffdb\nc\ufffd\u00e9\n\ufffd-esc\nafter\n"


def test_print_of_ints_is_str_of_ints(s):
    """print() writes an int's digits itself (no str object): the text is str()'s, at the edges
    of a long long and past them, with bools and int subclasses as their own str()."""
    code = ("import enum\nclass E(enum.IntEnum):\n    A = 7\n"
            "v = (0, -5, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 10**30, True, E.A)\n"
            "print(*v, sep='|')\nprint('|'.join(map(str, v)))")
    res = run_cell(s.kc, code)
    assert res.status == "ok", res.describe()
    first, second = res.stdout.splitlines()
    want = "|".join(str(v) for v in (0, -5, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 10**30, True))
    assert first == second and first.startswith(want + "|"), res.stdout


def test_a_large_write_arrives_exactly(s):
    """Writes of 1 MiB and more go as bytes, escaped by the gateway (docs/channel.md "Raw stream
    texts"): every character arrives as written, quotes, backslashes, ANSI escapes and emoji
    too; NUL and invalid bytes become U+FFFD as in small writes; a character cut between two
    writes arrives whole; what was printed before and after stays in order."""
    code = ("import sys\n"
            "print('before')\n"
            "sys.stdout.write('\u00e9\u2713\U0001f600\"\\\\\x1b[1mx\\t\\n' * 150_000)\n"
            "sys.stdout.buffer.write(b'a\\x00\\xff' * 500_000 + b'\\xe2\\x9c')\n"
            "sys.stdout.buffer.write(b'\\x93 end\\n')\n"
            "print('after')\n")
    res = run_cell(s.kc, code, timeout=300)
    assert res.status == "ok", res.describe()
    want = ("before\n" + "\u00e9\u2713\U0001f600\"\\\x1b[1mx\t\n" * 150_000
            + "a\ufffd\ufffd" * 500_000 + "\u2713 end\nafter\n")
    got = res.stdout
    assert len(got) == len(want), (len(got), len(want))
    bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert bad is None, f"at {bad}: {got[bad - 10:bad + 10]!r} != {want[bad - 10:bad + 10]!r}"


# ------------------------------------------------------------------------------ ordering
def test_stdout_stderr_interleaving_at_flush_points(s):
    code = ("import sys\n"
            "for i in range(3):\n"
            "    print('out', i); sys.stdout.flush()\n"
            "    print('err', i, file=sys.stderr); sys.stderr.flush()\n")
    res = run_cell(s.kc, code)
    assert res.status == "ok", res.describe()
    want = [(n, f"{n[3:]} {i}\n") for i in range(3) for n in ("stdout", "stderr")]
    assert merged(res) == want


def test_stdout_stderr_interleaving_without_flushes(s):
    # Python-level writes keep their order across the two streams even between flush points.
    res = run_cell(s.kc, "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')\n"
                         "sys.stderr.write('d\\n')\nprint('e')")
    assert res.status == "ok", res.describe()
    assert merged(res) == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n"),
                           ("stderr", "d\n"), ("stdout", "e\n")]


@pytest.mark.parametrize("code", [
    "import os\nprint('a', flush=True)\nos.system('echo b')\nprint('c')",
    "import os\nprint('a')\nos.system('echo b')\nprint('c')",
    "import subprocess\nprint('a')\nsubprocess.run(['echo', 'b'])\nprint('c')",
    "import subprocess, sys\nprint('a')\nsubprocess.run(['echo', 'b'], stdout=sys.stdout)\n"
    "print('c')",
], ids=["system-flushed", "system", "subprocess", "subprocess-fileno"])
def test_a_child_process_output_between_two_prints(s, code):
    res = run_cell(s.kc, code)
    assert res.status == "ok", res.describe()
    assert res.stdout == "a\nb\nc\n", f"child output out of place: {streams(res)}"


def test_output_comes_before_the_error(s):
    res = run_cell(s.kc, "import os\nprint('py before')\nos.write(1, b'fd before\\n')\n"
                         "raise ValueError('boom')")
    assert res.status == "error"
    t = types(res)
    assert "error" in t, t
    err = t.index("error")
    before = "".join(m["content"]["text"] for m in res.msgs[:err] if m["msg_type"] == "stream")
    assert before == "py before\nfd before\n", f"stream text before the error: {before!r}"
    assert "stream" not in t[err:], t


def test_print_display_print_keep_their_order(s):
    res = run_cell(s.kc, "print('a')\ndisplay('x')\nprint('c')")
    assert res.status == "ok", res.describe()
    seq = [("display", m["content"]["data"]["text/plain"]) if m["msg_type"] == "display_data"
           else ("stream", m["content"]["text"]) for m in res.msgs
           if m["msg_type"] in ("stream", "display_data")]
    assert seq == [("stream", "a\n"), ("display", "'x'"), ("stream", "c\n")]


def test_a_slow_loop_streams(s):
    """The first line reaches the client before the cell's reply, in a message of its own."""
    kc = s.kc
    msg_id = kc.execute("import time\nfor i in range(5):\n    print(i)\n    time.sleep(0.5)")
    deadline = time.monotonic() + TIMEOUT
    first_stream = reply_at = None
    msgs = []
    idle = False
    while not (idle and reply_at is not None):
        assert time.monotonic() < deadline, f"no reply and idle: {msgs}"
        try:
            r = kc.get_shell_msg(timeout=0)
            if r["parent_header"].get("msg_id") == msg_id and reply_at is None:
                reply_at = time.monotonic()
        except queue.Empty:
            pass
        try:
            m = kc.get_iopub_msg(timeout=0.01)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        msgs.append(m)
        if m["msg_type"] == "stream" and first_stream is None:
            first_stream = (time.monotonic(), m["content"]["text"])
        idle = m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
    assert first_stream is not None, msgs
    assert first_stream[1] == "0\n", f"the first stream holds more than the first line: {msgs}"
    assert first_stream[0] < reply_at, "the first line only came with the end of the cell"
    text = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
    assert text == "0\n1\n2\n3\n4\n"


def test_input_flushes_the_output_before_its_prompt(s):
    kc = s.kc
    msg_id = kc.execute("print('before the question')\nv = input('q? ')\nprint('got', v)",
                        allow_stdin=True)
    req = kc.get_stdin_msg(timeout=TIMEOUT)
    assert req["msg_type"] == "input_request" and req["content"]["prompt"] == "q? "
    # The text printed before input() is on iopub while the kernel waits for the answer...
    seen, deadline = [], time.monotonic() + TIMEOUT
    while not any(m["msg_type"] == "stream" for m in seen):
        assert time.monotonic() < deadline, f"no stream before the answer: {seen}"
        try:
            m = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            seen.append(m)
    (st,) = [m for m in seen if m["msg_type"] == "stream"]
    assert st["content"]["text"] == "before the question\n"
    # ...and was sent before the prompt (the gateway stamps messages in the order it gets them).
    assert st["header"]["date"] <= req["header"]["date"], (st["header"], req["header"])
    kc.input("yes")
    res = collect(kc, msg_id)
    assert res.status == "ok", res.describe()
    assert res.stdout == "got yes\n"


def test_a_display_the_gateway_would_refuse_is_made_safe(s):
    """Display JSON goes from Python into its message unparsed: NUL and integers past 64 bits
    (which the gateway's parser refuses, stopping the kernel) are made safe first."""
    res = run_cell(s.kc, "display({'text/plain': 'a\\x00b', 'application/json': {'n': 10**30}},"
                         " raw=True)\nraise ValueError('nul \\x00 here')")
    assert res.status == "error" and res.content["evalue"] == "nul \ufffd here", res.describe()
    (d,) = [m for m in res.msgs if m["msg_type"] == "display_data"]
    assert d["content"]["data"] == {"text/plain": "a\ufffdb",
                                    "application/json": {"n": str(10**30)}}
    assert run_cell(s.kc, "1 + 1").results() == ["2"], "the kernel must still be there"


# ------------------------------------------------------------------------------ frames
def test_a_large_text_travels_in_few_frames(new_kernel):  # noqa: F811
    """On the kernel's channel (no gateway): 5 MB written at once is a few stream messages of at
    most 1 MiB of text each (the gateway handles one per reactor turn), in order; a loop of short
    prints is a few messages, not one per print."""
    k = new_kernel()
    res = k.execute("import sys\nsys.stdout.write('x\"' * 2_500_000 + '\\n')", timeout=120)
    assert_execute_ok(res)
    texts = [st.content["text"] for st in res.of_type("stream")]
    assert "".join(texts) == 'x"' * 2_500_000 + "\n"
    assert 5 <= len(texts) <= 12, len(texts)
    res = k.execute("for i in range(20000): print(i)", timeout=120)
    assert_execute_ok(res)
    assert res.stream_text() == "".join(f"{i}\n" for i in range(20000))
    assert len(res.of_type("stream")) < 200, len(res.of_type("stream"))
