"""cellvm-kernel I/O: streaming while a cell runs, fd-level capture, stdin (input/getpass),
interrupt, matplotlib figures and output_files."""
import hashlib
import os
import struct
import time

import pytest

from kernel_driver import (assert_bracketed, assert_execute_ok, assert_only_stream_before,
                           b64_png, kernel, new_kernel)  # noqa: F401  (fixtures)
from sessions import TIMING_SCALE


def _no_late_messages(k, res, wait=0.3):
    time.sleep(wait)
    late = [m for m in k.for_parent(res.msg_id) if m.index > res.msgs[-1].index]
    assert not late, f"messages after idle are lost by every Jupyter client: {late}"


# ------------------------------------------------------------------------------ streaming
def test_streaming_delivers_output_before_cell_ends(kernel):
    res = kernel.execute("import time\nprint('first line')\ntime.sleep(1)\nprint('second line')")
    assert_execute_ok(res)
    streams = res.of_type("stream")
    assert streams, res
    first = streams[0]
    assert first.content["text"] == "first line\n", \
        f"first stream must hold only the first line: {streams}"
    ei = res.of_type("execute_input")[0]
    assert res.reply.t - first.t > 0.7, \
        f"first line arrived {res.reply.t - first.t:.3f}s before the reply; it must not wait " \
        "for the sleep to end"
    assert first.t - ei.t < 0.2, f"first line took {first.t - ei.t:.3f}s (spec: 50 ms)"
    assert res.stream_text() == "first line\nsecond line\n"
    _no_late_messages(kernel, res)


def test_streaming_stderr_and_fd_level_while_running(kernel):
    res = kernel.execute("import os, sys, time\nprint('err now', file=sys.stderr)\n"
                         "os.write(1, b'fd now\\n')\ntime.sleep(1)")
    assert_execute_ok(res)
    err = [m for m in res.of_type("stream") if m.content["name"] == "stderr"]
    fd = [m for m in res.of_type("stream") if "fd now" in m.content["text"]]
    assert err and fd, res
    assert res.reply.t - err[0].t > 0.7, "stderr must stream while the cell runs"
    assert res.reply.t - fd[0].t > 0.7, "fd-level output must stream while the cell runs"


def test_fd_level_capture(kernel):
    code = ("import os, subprocess, sys\n"
            "os.write(1, b'raw fd one\\n')\n"
            "os.write(2, b'raw fd two\\n')\n"
            "os.system('echo from-system')\n"
            "subprocess.run(['echo', 'from-subprocess'])\n"
            "subprocess.run(['sh', '-c', 'echo sub-err >&2'])\n"
            "import ctypes; libc = ctypes.CDLL(None)\n"
            "libc.puts(b'from-libc-puts'); libc.fflush(None)\n"
            "'tail-result'\n")
    res = kernel.execute(code)
    assert_execute_ok(res)
    out, err = res.stream_text("stdout"), res.stream_text("stderr")
    for line in ("raw fd one\n", "from-system\n", "from-subprocess\n", "from-libc-puts\n"):
        assert line in out, f"{line!r} missing from stdout stream {out!r}"
    for line in ("raw fd two\n", "sub-err\n"):
        assert line in err, f"{line!r} missing from stderr stream {err!r}"
    assert "raw fd two" not in out and "from-system" not in err
    assert_only_stream_before(res, {"execute_result", "display_data", "error"})
    assert res.of_type("execute_result")[0].content["data"]["text/plain"] == "'tail-result'"
    _no_late_messages(kernel, res)


def test_fd_output_of_one_cell_stays_in_that_cell(kernel):
    r1 = kernel.execute("import os\nos.system('echo cell-one-out')")
    r2 = kernel.execute("print('cell two')")
    assert "cell-one-out\n" in r1.stream_text()
    assert r2.stream_text() == "cell two\n", "no leftovers from the previous cell"


def test_fd_output_invalid_utf8_does_not_break_channel(kernel):
    res = kernel.execute("import os\nos.write(1, b'bad \\xff\\xfe bytes\\n')\nprint('ok after')")
    assert_execute_ok(res)
    out = res.stream_text()
    assert "bad " in out and "bytes\n" in out and "ok after\n" in out
    assert kernel.bad_frames == [], kernel.bad_frames


