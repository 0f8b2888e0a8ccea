"""The `cellvm-5.5` kernelspec, checked on each thing it changes (docs/gateway.md, "Protocol 5.5"),
through jupyter_client as Jupyter runs it, one test per difference from the `cellvm` kernelspec:

- the spec: `cellvm`'s own, plus `--protocol 5.5` and a top-level "kernel_protocol_version";
- IOPub is an XPUB: a new client's first IOPub message is an iopub_welcome, and only one;
- every header the gateway signs says version 5.5, on iopub, shell, stdin and control;
- kernel_info_reply says protocol_version 5.5 and supported_features ["debugger"], on shell and
  on control.

One microVM session for the module. test_protocol55.py covers the rest (welcomes on raw SUB
sockets while output flows, topics, a flood of subscriptions, and 5.3 sending none);
test_jkt.py runs jupyter_kernel_test, whose checks are the same for every minor version past 5.1.
"""
import json
import queue
import time

import pytest
from jupyter_client.session import Session as JupyterSession

from sessions import SPECS, TIMEOUT, Session, collect

VERSION = "5.5"
WELCOME_TIMEOUT = 15                # the gateway welcomes on its own, without the kernel


@pytest.fixture(scope="module")
def s55():
    s = Session("cellvm-5.5")
    try:
        s.start()
        yield s
    finally:
        s.close()


def _spec(name):
    return json.loads((SPECS / name / "kernel.json").read_text())


def test_the_spec_is_cellvms_with_protocol_55():
    spec, base = _spec("cellvm-5.5"), _spec("cellvm")
    argv = spec["argv"]
    i = argv.index("--protocol")
    assert argv[i + 1] == VERSION
    assert argv[:i] + argv[i + 2:] == base["argv"], "nothing else on the command line changes"
    assert spec["kernel_protocol_version"] == VERSION     # read by jupyter_client >= 8.8
    assert "kernel_protocol_version" not in base
    rest = {k: v for k, v in spec.items() if k not in ("argv", "kernel_protocol_version",
                                                          "display_name")}
    assert rest == {k: v for k, v in base.items() if k not in ("argv", "display_name")}
    assert VERSION in spec["display_name"] and VERSION not in base["display_name"]


def test_a_new_client_is_welcomed_first_and_once(s55):
    # A session of its own: the same one would give its sockets the session client's
    # identity, which the gateway's ROUTERs hand over to the newcomer.
    kc = s55.km.client(session=JupyterSession(key=s55.key,
                                              signature_scheme=s55.km.session.signature_scheme))
    kc.start_channels()
    try:
        try:
            first = kc.get_iopub_msg(timeout=WELCOME_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no IOPub message within {WELCOME_TIMEOUT} s of subscribing")
        assert first["msg_type"] == "iopub_welcome", first
        assert first["content"] == {"subscription": ""}
        assert first["parent_header"] == {}
        assert first["header"]["version"] == VERSION
        msg_id = kc.kernel_info()
        nxt = kc.get_iopub_msg(timeout=TIMEOUT)
        assert nxt["msg_type"] == "status", f"a second welcome, or something else: {nxt}"
        assert nxt["parent_header"]["msg_id"] == msg_id
        assert nxt["content"]["execution_state"] == "busy"
    finally:
        kc.stop_channels()


CELLS = ["import sys\nfrom IPython.display import display\nprint('out')\n"
         "print('err', file=sys.stderr)\ndisplay({'text/plain': 'shown'}, raw=True)\n6 * 7",
         "v = input('? ')\nprint(v[::-1])",
         "1 / 0"]
SHELL = {"complete": {"code": "zi", "cursor_pos": 2},
         "inspect": {"code": "zip", "cursor_pos": 3, "detail_level": 0},
         "is_complete": {"code": "1"}, "comm_info": {},
         "history": {"hist_access_type": "tail", "n": 1, "output": False, "raw": True}}


def _run_cells(s55, seen):
    kc = s55.kc
    inputs = []

    def answer(req):
        inputs.append(req)
        kc.input("abc")

    results = []
    for code in CELLS:
        hook = answer if "input(" in code else None
        r = collect(kc, kc.execute(code, allow_stdin=hook is not None), TIMEOUT, None, hook)
        results.append(r)
        for m in r.msgs + [r.reply] + inputs:
            seen.setdefault(m["msg_type"], []).append(m["header"]["version"])
        inputs.clear()
    assert [r.status for r in results] == ["ok", "ok", "error"], [r.describe() for r in results]
    assert results[1].stdout == "cba\n"


def test_every_signed_header_says_55(s55):
    seen = {}
    s55.drain_iopub()
    _run_cells(s55, seen)
    for msg_type, content in SHELL.items():
        msg = s55.kc.session.msg(f"{msg_type}_request", content)
        s55.kc.shell_channel.send(msg)
        rep = _reply(s55.kc.get_shell_msg, msg)
        seen.setdefault(rep["msg_type"], []).append(rep["header"]["version"])
    rep = s55.control("interrupt_request")
    seen.setdefault(rep["msg_type"], []).append(rep["header"]["version"])
    wanted = {"status", "execute_input", "stream", "display_data", "execute_result", "error",
              "execute_reply", "input_request", "complete_reply", "inspect_reply",
              "is_complete_reply", "comm_info_reply", "history_reply", "interrupt_reply"}
    assert wanted <= set(seen), f"not seen: {wanted - set(seen)}"
    wrong = {t: v for t, v in seen.items() if set(v) != {VERSION}}
    assert not wrong, f"headers not at {VERSION}: {wrong}"


def _reply(get, msg, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rep = get(timeout=1)
        except queue.Empty:
            continue
        if rep["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return rep
    raise AssertionError(f"no reply to {msg['msg_type']} within {timeout} s")


@pytest.mark.parametrize("channel", ["shell", "control"])
def test_kernel_info_says_55(s55, channel):
    if channel == "shell":
        rep = s55.kc.kernel_info(reply=True, timeout=TIMEOUT)
    else:
        rep = s55.control("kernel_info_request")
    c = rep["content"]
    assert rep["msg_type"] == "kernel_info_reply" and c["status"] == "ok"
    assert rep["header"]["version"] == VERSION
    assert c["protocol_version"] == VERSION
    # The kernel can import debugpy in the guest and says so with 5.3's "debugger": the gateway
    # relays the debugger, never kernel subshells.
    assert c.get("debugger") is True
    assert c["supported_features"] == ["debugger"]
