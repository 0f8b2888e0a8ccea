"""cellvm-kernel without IPython (CELLVM_NO_IPYTHON=1): the plain CPython shell that
docs/kernel.md promises still displays results, streams, shows tracebacks, completes, reads
input and plots."""
import os
import time

import pytest

from kernel_driver import (KernelDriver, assert_bracketed, assert_execute_ok, b64_png,
                           envelope_problems, strip_ansi)


@pytest.fixture(scope="module")
def plain(kernel_bin, tmp_path_factory):
    env = dict(os.environ, CELLVM_NO_IPYTHON="1")
    d = KernelDriver(kernel_bin, outdir=tmp_path_factory.mktemp("plain-out"), env=env)
    yield d
    d.close()


def test_hello_says_no_ipython(plain):
    assert plain.hello.content.get("ipython") is False


def test_kernel_info(plain):
    c = assert_bracketed(plain.roundtrip("shell", "kernel_info_request")).content
    assert c["protocol_version"] == "5.3"
    assert c["language_info"]["name"] == "python"
    assert c["language_info"]["file_extension"] == ".py"


def test_execute_result_counts_and_persistence(plain):
    r = plain.execute("plain_x = 20\nplain_x + 22")
    c = assert_execute_ok(r)
    (er,) = r.of_type("execute_result")
    assert er.content["data"]["text/plain"] == "42"
    assert er.content["execution_count"] == c["execution_count"]
    r2 = plain.execute("plain_x")
    assert assert_execute_ok(r2)["execution_count"] == c["execution_count"] + 1
    r3 = plain.execute("plain_x;")
    assert_execute_ok(r3)
    r4 = plain.execute("None")
    assert r4.of_type("execute_result") == []


def test_rich_repr(plain):
    r = plain.execute("class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\nH()")
    assert_execute_ok(r)
    data = r.of_type("execute_result")[0].content["data"]
    assert data.get("text/html") == "<b>h</b>" and "text/plain" in data


def test_streaming_and_fd_capture(plain):
    r = plain.execute("import os, sys, time\nprint('one')\nos.system('echo two')\n"
                      "print('three', file=sys.stderr)\ntime.sleep(0.8)")
    assert_execute_ok(r)
    assert r.stream_text() == "one\ntwo\n"
    assert r.stream_text("stderr") == "three\n"
    assert r.reply.t - r.of_type("stream")[0].t > 0.5, "output streams while the cell runs"


def test_display_with_id_and_update_flag(plain):
    r = plain.execute("display('a', display_id='pid-1')\ndisplay('b', display_id='pid-1', update=True)")
    assert_execute_ok(r)
    (dd,) = r.of_type("display_data")
    (ud,) = r.of_type("update_display_data")
    assert dd.content["data"]["text/plain"] == "'a'"
    assert ud.content["data"]["text/plain"] == "'b'"
    assert dd.content["transient"]["display_id"] == "pid-1"
    assert ud.content["transient"]["display_id"] == "pid-1"


def test_display_handle_like_ipython(plain):
    """Code written for Jupyter does `h = display(x, display_id=True); h.update(y)`."""
    r = plain.execute("h = display('a', display_id=True)\nh.update('b')")
    assert_execute_ok(r)
    (dd,) = r.of_type("display_data")
    (ud,) = r.of_type("update_display_data")
    assert dd.content["data"]["text/plain"] == "'a'"
    assert ud.content["data"]["text/plain"] == "'b'"
    assert ud.content["transient"]["display_id"] == dd.content["transient"]["display_id"]


def test_error_traceback(plain):
    r = plain.execute("def plain_inner():\n    raise ValueError('plain boom')\n"
                      "def plain_outer():\n    plain_inner()\nplain_outer()",
                      stop_on_error=False)
    reply = assert_bracketed(r)
    assert reply.content["status"] == "error" and reply.content["ename"] == "ValueError"
    assert isinstance(reply.content.get("execution_count"), int), \
        f"execute_reply always carries execution_count: {reply.content}"
    assert [m.msg_type for m in r.outputs] == ["error"]
    tb = strip_ansi("\n".join(r.of_type("error")[0].content["traceback"]))
    for s in ("plain_outer", "plain_inner", "plain boom", "raise ValueError('plain boom')"):
        assert s in tb, f"{s!r} missing (the cell source should be in the traceback):\n{tb}"
    assert "cellvm" not in tb.lower(), f"kernel internals in the user's traceback:\n{tb}"


def test_complete_and_is_complete(plain):
    c = plain.roundtrip("shell", "complete_request", {"code": "zi", "cursor_pos": 2}).reply.content
    assert c["status"] == "ok" and "zip" in c["matches"]
    assert (c["cursor_start"], c["cursor_end"]) == (0, 2)
    for code, status in (("1", "complete"), ("def f():", "incomplete"), ("import = 7q", "invalid")):
        c = plain.roundtrip("shell", "is_complete_request", {"code": code}).reply.content
        assert c["status"] == status, (code, c)


def test_inspect(plain):
    c = plain.roundtrip("shell", "inspect_request",
                        {"code": "zip", "cursor_pos": 3, "detail_level": 0}).reply.content
    assert c["status"] == "ok" and c["found"] is True and c["data"].get("text/plain")


def test_input(plain):
    mid = plain.send_execute("v = input('q? ')\nprint(v * 2)", allow_stdin=True)
    req = plain.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                         timeout=10, what="input_request")
    assert req.content == {"prompt": "q? ", "password": False}
    plain.reply_to_input(req, "ab")
    r = plain.collect(mid)
    assert_execute_ok(r)
    assert r.stream_text() == "abab\n"


def test_interrupt(plain):
    mid = plain.send_execute("while True:\n    pass", stop_on_error=False)
    plain.wait_for(lambda m: m.parent_id == mid and m.msg_type == "execute_input",
                   what="execute_input")
    time.sleep(0.3)
    t0 = time.monotonic()
    plain.roundtrip("control", "interrupt_request", {})
    r = plain.collect(mid, timeout=10)
    assert r.reply.t - t0 < 1.0
    assert r.reply.content["ename"] == "KeyboardInterrupt"
    assert_execute_ok(plain.execute("'ok'"))


def test_matplotlib_png(plain):
    r = plain.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('p');",
                      timeout=60)
    assert_execute_ok(r)
    imgs = [m for m in r.of_type("display_data") if "image/png" in m.content["data"]]
    assert len(imgs) == 1, r
    assert b64_png(imgs[0].content["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plain.execute("1").of_type("display_data"), "the figure was closed"


def test_envelopes(plain):
    probs = envelope_problems(plain)
    assert not probs, "\n".join(probs[:30])