def test_fd_output_split_utf8_sequence(kernel):
    # a multi-byte character split across two raw writes must come out whole
    res = kernel.execute("import os, time\nb = 'é✓'.encode()\nos.write(1, b[:1])\n"
                         "time.sleep(0.2)\nos.write(1, b[1:] + b'\\n')")
    assert_execute_ok(res)
    assert res.stream_text() == "é✓\n"


def test_print_then_display_ordering_across_fd_and_python(kernel):
    res = kernel.execute("import os\nfrom IPython.display import display, Markdown\n"
                         "os.system('echo shell-before')\nprint('py-before')\n"
                         "display(Markdown('*md*'))")
    assert_execute_ok(res)
    (dd,) = res.of_type("display_data")
    text_before = "".join(m.content["text"] for m in res.of_type("stream") if m.index < dd.index)
    assert "shell-before\n" in text_before and "py-before\n" in text_before, res


def test_print_without_newline_flushes(kernel):
    res = kernel.execute("import time\nprint('no newline', end='')\ntime.sleep(0.8)")
    assert_execute_ok(res)
    (s,) = res.of_type("stream")
    assert s.content["text"] == "no newline"
    assert res.reply.t - s.t > 0.5, "partial lines stream too, not only at cell end"


# ------------------------------------------------------------------------------ stdin
def test_input_roundtrip(kernel):
    mid = kernel.send_execute("name = input('Your name: ')\nprint('hello', len(name))",
                              allow_stdin=True)
    req = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                          timeout=10, what="input_request")
    assert req.channel == "stdin"
    assert req.content.get("prompt") == "Your name: "
    assert req.content.get("password") is False
    assert req.parent == kernel.sent[mid]["header"]
    kernel.reply_to_input(req, "Ada ✓")
    res = kernel.collect(mid)
    assert_execute_ok(res)
    assert res.stream_text() == "hello 5\n"
    assert req.index < res.reply.index
    r = kernel.execute("name")
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "'Ada ✓'"


def test_input_prompt_flushes_pending_output_first(kernel):
    mid = kernel.send_execute("print('before the question')\nv = input()", allow_stdin=True)
    req = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                          timeout=10, what="input_request")
    streams = [m for m in kernel.for_parent(mid) if m.msg_type == "stream"]
    assert streams and streams[0].index < req.index, "pending output comes before the prompt"
    assert req.content.get("prompt") == ""
    kernel.reply_to_input(req, "")
    assert_execute_ok(kernel.collect(mid))


def test_getpass_is_password(kernel):
    mid = kernel.send_execute("import getpass\npw = getpass.getpass('Secret: ')\nprint(len(pw))",
                              allow_stdin=True)
    req = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                          timeout=10, what="input_request for getpass")
    assert req.content.get("prompt") == "Secret: "
    assert req.content.get("password") is True
    kernel.reply_to_input(req, "hunter2")
    res = kernel.collect(mid)
    assert_execute_ok(res)
    assert res.stream_text() == "7\n"
    assert "hunter2" not in res.stream_text()


def test_two_inputs_in_one_cell(kernel):
    mid = kernel.send_execute("a = input('a? ')\nb = input('b? ')\nprint(a + b)", allow_stdin=True)
    r1 = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                         timeout=10, what="first input_request")
    kernel.reply_to_input(r1, "12")
    r2 = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                         start=r1.index + 1, timeout=10, what="second input_request")
    assert r2.content["prompt"] == "b? "
    kernel.reply_to_input(r2, "34")
    res = kernel.collect(mid)
    assert res.stream_text() == "1234\n"


def test_input_without_allow_stdin_raises(kernel):
    res = kernel.execute("input('never asked: ')", allow_stdin=False, timeout=10,
                         stop_on_error=False)
    reply = assert_bracketed(res)
    assert res.stdin == [], "allow_stdin=False: the kernel must not send input_request"
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "StdinNotImplementedError", reply.content
    (err,) = res.of_type("error")
    assert err.content["ename"] == "StdinNotImplementedError"
    # ipykernel's words exactly (IPython.core.error's class): tools match on them.
    assert err.content["evalue"] == ("raw_input was called, but this frontend does not "
                                     "support input requests."), err.content
    res = kernel.execute("import getpass; getpass.getpass()", allow_stdin=False, timeout=10,
                         stop_on_error=False)
    assert res.reply.content.get("ename") == "StdinNotImplementedError"
    assert res.reply.content.get("evalue") == ("getpass was called, but this frontend does "
                                               "not support input requests."), res.reply.content
    assert res.stdin == []


