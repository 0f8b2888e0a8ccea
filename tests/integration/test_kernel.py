"""cellvm-kernel over the channel: handshake, kernel_info, execute semantics, display, errors,
stop_on_error and the introspection requests (docs/channel.md, Jupyter messaging 5.3)."""
import os
import subprocess
import time
import uuid

import pytest

from kernel_driver import (assert_bracketed, assert_execute_ok, envelope_problems,
                           strip_ansi, kernel, new_kernel)  # noqa: F401  (fixtures)

DEBIAN_PY = subprocess.run(["/usr/bin/python3", "-c", "import platform;"
                            "print(platform.python_version())"],
                           capture_output=True, text=True, check=True).stdout.strip()


# ------------------------------------------------------------------------------ handshake
def test_hello_handshake(new_kernel, tmp_path):
    outdir = tmp_path / "hello-out"
    k = new_kernel(outdir=outdir)
    first = k.snapshot()[0]
    assert first.channel == "cellvm" and first.msg_type == "hello", \
        f"the kernel's first message must be its hello, got {first!r}"
    h = k.hello.content
    assert h.get("protocol") == "cellvm-channel"
    assert h.get("version") == 1
    assert h.get("role") == "kernel"
    assert h.get("pid") == k.pid
    assert h.get("implementation") == "cellvm-kernel"
    assert isinstance(h.get("implementation_version"), str) and h["implementation_version"]
    assert h.get("language_version") == DEBIAN_PY
    assert h.get("ipython") is True, "IPython is installed; the kernel must use it"
    assert h.get("max_frame") == 64 * 1024 * 1024
    assert h.get("outdir") in (str(outdir), os.path.realpath(outdir))
    assert isinstance(h.get("session"), str) and h["session"]
    assert k.hello.header.get("session") == h["session"], \
        "hello header.session must be the kernel session it announces"
    assert k.hello.parent == {}
    assert k.hello.header.get("msg_type") == "hello"


def test_kernel_sends_hello_unprompted_and_answers_every_driver_hello(new_kernel):
    # The kernel says hello when ready, before hearing from the driver ...
    k = new_kernel(send_hello=False)
    assert k.hello.content.get("role") == "kernel"
    hellos = lambda: [m for m in k.snapshot() if m.channel == "cellvm" and m.msg_type == "hello"]
    # ... and answers each driver hello with a fresh kernel hello, any number of times.
    for n in (2, 3):
        before = len(k.snapshot())
        k.send_hello()
        m = k.wait_for(lambda m: m.channel == "cellvm" and m.msg_type == "hello",
                       start=before, timeout=10, what=f"kernel hello #{n}")
        assert m.content.get("role") == "kernel"
        assert m.content.get("session") == k.hello.content["session"], "same process, same session"
        assert m.content.get("pid") == k.pid
        assert m.header["msg_id"] != k.hello.header["msg_id"], "a fresh hello, not a replay"
    # still serving, and exactly one hello per driver hello (plus the unprompted one)
    assert_bracketed(k.roundtrip("shell", "kernel_info_request"))
    time.sleep(0.3)
    assert len(hellos()) == 3, f"expected 3 kernel hellos, got {hellos()}"


def test_driver_hello_with_entropy_and_time_is_accepted(new_kernel):
    k = new_kernel()
    before = len(k.snapshot())
    k.send_hello(entropy="c2VjcmV0IGVudHJvcHkgYnl0ZXMgZm9yIHRoZSBwb29s", time=time.time())
    k.wait_for(lambda m: m.msg_type == "hello", start=before, what="hello after entropy")
    res = k.execute("import random; r = random.random(); print(0 <= r < 1)")
    assert_execute_ok(res)
    assert res.stream_text() == "True\n"


