"""cellvm-kernel lifecycle and bad input: shutdown (with restart flag), fatal framing errors,
dropped frames and envelopes, unknown msg_types (docs/channel.md "Bad input")."""
import json
import signal
import time

import pytest

from chanclient import length_prefix
from kernel_driver import (KernelExited, assert_bracketed, assert_execute_ok, kernel,
                           new_kernel)  # noqa: F401  (fixtures)


def _still_serving(k, tag="alive"):
    res = k.execute(f"print({tag!r})", timeout=15)
    assert_execute_ok(res)
    assert res.stream_text() == f"{tag}\n"


def _protocol_errors(k, start=0):
    return [m for m in k.snapshot()[start:] if m.channel == "cellvm"
            and m.msg_type == "protocol_error"]


# ------------------------------------------------------------------------------ shutdown
@pytest.mark.parametrize("restart", [False, True])
def test_shutdown_request(new_kernel, restart):
    k = new_kernel()
    assert_execute_ok(k.execute("x = 1"))
    res = k.roundtrip("control", "shutdown_request", {"restart": restart})
    reply = assert_bracketed(res)
    assert reply.content.get("status") == "ok"
    assert reply.content.get("restart") is restart, "shutdown_reply echoes the restart flag"
    ex = k.wait_for(lambda m: m.channel == "cellvm" and m.msg_type == "exiting", timeout=10,
                    what="exiting notice")
    assert ex.index > res.msgs[-1].index, "exiting comes after the reply and idle"
    assert ex.content.get("reason") == "shutdown_request"
    assert ex.content.get("restart") is restart
    assert ex.content.get("status") == 0
    rc = k.wait_exit(10)
    assert rc == 0, f"kernel exit status {rc} after shutdown_request (want 0)"
    time.sleep(0.1)
    later = k.snapshot()[ex.index + 1:]
    assert later == [], f"nothing after exiting: {later}"


def test_shutdown_while_cell_runs(new_kernel):
    k = new_kernel()
    cell = k.send_execute("import time\ntime.sleep(100)")
    k.wait_for(lambda m: m.parent_id == cell and m.msg_type == "execute_input", what="running")
    t0 = time.monotonic()
    res = k.roundtrip("control", "shutdown_request", {"restart": False}, timeout=10)
    assert assert_bracketed(res).content.get("status") == "ok"
    k.wait_for(lambda m: m.msg_type == "exiting", timeout=10, what="exiting")
    rc = k.wait_exit(10)
    assert rc == 0, f"exit status {rc}"
    assert time.monotonic() - t0 < 5, "a running cell must not hold up shutdown"


def test_driver_closing_channel_ends_kernel(new_kernel):
    k = new_kernel()
    _still_serving(k)
    k.sock.shutdown(2)
    rc = k.wait_exit(10)
    assert rc is not None, "kernel must exit when its channel closes"
    assert rc == 0, f"exit status {rc} when the driver closes the channel (docs/kernel.md: 0)"


# ------------------------------------------------------------------------------ fatal framing
def _assert_fatal(k, before, what):
    errs = _protocol_errors(k, before)
    assert errs, f"{what}: expected a protocol_error notice"
    e = errs[0].content
    assert isinstance(e.get("error"), str) and e["error"], e
    assert e.get("fatal") is True, e
    rc = k.wait_exit(10)
    assert rc is not None, f"{what}: kernel did not exit"
    assert rc == 3, f"{what}: exit status {rc} (want 3; negative means a signal)"
    assert k.stderr_tail().strip(), f"{what}: the kernel must log a line"
    return e


def test_zero_length_frame_is_fatal(new_kernel):
    k = new_kernel()
    _still_serving(k)
    before = len(k.snapshot())
    k.send_bytes(b"\x00\x00\x00\x00")
    try:
        k.wait_for(lambda m: m.msg_type == "protocol_error", start=before, timeout=10)
    except KernelExited:
        pass
    e = _assert_fatal(k, before, "zero-length frame")
    assert "0" in e["error"]


def test_oversize_frame_is_fatal(new_kernel):
    k = new_kernel(max_frame=4096)
    assert k.hello.content.get("max_frame") == 4096
    _still_serving(k)
    before = len(k.snapshot())
    k.send_bytes(length_prefix(4097) + b"{" * 100)
    try:
        k.wait_for(lambda m: m.msg_type == "protocol_error", start=before, timeout=10)
    except KernelExited:
        pass
    e = _assert_fatal(k, before, "oversize frame")
    assert "4097" in e["error"], e