def test_stale_input_reply_is_ignored(kernel):
    env = kernel.envelope("stdin", "input_reply", {"value": "nobody asked"},
                          parent=kernel.make_header("input_request"))
    kernel.send(env)
    res = kernel.execute("'fine'")
    assert_execute_ok(res)
    # and a stale reply must not satisfy a later input()
    mid = kernel.send_execute("late = input('q: ')", allow_stdin=True)
    req = kernel.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                          timeout=10, what="input_request")
    kernel.reply_to_input(req, "the real answer")
    assert_execute_ok(kernel.collect(mid))
    r = kernel.execute("late")
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "'the real answer'"


# ------------------------------------------------------------------------------ interrupt
def _interrupt_running(k, code):
    # stop_on_error=False: an abort bug must not pass for an interrupt bug (tested elsewhere)
    mid = k.send_execute(code, stop_on_error=False)
    k.wait_for(lambda m: m.parent_id == mid and m.msg_type == "execute_input",
               what="execute_input")
    time.sleep(0.5)      # let it get into the loop / sleep
    t0 = time.monotonic()
    ir = k.roundtrip("control", "interrupt_request", {}, timeout=10)
    res = k.collect(mid, timeout=10)
    return ir, res, t0


@pytest.mark.parametrize("code", ["import time\ntime.sleep(100)", "while True:\n    pass"],
                         ids=["sleep", "busy-loop"])
def test_interrupt_stops_cell_within_1s(new_kernel, code):
    k = new_kernel()
    assert_execute_ok(k.execute("kept_state = 'still here'"))
    ir, res, t0 = _interrupt_running(k, code)
    assert assert_bracketed(ir).content.get("status") == "ok"
    reply = assert_bracketed(res)
    assert res.reply.t - t0 < 1.0 * TIMING_SCALE, f"cell stopped {res.reply.t - t0:.2f}s after the interrupt"
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "KeyboardInterrupt"
    (err,) = res.of_type("error")
    assert err.content["ename"] == "KeyboardInterrupt"
    r = k.execute("kept_state")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "'still here'"


def test_interrupt_subprocess_cell(new_kernel):
    k = new_kernel()
    ir, res, t0 = _interrupt_running(k, "import subprocess\nsubprocess.run(['sleep', '100'])")
    assert res.reply.t - t0 < 1.5 * TIMING_SCALE, f"cell stopped {res.reply.t - t0:.2f}s after the interrupt"
    assert res.reply.content.get("ename") == "KeyboardInterrupt"
    assert_execute_ok(k.execute("1"))


def test_interrupt_while_waiting_for_input(new_kernel):
    k = new_kernel()
    mid = k.send_execute("input('waiting: ')", allow_stdin=True, stop_on_error=False)
    k.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request", timeout=10,
               what="input_request")
    t0 = time.monotonic()
    assert_bracketed(k.roundtrip("control", "interrupt_request", {}, timeout=10))
    res = k.collect(mid, timeout=10)
    assert res.reply.t - t0 < 1.0
    assert res.reply.content.get("ename") == "KeyboardInterrupt"
    assert_execute_ok(k.execute("'ok'"))


def test_interrupt_idle_kernel_is_harmless(new_kernel):
    k = new_kernel()
    assert_execute_ok(k.execute("idle_state = 5"))
    ir = k.roundtrip("control", "interrupt_request", {}, timeout=10)
    assert assert_bracketed(ir).content.get("status") == "ok"
    assert ir.outputs == []
    time.sleep(0.3)
    # no KeyboardInterrupt is left pending for the next cell
    res = k.execute("import time\ntime.sleep(0.5)\nidle_state * 2")
    assert_execute_ok(res)
    assert res.of_type("execute_result")[0].content["data"]["text/plain"] == "10"
    ir = k.roundtrip("control", "interrupt_request", {}, timeout=10)
    ir = k.roundtrip("control", "interrupt_request", {}, timeout=10)
    assert_execute_ok(k.execute("sum(range(10**6))"))