def test_hello_with_wrong_protocol_is_refused(new_kernel):
    k = new_kernel(send_hello=False)
    k.send(k.envelope("cellvm", "hello", {"protocol": "not-cellvm", "version": 1,
                                          "role": "driver"}))
    err = k.wait_for(lambda m: m.msg_type == "protocol_error", timeout=10,
                     what="protocol_error after a foreign hello")
    assert err.channel == "cellvm"
    assert isinstance(err.content.get("error"), str) and err.content["error"]
    assert err.content.get("fatal") is True
    assert k.wait_exit(10) == 3, "fatal protocol_error means exit status 3"


def test_hello_with_other_major_version_is_refused(new_kernel):
    k = new_kernel(send_hello=False)
    k.send(k.envelope("cellvm", "hello", {"protocol": "cellvm-channel", "version": 2,
                                          "role": "driver"}))
    err = k.wait_for(lambda m: m.msg_type == "protocol_error", timeout=10,
                     what="protocol_error after a version-2 hello")
    assert err.content.get("fatal") is True
    assert k.wait_exit(10) == 3


# ------------------------------------------------------------------------------ kernel_info
@pytest.mark.parametrize("channel", ["shell", "control"])
def test_kernel_info(kernel, channel):
    res = kernel.roundtrip(channel, "kernel_info_request")
    reply = assert_bracketed(res)
    c = reply.content
    assert c.get("status") == "ok"
    assert c.get("protocol_version") == "5.3"
    assert isinstance(c.get("implementation"), str) and c["implementation"]
    assert isinstance(c.get("implementation_version"), str)
    assert isinstance(c.get("banner"), str)
    li = c.get("language_info") or {}
    assert li.get("name") == "python"
    assert li.get("version") == DEBIAN_PY, f"language_info.version {li.get('version')!r}"
    assert li.get("file_extension") == ".py"
    assert li.get("mimetype") == "text/x-python"
    assert li.get("nbconvert_exporter") == "python"
    assert li.get("pygments_lexer") in ("ipython3", "python3", "python")
    for link in c.get("help_links", []):
        assert set(link) >= {"text", "url"}
    assert res.outputs == [], "kernel_info publishes nothing but busy/idle"


# ------------------------------------------------------------------------------ execute
def test_execute_result_and_counts(new_kernel):
    k = new_kernel()
    r1 = k.execute("40 + 2")
    c1 = assert_execute_ok(r1)
    assert c1["execution_count"] == 1, "the first stored cell is In [1]"
    (ei,) = r1.of_type("execute_input")
    assert ei.content["execution_count"] == 1
    (er,) = r1.of_type("execute_result")
    assert er.content["data"].get("text/plain") == "42"
    assert er.content["execution_count"] == 1
    assert isinstance(er.content.get("metadata"), dict)
    assert [m.msg_type for m in r1.msgs] == ["status", "execute_input", "execute_result",
                                             "execute_reply", "status"]

    r2 = k.execute("'no history'", store_history=False)
    assert_execute_ok(r2)
    assert r2.of_type("execute_result")[0].content["data"]["text/plain"] == "'no history'"

    r3 = k.execute("3")
    c3 = assert_execute_ok(r3)
    assert c3["execution_count"] == 2, "store_history=False must not advance the counter"
    assert r3.of_type("execute_input")[0].content["execution_count"] == 2
    assert r3.of_type("execute_result")[0].content["execution_count"] == 2

    r4 = k.execute("print('silent'); 99", silent=True)
    c4 = assert_execute_ok(r4, silent=True)
    assert [m.msg_type for m in r4.msgs] == ["status", "execute_reply", "status"], \
        f"silent publishes nothing but busy/idle: {r4}"
    assert isinstance(c4["execution_count"], int)

    r5 = k.execute("5")
    assert assert_execute_ok(r5)["execution_count"] == 3, "silent must not advance the counter"


def test_silent_still_runs_code(kernel):
    r = kernel.execute("silent_side_effect = 17", silent=True)
    assert_execute_ok(r, silent=True)
    r = kernel.execute("silent_side_effect + 1")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "18"