def test_huge_length_is_fatal_without_allocating(new_kernel):
    k = new_kernel()
    before = len(k.snapshot())
    k.send_bytes(b"\xff\xff\xff\xff")
    try:
        k.wait_for(lambda m: m.msg_type == "protocol_error", start=before, timeout=10)
    except KernelExited:
        pass
    _assert_fatal(k, before, "length 0xffffffff")


def test_frame_of_exactly_max_frame_is_accepted(new_kernel):
    k = new_kernel(max_frame=4096)
    env = k.envelope("shell", "kernel_info_request", {}, metadata={"pad": ""})
    base = len(json.dumps(env).encode())
    env["metadata"]["pad"] = "p" * (4096 - base)
    payload = json.dumps(env).encode()
    assert len(payload) == 4096
    k.sent[env["header"]["msg_id"]] = env
    k.send_frame(payload)
    res = k.collect(env["header"]["msg_id"], timeout=10)
    assert assert_bracketed(res).content.get("status") == "ok"
    assert _protocol_errors(k) == []


# ------------------------------------------------------------------------------ dropped frames
@pytest.mark.parametrize("payload", [
    b"this is not json",
    b"{\"channel\": \"shell\", ",
    b"[1, 2, 3]",
    b"\"a string\"",
    b"{\"channel\": \"shell\", \"header\": {\"msg_type\": \"kernel_info_request\", "
    b"\"msg_id\": \"\xff\xfe\"}, \"content\": {}}",
], ids=["text", "truncated", "array", "string", "bad-utf8"])
def test_undecodable_frame_is_dropped(kernel, payload):
    before = len(kernel.snapshot())
    kernel.send_frame(payload)
    _still_serving(kernel)
    errs = _protocol_errors(kernel, before)
    assert len(errs) == 1, f"one non-fatal protocol_error per dropped frame, got {errs}"
    assert errs[0].content.get("fatal") is False
    assert kernel.alive()


def _env(k, **over):
    env = k.envelope("shell", "kernel_info_request", {})
    env.update(over)
    return env


BAD_ENVELOPES = {
    # id: (mutation, protocol_error required)
    "unknown-channel": (lambda e: e.update(channel="bogus"), True),
    "no-channel": (lambda e: e.pop("channel"), True),
    "channel-number": (lambda e: e.update(channel=1), True),
    "no-header": (lambda e: e.pop("header"), True),
    "header-string": (lambda e: e.update(header="not an object"), True),
    "no-msg_type": (lambda e: e["header"].pop("msg_type"), True),
    "empty-msg_type": (lambda e: e["header"].update(msg_type=""), True),
    "msg_type-number": (lambda e: e["header"].update(msg_type=7), True),
    "no-content": (lambda e: e.pop("content"), True),
    "content-array": (lambda e: e.update(content=[1]), True),
    "buffers-17": (lambda e: e.update(buffers=17), True),
    "buffers-negative": (lambda e: e.update(buffers=-1), True),
    "buffers-string": (lambda e: e.update(buffers="2"), True),
    # iopub is kernel -> driver only; the spec does not say whether this earns a protocol_error
    "iopub-from-driver": (lambda e: e.update(channel="iopub"), False),
}


@pytest.mark.parametrize("case", list(BAD_ENVELOPES))
def test_bad_envelope_is_dropped(kernel, case):
    mutate, need_error = BAD_ENVELOPES[case]
    env = _env(kernel)
    mutate(env)
    before = len(kernel.snapshot())
    kernel.send_frame(json.dumps(env).encode())
    _still_serving(kernel)
    mine = env.get("header", {}).get("msg_id") if isinstance(env.get("header"), dict) else None
    if mine:
        assert kernel.for_parent(mine) == [], "a dropped message is never answered"
    errs = _protocol_errors(kernel, before)
    assert all(e.content.get("fatal") is False for e in errs), errs
    if need_error:
        assert len(errs) == 1, f"one non-fatal protocol_error for a bad envelope, got {errs}"
    assert kernel.alive()