def test_interrupt_then_queued_cell_runs(new_kernel):
    k = new_kernel()
    a = k.send_execute("import time\ntime.sleep(100)", stop_on_error=False)
    b = k.send_execute("print('queued ran')")
    k.wait_for(lambda m: m.parent_id == a and m.msg_type == "execute_input", what="exec input")
    time.sleep(0.3)
    k.roundtrip("control", "interrupt_request", {}, timeout=10)
    ra, rb = k.collect(a, timeout=10), k.collect(b, timeout=10)
    assert ra.reply.content["ename"] == "KeyboardInterrupt"
    # the interrupted request had stop_on_error=False, so the queued one runs
    assert_execute_ok(rb)
    assert rb.stream_text() == "queued ran\n"
    assert_execute_ok(k.execute("'after'"))


# ------------------------------------------------------------------------------ matplotlib
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(png):
    assert png[:8] == PNG_MAGIC, f"not a PNG: {png[:16]!r}"
    assert png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def test_matplotlib_figure_without_show(kernel):
    res = kernel.execute("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                         "_ = ax.plot([1, 2, 3], [1, 4, 9])\n_ = ax.set_title('squares')",
                         timeout=60)
    assert_execute_ok(res)
    dds = [m for m in res.of_type("display_data") if "image/png" in m.content["data"]]
    assert len(dds) == 1, f"expected exactly one figure: {res}"
    png = b64_png(dds[0].content["data"]["image/png"])
    w, h = _png_size(png)
    assert w > 100 and h > 100
    assert "text/plain" in dds[0].content["data"]
    assert dds[0].index < res.reply.index
    # the figure was shown and closed: the next cell shows nothing
    r2 = kernel.execute("1")
    assert not r2.of_type("display_data"), "a figure must be displayed once, not every cell"
    r3 = kernel.execute("import matplotlib\nmatplotlib.get_backend()")
    backend = r3.of_type("execute_result")[0].content["data"]["text/plain"]
    assert "agg" in backend.lower() or "inline" in backend.lower(), backend


def test_matplotlib_show_gives_one_image_per_figure(kernel):
    res = kernel.execute("import matplotlib.pyplot as plt\n"
                         "plt.figure(); plt.plot([1, 2]); plt.show()\n"
                         "plt.figure(); plt.bar(['a', 'b'], [3, 4])\n", timeout=60)
    assert_execute_ok(res)
    pngs = [m for m in res.of_type("display_data") if "image/png" in m.content["data"]]
    assert len(pngs) == 2, f"two figures, two images (show() must not duplicate): {res}"
    for m in pngs:
        _png_size(b64_png(m.content["data"]["image/png"]))


# ------------------------------------------------------------------------------ output_files
def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _by_path(out_files, outdir):
    """Map of path relative to outdir -> entry. The spec does not say whether `path` is absolute
    or relative to the output directory, so both are accepted."""
    got = {}
    real = os.path.realpath(outdir)
    for e in out_files:
        assert set(e) >= {"path", "size", "mime", "sha256"}, e
        p = e["path"]
        if os.path.isabs(p):
            rp = os.path.realpath(p) if not os.path.islink(p) else p
            for base in (str(outdir), real):
                if rp.startswith(base + os.sep):
                    p = os.path.relpath(rp, base)
                    break
            else:
                raise AssertionError(f"output file {p} is outside {outdir}")
        assert not p.startswith(".."), e
        assert p not in got, f"listed twice: {e}"
        got[p] = e
    return got


@pytest.fixture
def outk(new_kernel, tmp_path):
    outdir = tmp_path / "out-files"
    outdir.mkdir()
    (outdir / "preexisting.txt").write_text("was here before the kernel\n")
    k = new_kernel(outdir=outdir)
    k.outdir_path = outdir
    return k