def test_silent_error_publishes_nothing(kernel):
    r = kernel.execute("1/0", silent=True)
    reply = assert_bracketed(r)
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "ZeroDivisionError"
    assert [m.msg_type for m in r.msgs] == ["status", "execute_reply", "status"], \
        f"silent: no execute_input and no error on iopub: {r}"


def test_persistence_across_cells(kernel):
    assert_execute_ok(kernel.execute("import math\npersist_x = 41\ndef persist_f(v):\n"
                                     "    return v * 2\nclass PersistC:\n    k = 'cls'\n"))
    r = kernel.execute("(persist_x + 1, persist_f(21), PersistC.k, math.floor(2.5))")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "(42, 42, 'cls', 2)"
    r = kernel.execute("__name__")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "'__main__'"


def test_last_expression_only_and_semicolon(kernel):
    r = kernel.execute("1\n2\n3")
    assert_execute_ok(r)
    ers = r.of_type("execute_result")
    assert [e.content["data"]["text/plain"] for e in ers] == ["3"]
    r = kernel.execute("7;")
    assert_execute_ok(r)
    assert r.of_type("execute_result") == [], "a trailing ; suppresses the result"
    r = kernel.execute("None")
    assert_execute_ok(r)
    assert r.of_type("execute_result") == []
    r = kernel.execute("pass")
    assert_execute_ok(r)
    assert r.outputs == []


def test_underscore_and_out(kernel):
    r = kernel.execute("6 * 7")
    n = assert_execute_ok(r)["execution_count"]
    r = kernel.execute(f"(_, Out[{n}])")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "(42, 42)"


def test_execute_input_code_is_byte_exact(kernel):
    code = "s = 'héllo ✓ \\t tab'  # ünïcode comment\r\nprint(len(s))\n\n\n"
    r = kernel.execute(code)
    assert_execute_ok(r)
    assert r.of_type("execute_input")[0].content["code"] == code
    assert r.stream_text() == "13\n"


def test_rich_execute_result(kernel):
    r = kernel.execute("from IPython.display import HTML\nHTML('<b>bold</b>')")
    assert_execute_ok(r)
    (er,) = r.of_type("execute_result")
    assert er.content["data"].get("text/html") == "<b>bold</b>"
    assert "text/plain" in er.content["data"]
    r = kernel.execute("class R:\n    def _repr_markdown_(self):\n        return '**md**'\nR()")
    assert_execute_ok(r)
    assert r.of_type("execute_result")[0].content["data"].get("text/markdown") == "**md**"
    r = kernel.execute("{'a': [1, 2]}")
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "{'a': [1, 2]}"


def test_user_expressions(kernel):
    assert_execute_ok(kernel.execute("ue_x = 41"))
    r = kernel.execute("ue_y = 1", user_expressions={"good": "ue_x + ue_y", "bad": "1/0"})
    c = assert_execute_ok(r)
    ue = c.get("user_expressions")
    assert set(ue) == {"good", "bad"}, ue
    assert ue["good"].get("status") == "ok"
    assert ue["good"].get("data", {}).get("text/plain") == "42"
    assert isinstance(ue["good"].get("metadata"), dict)
    assert ue["bad"].get("status") == "error"
    assert ue["bad"].get("ename") == "ZeroDivisionError"


def test_stream_stdout_and_stderr(kernel):
    r = kernel.execute("import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n"
                       "sys.stdout.write('héllo ✓\\n')")
    assert_execute_ok(r)
    assert r.stream_text("stdout").startswith("to out\nhéllo ✓\n")
    assert r.stream_text("stderr") == "to err\n"
    for m in r.of_type("stream"):
        assert m.content["name"] in ("stdout", "stderr")