def test_missing_parent_header_and_metadata_are_fine(kernel):
    env = kernel.envelope("shell", "kernel_info_request", {})
    del env["parent_header"], env["metadata"], env["buffers"]
    kernel.sent[env["header"]["msg_id"]] = env
    before = len(kernel.snapshot())
    kernel.send_frame(json.dumps(env).encode())
    res = kernel.collect(env["header"]["msg_id"], timeout=10)
    assert assert_bracketed(res).content.get("status") == "ok"
    assert _protocol_errors(kernel, before) == []


def test_buffers_are_consumed(kernel):
    """A message with buffers is followed by that many raw frames; the kernel must read them
    (even binary, even ones that look like JSON requests) and stay in sync."""
    env = kernel.envelope("shell", "kernel_info_request", {})
    kernel.sent[env["header"]["msg_id"]] = env
    decoy = kernel.envelope("shell", "execute_request", kernel.execute_content("print('DECOY')"))
    kernel.sent[decoy["header"]["msg_id"]] = decoy
    kernel.send(env, buffers=[b"\x00\x01\x02binary", json.dumps(decoy).encode()])
    res = kernel.collect(env["header"]["msg_id"], timeout=10)
    assert assert_bracketed(res).content.get("status") == "ok"
    _still_serving(kernel, "in sync")
    assert kernel.for_parent(decoy["header"]["msg_id"]) == [], \
        "a buffer frame was read as a message"


def test_unknown_msg_type_shell(kernel):
    res = kernel.roundtrip("shell", "frobnicate_request", {"x": 1})
    reply = assert_bracketed(res)
    assert reply.msg_type == "frobnicate_reply"
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "UnknownMessageType"
    assert "evalue" in reply.content and isinstance(reply.content.get("traceback", []), list)
    _still_serving(kernel)


def test_unknown_msg_type_control(kernel):
    res = kernel.roundtrip("control", "frobnicate_request", {})
    reply = assert_bracketed(res)
    assert reply.content.get("status") == "error"
    assert reply.content.get("ename") == "UnknownMessageType"


@pytest.mark.parametrize("msg_type,content", [
    ("execute_reply", {"status": "ok"}),
    ("input_reply", {"value": "x"}),
], ids=["reply-type", "stdin-type"])
def test_reply_type_on_shell_is_not_crashing(kernel, msg_type, content):
    """A reply-typed or stdin-typed message on shell is not a request: like any shell message
    the kernel brackets it with busy and idle, but a non-request has no reply type (s_reply in
    kn_kernel.c answers only `*_request`), so nothing else comes. ipykernel does the same
    (busy, "Unknown message type", idle)."""
    env = kernel.envelope("shell", msg_type, content)
    kernel.sent[env["header"]["msg_id"]] = env
    before = len(kernel.snapshot())
    kernel.send(env)
    _still_serving(kernel)              # shell runs in order: everything for env came by now
    got = kernel.for_parent(env["header"]["msg_id"])
    assert [(m.channel, m.msg_type, m.content) for m in got] == [
        ("iopub", "status", {"execution_state": "busy"}),
        ("iopub", "status", {"execution_state": "idle"}),
    ], got
    assert all(m.parent == env["header"] for m in got), got
    assert _protocol_errors(kernel, before) == [], "the envelope itself is fine"


# Contents a client should never send; what the kernel answers for each (decided against the
# Jupyter spec, and what Debian's ipykernel 6.17 does: it answers none of the three bad ones,
# it logs "Got bad msg" or an exception, and sends busy and idle only; our kernel always
# replies, docs/channel.md). A missing code is an empty cell (nothing runs); a code that is not
# a string is refused with TypeError (it is not run as str(code)); a silent that is not a bool
# is read for its truth value (as ipykernel does); user_expressions that is not an object is
# ignored (read as {}) and the code runs.
BAD_EXECUTE = [
    ({}, "ok", None),
    ({"code": 5}, "error", "TypeError"),
    ({"code": "1", "silent": "yes"}, "ok", None),
    ({"code": "1", "user_expressions": [1]}, "ok", None),
]


@pytest.mark.parametrize("content,status,ename", BAD_EXECUTE,
                         ids=["no-code", "code-number", "silent-string", "user_expressions-array"])