def test_outdir_env_and_creation(new_kernel, tmp_path):
    outdir = tmp_path / "not" / "yet" / "there"
    k = new_kernel(outdir=outdir)
    res = k.execute("import os\nos.environ['CELLVM_OUTDIR']")
    assert_execute_ok(res)
    val = eval(res.of_type("execute_result")[0].content["data"]["text/plain"])
    assert os.path.realpath(val) == os.path.realpath(outdir)
    assert outdir.is_dir(), "the kernel creates its output directory"
    r = k.execute("import subprocess\n"
                  "print(subprocess.run(['sh', '-c', 'echo $CELLVM_OUTDIR'],"
                  " capture_output=True, text=True).stdout, end='')")
    assert os.path.realpath(r.stream_text().strip()) == os.path.realpath(outdir), \
        "child processes inherit CELLVM_OUTDIR"


def test_output_files_listed_with_hash_size_mime(outk, tmp_path):
    k, outdir = outk, outk.outdir_path
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("outside content\n")
    outside_dir = tmp_path / "outside-dir"
    outside_dir.mkdir()
    (outside_dir / "inner.txt").write_text("inner\n")
    code = f"""
import os
od = os.environ['CELLVM_OUTDIR']
with open(os.path.join(od, 'result.csv'), 'w') as f:
    f.write('a,b\\n1,2\\n')
os.makedirs(os.path.join(od, 'sub', 'deeper'), exist_ok=True)
with open(os.path.join(od, 'sub', 'deeper', 'blob.bin'), 'wb') as f:
    f.write(bytes(range(256)) * 40)
with open(os.path.join(od, 'sub', 'note.txt'), 'wb') as f:
    f.write('héllo\\n'.encode('utf-8'))
with open(os.path.join(od, 'empty.json'), 'w') as f:
    pass
os.symlink({str(outside)!r}, os.path.join(od, 'link-to-file.txt'))
os.symlink({str(outside_dir)!r}, os.path.join(od, 'link-to-dir'))
"""
    res = k.execute(code)
    c = assert_execute_ok(res)
    assert "output_files" in c, f"execute_reply must carry output_files: {c}"
    got = _by_path(c["output_files"], outdir)
    want = {
        "result.csv": b"a,b\n1,2\n",
        "sub/deeper/blob.bin": bytes(range(256)) * 40,
        "sub/note.txt": "héllo\n".encode(),
        "empty.json": b"",
    }
    for rel, data in want.items():
        assert rel in got, f"{rel} missing from output_files {sorted(got)}"
        assert got[rel]["size"] == len(data), got[rel]
        assert got[rel]["sha256"] == _sha(data), got[rel]
        assert isinstance(got[rel]["mime"], str) and "/" in got[rel]["mime"]
    assert got["result.csv"]["mime"] == "text/csv"
    assert got["sub/note.txt"]["mime"] == "text/plain"
    assert got["empty.json"]["mime"] == "application/json"
    assert "preexisting.txt" not in got, "files not touched by the cell are not listed"
    # symlinks are not followed: nothing from the linked directory, and never the target's bytes
    assert not any(p.startswith("link-to-dir/") for p in got), sorted(got)
    outside_sha = _sha(outside.read_bytes())
    for e in got.values():
        assert e["sha256"] != outside_sha, f"a symlink was followed: {e}"
    assert set(got) <= set(want) | {"link-to-file.txt", "link-to-dir"}, sorted(got)
    assert not any(p.endswith("/") or p in ("sub", "sub/deeper") for p in got), \
        "directories are walked, not listed"


def test_output_files_only_this_cell(outk):
    k, outdir = outk, outk.outdir_path
    c1 = assert_execute_ok(k.execute(
        "import os\nod = os.environ['CELLVM_OUTDIR']\n"
        "open(os.path.join(od, 'one.txt'), 'w').write('1')\n"
        "open(os.path.join(od, 'two.txt'), 'w').write('2')"))
    assert set(_by_path(c1["output_files"], outdir)) == {"one.txt", "two.txt"}
    c2 = assert_execute_ok(k.execute("x = 1"))
    assert c2.get("output_files") == [], f"a cell without writes lists none (key present): {c2}"
    # modify one file immediately (same second as its creation): listed with the new hash
    c3 = assert_execute_ok(k.execute("open(os.path.join(od, 'one.txt'), 'w').write('changed')"))
    got = _by_path(c3["output_files"], outdir)
    assert set(got) == {"one.txt"}, got
    assert got["one.txt"]["sha256"] == _sha(b"changed") and got["one.txt"]["size"] == 7
    # a same-size rewrite right away (same second, same size) is still seen
    c4 = assert_execute_ok(k.execute("open(os.path.join(od, 'two.txt'), 'w').write('3')"))
    got = _by_path(c4["output_files"], outdir)
    assert set(got) == {"two.txt"} and got["two.txt"]["sha256"] == _sha(b"3"), got
    # deleting a file does not list it
    c5 = assert_execute_ok(k.execute("os.remove(os.path.join(od, 'two.txt'))"))
    assert c5.get("output_files", []) == []