def test_utf8_everywhere(kernel, tmp_path):
    """The kernel's Python must be a UTF-8 Python like /usr/bin/python3 under C.UTF-8 or any
    UTF-8 locale (PEP 538/540): printing, open() and file names must take non-ASCII text."""
    p = tmp_path / "données-✓.txt"
    r = kernel.execute("import sys, locale\n"
                       "print('héllo ✓ 日本')\n"
                       f"open({str(p)!r}, 'w').write('ünïcode ✓')\n"
                       "(sys.stdout.encoding.lower(), sys.getfilesystemencoding(),"
                       " locale.getpreferredencoding(False).lower())")
    assert_execute_ok(r)
    assert r.stream_text() == "héllo ✓ 日本\n"
    assert p.read_text(encoding="utf-8") == "ünïcode ✓"
    enc = r.of_type("execute_result")[0].content["data"]["text/plain"]
    assert enc == "('utf-8', 'utf-8', 'utf-8')", f"(stdout, fs, preferred) encodings: {enc}"


def test_large_output_arrives_whole(kernel):
    r = kernel.execute("print('x' * 3_000_000)\nprint('\\n'.join(str(i) for i in range(20000)))",
                       timeout=60)
    assert_execute_ok(r)
    out = r.stream_text()
    expect = "x" * 3_000_000 + "\n" + "\n".join(str(i) for i in range(20000)) + "\n"
    assert len(out) == len(expect) and out == expect


def test_display_data_after_stream(kernel):
    r = kernel.execute("from IPython.display import display, HTML\nprint('before')\n"
                       "display(HTML('<i>shown</i>'))\nprint('after')")
    assert_execute_ok(r)
    kinds = [(m.msg_type, m.content.get("text")) for m in r.outputs]
    (dd,) = r.of_type("display_data")
    assert dd.content["data"].get("text/html") == "<i>shown</i>"
    assert isinstance(dd.content.get("metadata"), dict)
    first_stream = r.of_type("stream")[0]
    assert first_stream.content["text"].startswith("before"), kinds
    assert first_stream.index < dd.index, f"print before display must arrive first: {kinds}"
    after = [m for m in r.of_type("stream") if "after" in m.content["text"]]
    assert after and after[0].index > dd.index, f"print after display must arrive after: {kinds}"


def test_display_id_and_update(kernel):
    r = kernel.execute("from IPython.display import display\n"
                       "h = display('first', display_id=True)\nh.update('second')")
    assert_execute_ok(r)
    (dd,) = r.of_type("display_data")
    (ud,) = r.of_type("update_display_data")
    did = dd.content.get("transient", {}).get("display_id")
    assert isinstance(did, str) and did
    assert dd.content["data"]["text/plain"] == "'first'"
    assert ud.content["transient"]["display_id"] == did
    assert ud.content["data"]["text/plain"] == "'second'"
    assert isinstance(ud.content.get("metadata"), dict)
    assert dd.index < ud.index
    # an update from a later cell carries the later cell as parent
    r2 = kernel.execute("h.update('third')")
    assert_execute_ok(r2)
    (ud2,) = r2.of_type("update_display_data")
    assert ud2.content["transient"]["display_id"] == did
    assert ud2.content["data"]["text/plain"] == "'third'"
    # display with an explicit id
    r3 = kernel.execute("display('x', display_id='my-id')\n"
                        "display('y', display_id='my-id', update=True)")
    assert_execute_ok(r3)
    assert r3.of_type("display_data")[0].content["transient"]["display_id"] == "my-id"
    assert r3.of_type("update_display_data")[0].content["transient"]["display_id"] == "my-id"


def test_clear_output(kernel):
    r = kernel.execute("from IPython.display import clear_output\nprint('gone')\n"
                       "clear_output(wait=True)\nprint('kept')\nclear_output()")
    assert_execute_ok(r)
    clears = r.of_type("clear_output")
    assert [c.content.get("wait") for c in clears] == [True, False]
    gone = [m for m in r.of_type("stream") if "gone" in m.content["text"]]
    kept = [m for m in r.of_type("stream") if "kept" in m.content["text"]]
    assert gone and kept
    assert gone[0].index < clears[0].index < kept[0].index < clears[1].index, r