def test_execute_with_bad_content_types(kernel, content, status, ename):
    content = dict(content, stop_on_error=False)
    res = kernel.roundtrip("shell", "execute_request", content, timeout=15)
    reply = assert_bracketed(res)
    assert reply.content.get("status") == status, reply
    if status == "error":
        assert reply.content.get("ename") == ename, reply
        assert "must be a string" in reply.content.get("evalue", ""), reply
        assert not res.of_type("execute_input") and not res.of_type("execute_result"), \
            f"refused code ran: {res}"
    else:
        assert not res.of_type("error"), res
    if "user_expressions" in content:
        assert reply.content.get("user_expressions") == {}, reply
        assert [m.content["data"]["text/plain"] for m in res.of_type("execute_result")] == ["1"]
    _still_serving(kernel)


@pytest.mark.parametrize("pos,clamped", [(-5, 0), (10**6, 2)], ids=["negative", "past-end"])
def test_complete_with_out_of_range_cursor(kernel, pos, clamped):
    """An out-of-range cursor_pos is clamped into the code (kernel/py/cellvm_shell.py), so the
    reply is "ok" and the same as for the cursor at that end. (ipykernel's completer fails an
    assertion on it and sends no reply at all.)"""
    def complete(cursor_pos):
        res = kernel.roundtrip("shell", "complete_request", {"code": "zi", "cursor_pos": cursor_pos})
        c = assert_bracketed(res).content
        assert c.get("status") == "ok", c
        return c

    got, want = complete(pos), complete(clamped)
    assert got["cursor_end"] == clamped and 0 <= got["cursor_start"] <= clamped, got
    assert (got["matches"], got["cursor_start"]) == (want["matches"], want["cursor_start"])
    if clamped == 2:
        assert "zip" in got["matches"], got
    _still_serving(kernel)


def _drops_logged(k):
    return k.stderr_tail(1 << 20).count("event=stdin.drop")


def test_stray_input_reply_is_dropped(new_kernel):
    """An input_reply with no input() waiting (none asked, or one answered already) is dropped:
    the kernel logs stdin.drop, sends nothing on any channel, and keeps no value for a later
    input(), whose own request and reply still pair up."""
    k = new_kernel()
    _still_serving(k)
    answered = k.sent[k.send_execute("pass")]["header"]
    k.wait_for(lambda m: m.parent_id == answered["msg_id"] and m.msg_type == "execute_reply")
    time.sleep(0.2)
    before = len(k.snapshot())
    k.send(k.envelope("stdin", "input_reply", {"value": "stray"}))
    k.send(k.envelope("stdin", "input_reply", {"value": "late"}, parent=answered))
    deadline = time.monotonic() + 10
    while _drops_logged(k) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _drops_logged(k) == 2, f"want two stdin.drop lines: {k.stderr_tail()}"
    time.sleep(0.3)
    assert k.snapshot()[before:] == [], "a dropped input_reply makes no message on any channel"
    mid = k.send_execute("v = input('? ')\nprint(v[::-1])", allow_stdin=True)
    req = k.wait_for(lambda m: m.parent_id == mid and m.msg_type == "input_request",
                     timeout=10, what="input_request")
    assert req.channel == "stdin" and req.content.get("prompt") == "? "
    k.reply_to_input(req, "abc")
    res = k.collect(mid)
    assert_execute_ok(res)
    assert res.stream_text() == "cba\n", "input() got the reply to its own request"
    assert _drops_logged(k) == 2, "the paired reply was taken, not dropped"
    assert not [m for m in k.snapshot()[before:] if m.parent_id != mid], \
        "nothing but the cell's own messages"


def test_sigterm_exits_cleanly(new_kernel):
    k = new_kernel()
    _still_serving(k)
    k.proc.send_signal(signal.SIGTERM)
    rc = k.wait_exit(10)
    assert rc is not None, "SIGTERM must end the kernel"


def test_no_stray_output_between_requests(kernel):
    """The first iopub message after a request is that request's busy (jupyter_kernel_test)."""
    _still_serving(kernel)
    time.sleep(0.5)
    before = len(kernel.snapshot())
    res = kernel.roundtrip("shell", "kernel_info_request")
    new = kernel.snapshot()[before:]
    assert new[0] is res.msgs[0], f"unexpected message before busy: {new[:3]}"