def test_output_files_on_error_and_from_subprocess(outk):
    k, outdir = outk, outk.outdir_path
    r = k.execute("import os, subprocess\nod = os.environ['CELLVM_OUTDIR']\n"
                  "subprocess.run(['sh', '-c', 'printf abc > \"$CELLVM_OUTDIR/from-sh.txt\"'])\n"
                  "raise ValueError('after writing')", stop_on_error=False)
    assert r.reply.content["status"] == "error"
    got = _by_path(r.reply.content.get("output_files", []), outdir)
    assert set(got) == {"from-sh.txt"}, \
        f"files written by a failing cell are still reported: {r.reply.content}"
    assert got["from-sh.txt"]["sha256"] == _sha(b"abc")


def test_output_files_png_mime(outk):
    k, outdir = outk, outk.outdir_path
    c = assert_execute_ok(k.execute(
        "import os, matplotlib.pyplot as plt\n"
        "fig = plt.figure(); plt.plot([1, 2])\n"
        "fig.savefig(os.path.join(os.environ['CELLVM_OUTDIR'], 'chart.png'))\n"
        "plt.close(fig)", timeout=60))
    got = _by_path(c["output_files"], outdir)
    assert got["chart.png"]["mime"] == "image/png"
    data = (outdir / "chart.png").read_bytes()
    assert data[:8] == PNG_MAGIC
    assert got["chart.png"]["sha256"] == _sha(data) and got["chart.png"]["size"] == len(data)


def test_output_files_capped(outk):
    k = outk
    c = assert_execute_ok(k.execute(
        "import os\nod = os.environ['CELLVM_OUTDIR']\nos.makedirs(os.path.join(od, 'many'))\n"
        "for i in range(1500):\n"
        "    open(os.path.join(od, 'many', f'f{i:04}.txt'), 'w').write(str(i))", timeout=60))
    files = c["output_files"]
    assert 0 < len(files) < 1500, f"the list is capped, got {len(files)} entries"
    flags = {k2: v for k2, v in c.items() if "truncat" in k2.lower()}
    assert flags and any(v is True for v in flags.values()), \
        f"a truncated list must say so with a flag in execute_reply, got keys {sorted(c)}"
    c2 = assert_execute_ok(k.execute("'nothing written'"))
    assert not any(v is True for k2, v in c2.items() if "truncat" in k2.lower())


# ------------------------------------------------------------------------------ fork
def test_a_forked_child_never_writes_the_channel(new_kernel):
    """A cell's fork() child finishes the cell too: it must not send a second
    reply or idle into the stream (frames would interleave), and must exit."""
    k = new_kernel()
    code = ("import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
            "else:\n    os.waitpid(pid, 0)\n    print('parent')\n")
    res = k.execute(code)
    assert_execute_ok(res)
    text = res.stream_text()
    assert "child" in text and "parent" in text, res
    time.sleep(0.5)
    replies = [m for m in k.for_parent(res.msg_id) if m.msg_type == "execute_reply"]
    assert len(replies) == 1, replies
    # Every fork in a loop, then the kernel still answers in order.
    res = k.execute("import os\nkids = [os.fork() for _ in range(3)]\n"
                    "[os.waitpid(p, 0) for p in kids if p > 0]\nlen(kids)")
    assert_execute_ok(res)
    time.sleep(0.5)
    assert len([m for m in k.for_parent(res.msg_id) if m.msg_type == "execute_reply"]) == 1
    res = k.execute("print('still here')")
    assert_execute_ok(res)
    assert res.stream_text() == "still here\n"