# ------------------------------------------------------------------------------ errors
# Cells that raise on purpose use stop_on_error=False so that a stop_on_error bug shows up in
# the stop_on_error tests below, not here.
ERROR_CELL = """\
def inner_fn_for_tb(v):
    return {}[v]

def outer_fn_for_tb():
    return inner_fn_for_tb('missing-key-42')

outer_fn_for_tb()
"""


def test_error_with_full_traceback(kernel):
    r = kernel.execute(ERROR_CELL, stop_on_error=False)
    reply = assert_bracketed(r)
    c = reply.content
    assert c.get("status") == "error"
    assert c.get("ename") == "KeyError"
    assert c.get("evalue") == "'missing-key-42'"
    assert isinstance(c.get("execution_count"), int)
    (ei,) = r.of_type("execute_input")
    assert r.msgs[1] is ei
    assert [m.msg_type for m in r.outputs] == ["error"], \
        f"exactly one error output and nothing else (no stderr copy): {r}"
    err = r.of_type("error")[0].content
    assert err["ename"] == "KeyError" and err["evalue"] == "'missing-key-42'"
    tb = err["traceback"]
    assert isinstance(tb, list) and tb and all(isinstance(x, str) for x in tb)
    text = strip_ansi("\n".join(tb))
    for name in ("outer_fn_for_tb", "inner_fn_for_tb", "KeyError", "missing-key-42"):
        assert name in text, f"{name!r} missing from traceback:\n{text}"
    assert text.index("outer_fn_for_tb()") < text.index("inner_fn_for_tb('missing-key-42')")
    assert c.get("traceback") == tb, "execute_reply carries the same traceback"
    # kernel internals should not leak into the user's traceback
    assert "cellvm" not in text.lower() and "interactiveshell.py" not in text, text


def test_syntax_error(kernel):
    r = kernel.execute("x = (1,\ny = 2 +", stop_on_error=False)
    reply = assert_bracketed(r)
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "SyntaxError"
    errs = r.of_type("error")
    assert len(errs) == 1 and errs[0].content["ename"] == "SyntaxError"
    assert r.of_type("execute_input"), "a cell that fails to parse still has execute_input"


def test_error_counts_and_kernel_survives(kernel):
    r = kernel.execute("raise RuntimeError('first')", stop_on_error=False)
    n = r.reply.content["execution_count"]
    assert r.of_type("execute_input")[0].content["execution_count"] == n
    r2 = kernel.execute("'alive'")
    c2 = assert_execute_ok(r2)
    assert c2["execution_count"] == n + 1, "an erroring cell still uses its number"


def test_output_before_error(kernel):
    r = kernel.execute("import os, sys\nprint('py out')\nos.system('echo shell out')\n"
                       "print('py err', file=sys.stderr)\nraise ValueError('late')",
                       stop_on_error=False)
    assert r.reply.content["status"] == "error"
    (err,) = r.of_type("error")
    assert "py out\n" in r.stream_text() and "shell out\n" in r.stream_text()
    assert r.stream_text("stderr") == "py err\n"
    for s in r.of_type("stream"):
        assert s.index < err.index, f"stream after error: {r}"


def test_system_exit_does_not_kill_kernel(kernel):
    r = kernel.execute("import sys; sys.exit(3)", stop_on_error=False)
    reply = assert_bracketed(r)
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "SystemExit"
    assert kernel.alive()
    assert_execute_ok(kernel.execute("'still here'"))


# ------------------------------------------------------------------------------ stop_on_error
def _send_burst(k, codes, **kw):
    envs = [k.envelope("shell", "execute_request", k.execute_content(c, **kw)) for c in codes]
    for e in envs:
        k.sent[e["header"]["msg_id"]] = e
    k.send_bytes(b"".join(k.encode(e) for e in envs))     # one write: all queued at once
    return [e["header"]["msg_id"] for e in envs]


def test_stop_on_error_aborts_queued(kernel):
    ids = _send_burst(kernel, ["import time; time.sleep(0.3); 1/0", "print(1)", "print(2)"])
    res = [kernel.collect(i) for i in ids]
    first = res[0]
    assert assert_bracketed(first).content["status"] == "error"
    assert first.of_type("error")[0].content["ename"] == "ZeroDivisionError"
    for r in res[1:]:
        reply = assert_bracketed(r)
        assert reply.content.get("status") in ("error", "abort"), \
            f"aborted execute should reply status error (or abort), got {reply.content}"
        assert isinstance(reply.content.get("execution_count"), int), \
            "execute_reply always carries execution_count"
        assert r.of_type("execute_input") == [], f"an aborted request never runs: {r}"
        assert r.outputs == [], f"an aborted request publishes nothing: {r}"
    # in arrival order: each request's idle before the next one's busy
    for a, b in zip(res, res[1:]):
        assert a.msgs[-1].index < b.msgs[0].index
    # the abort ends with the queue: a later request runs normally
    r = kernel.execute("print(3)")
    assert_execute_ok(r)
    assert r.stream_text() == "3\n"


def test_execute_sent_after_error_reply_is_not_aborted(kernel):
    """stop_on_error aborts what was queued when the error happened, nothing sent later: a
    request sent once the failing cell's idle has arrived must run (tried several times, since
    a kernel that aborts "whatever is queued after idle" loses this race only sometimes)."""
    for i in range(80):
        r = kernel.execute("1/0")
        assert r.reply.content["status"] == "error"
        r2 = kernel.execute(f"print('ran {i}')")
        assert r2.reply.content.get("status") == "ok", \
            f"attempt {i}: a request sent after the error's idle was aborted: {r2.reply.content}"
        assert r2.stream_text() == f"ran {i}\n"


def test_stop_on_error_false_does_not_abort(kernel):
    ids = _send_burst(kernel, ["1/0", "print(1)"], stop_on_error=False)
    r0, r1 = [kernel.collect(i) for i in ids]
    assert r0.reply.content["status"] == "error"
    assert_execute_ok(r1)
    assert r1.stream_text() == "1\n"


def test_abort_only_aborts_executes_not_other_requests(kernel):
    envs = [kernel.envelope("shell", "execute_request", kernel.execute_content("1/0")),
            kernel.envelope("shell", "kernel_info_request", {}),
            kernel.envelope("shell", "execute_request", kernel.execute_content("print('x')"))]
    for e in envs:
        kernel.sent[e["header"]["msg_id"]] = e
    kernel.send_bytes(b"".join(kernel.encode(e) for e in envs))
    r0, r1, r2 = [kernel.collect(e["header"]["msg_id"]) for e in envs]
    assert r0.reply.content["status"] == "error"
    assert assert_bracketed(r1).content.get("status") == "ok", "kernel_info is never aborted"
    assert r2.reply.content["status"] in ("error", "abort")
    assert r2.of_type("execute_input") == []


# ------------------------------------------------------------------------------ introspection
def test_complete(kernel):
    r = kernel.roundtrip("shell", "complete_request", {"code": "zi", "cursor_pos": 2})
    c = assert_bracketed(r).content
    assert c.get("status") == "ok"
    assert "zip" in c.get("matches", []), c
    assert c.get("cursor_start") == 0 and c.get("cursor_end") == 2
    assert isinstance(c.get("metadata"), dict)
    assert r.outputs == []


def test_complete_attribute_and_namespace(kernel):
    assert_execute_ok(kernel.execute("compl_list = [1]\nñame_ünï = 3"))
    code = "x = 1\ncompl_list.ap"
    c = kernel.roundtrip("shell", "complete_request",
                         {"code": code, "cursor_pos": len(code)}).reply.content
    completed = {code[:c["cursor_start"]] + m + code[c["cursor_end"]:] for m in c["matches"]}
    assert "x = 1\ncompl_list.append" in completed, c
    # cursor positions are in unicode code points, not bytes
    code = "# é ✓\nñame_ü"
    c = kernel.roundtrip("shell", "complete_request",
                         {"code": code, "cursor_pos": len(code)}).reply.content
    assert c["cursor_end"] == len(code), f"cursor_end in code points expected {len(code)}: {c}"
    completed = {code[:c["cursor_start"]] + m + code[c["cursor_end"]:] for m in c["matches"]}
    assert "# é ✓\nñame_ünï" in completed, c


def test_inspect(kernel):
    r = kernel.roundtrip("shell", "inspect_request",
                         {"code": "zip", "cursor_pos": 3, "detail_level": 0})
    c = assert_bracketed(r).content
    assert c.get("status") == "ok" and c.get("found") is True
    assert "zip" in strip_ansi(c["data"].get("text/plain", "")), c
    assert isinstance(c.get("metadata"), dict)
    c = kernel.roundtrip("shell", "inspect_request",
                         {"code": "no_such_name_xyz", "cursor_pos": 5,
                          "detail_level": 0}).reply.content
    assert c.get("status") == "ok" and c.get("found") is False


@pytest.mark.parametrize("code,status", [
    ("1", "complete"),
    ("print('hello, world')", "complete"),
    ("def f(x):\n  return x*2\n\n\n", "complete"),
    ("print('''hello", "incomplete"),
    ("def f(x):\n  x*2", "incomplete"),
    ("for i in range(3):", "incomplete"),
    ("import = 7q", "invalid"),
])
def test_is_complete(kernel, code, status):
    r = kernel.roundtrip("shell", "is_complete_request", {"code": code})
    c = assert_bracketed(r).content
    assert c.get("status") == status, f"{code!r}: {c}"
    if status == "incomplete":
        assert isinstance(c.get("indent"), str)
        if code.endswith(":"):
            assert c["indent"] == "    ", f"indent after a colon: {c}"
    else:
        assert "indent" not in c or c["indent"] == ""


def test_history_tail(new_kernel):
    k = new_kernel()
    codes = ["hist_a = 1", "hist_b = hist_a + 1", "hist_b * 10"]
    for code in codes:
        assert_execute_ok(k.execute(code))
    assert_execute_ok(k.execute("hist_hidden = 0", store_history=False))
    r = k.roundtrip("shell", "history_request",
                    {"output": False, "raw": True, "hist_access_type": "tail", "n": 3})
    c = assert_bracketed(r).content
    assert c.get("status") == "ok"
    h = c.get("history")
    assert isinstance(h, list) and len(h) == 3, c
    assert all(isinstance(e, list) and len(e) == 3 for e in h), h
    assert [e[2] for e in h] == codes, f"tail must be the last stored inputs, in order: {h}"
    assert [e[1] for e in h] == [1, 2, 3], h
    assert len({e[0] for e in h}) == 1
    r = k.roundtrip("shell", "history_request",
                    {"output": True, "raw": True, "hist_access_type": "tail", "n": 1})
    (e,) = r.reply.content["history"]
    assert isinstance(e[2], list) and len(e[2]) == 2 and e[2][0] == "hist_b * 10", \
        f"output=True gives [input, output]: {e}"
    assert e[2][1] in ("20", None), e


def test_history_search_and_range(new_kernel):
    k = new_kernel()
    tag = "s" + uuid.uuid4().hex[:10]    # history may persist across kernels: search a fresh name
    for code in [f"{tag}_1 = 1", "other = 2", f"{tag}_2 = 3", f"{tag}_1 = 1"]:
        assert_execute_ok(k.execute(code))
    c = k.roundtrip("shell", "history_request",
                    {"output": False, "raw": True, "hist_access_type": "search",
                     "pattern": f"{tag}_*", "unique": True, "n": 10}).reply.content
    assert sorted(e[2] for e in c["history"]) == [f"{tag}_1 = 1", f"{tag}_2 = 3"], c
    c = k.roundtrip("shell", "history_request",
                    {"output": False, "raw": True, "hist_access_type": "range",
                     "session": 0, "start": 2, "stop": 3}).reply.content
    assert [e[2] for e in c["history"]] == ["other = 2"], c


def test_comm_info(kernel):
    r = kernel.roundtrip("shell", "comm_info_request", {})
    c = assert_bracketed(r).content
    assert c.get("status") == "ok" and c.get("comms") == {}
    r = kernel.roundtrip("shell", "comm_info_request", {"target_name": "jupyter.widget"})
    assert assert_bracketed(r).content.get("comms") == {}


def test_comm_open_unknown_target_is_closed(kernel):
    """comm_open has no reply; with no such target the kernel answers comm_close on iopub,
    bracketed by busy/idle like every shell message (as ipykernel does)."""
    env = kernel.envelope("shell", "comm_open", {"comm_id": "c0ffee", "target_name": "no.such",
                                                  "data": {}})
    kernel.send(env)
    mid = env["header"]["msg_id"]
    kernel.wait_for(lambda m: m.parent_id == mid and m.content.get("execution_state") == "idle",
                    timeout=10, what="idle after comm_open")
    msgs = kernel.for_parent(mid)
    assert [m.msg_type for m in msgs] == ["status", "comm_close", "status"], msgs
    assert msgs[1].channel == "iopub" and msgs[1].content.get("comm_id") == "c0ffee"
    assert all(m.parent == env["header"] for m in msgs)
    # messages for a comm that does not exist are ignored, and nothing breaks
    env = kernel.envelope("shell", "comm_msg", {"comm_id": "c0ffee", "data": {"x": 1}})
    kernel.send(env)
    kernel.wait_for(lambda m: m.parent_id == env["header"]["msg_id"]
                    and m.content.get("execution_state") == "idle", timeout=10,
                    what="idle after comm_msg")
    assert [m.msg_type for m in kernel.for_parent(env["header"]["msg_id"])] == ["status",
                                                                                "status"]
    assert_execute_ok(kernel.execute("'fine'"))


def test_magics_and_shell_escape(kernel):
    r = kernel.execute("!echo bang-escape")
    assert_execute_ok(r)
    # IPython runs ! commands under a pty (pexpect), so lines may end in \r\n as in ipykernel
    assert r.stream_text().replace("\r\n", "\n") == "bang-escape\n"
    r = kernel.execute("%%capture captured\nprint('hidden')")
    assert_execute_ok(r)
    assert r.stream_text() == ""
    r = kernel.execute("captured.stdout")
    assert r.of_type("execute_result")[0].content["data"]["text/plain"] == "'hidden\\n'"


# ------------------------------------------------------------------------------ ordering
def test_shell_requests_run_in_order_one_at_a_time(kernel):
    ids = _send_burst(kernel, ["import time; time.sleep(0.3); print('A')", "print('B')",
                               "print('C')"])
    res = [kernel.collect(i) for i in ids]
    for r in res:
        assert_execute_ok(r)
    assert [r.stream_text() for r in res] == ["A\n", "B\n", "C\n"]
    for a, b in zip(res, res[1:]):
        assert a.msgs[-1].index < b.msgs[0].index, "a request starts after the previous idle"


def test_control_answered_while_cell_runs(kernel):
    cell = kernel.send_execute("import time; time.sleep(2); 'done'")
    kernel.wait_for(lambda m: m.parent_id == cell and m.msg_type == "execute_input",
                    what="execute_input of the sleeping cell")
    t0 = time.monotonic()
    info = kernel.roundtrip("control", "kernel_info_request", timeout=10)
    assert_bracketed(info)
    assert info.reply.t - t0 < 0.5, "control must not queue behind a running cell"
    r = kernel.collect(cell)
    assert_execute_ok(r)
    assert info.reply.index < r.reply.index


def test_envelopes_of_everything_sent(kernel):
    """Runs last in this module: every message this kernel sent so far has a valid envelope,
    a fresh msg_id, the kernel's session, username cellvm, a UTC date with microseconds and Z,
    version 5.3, and a parent_header that is exactly the request we sent."""
    assert_execute_ok(kernel.execute("print('envelope check')"))
    probs = envelope_problems(kernel)
    assert not probs, "\n".join(probs[:30])
