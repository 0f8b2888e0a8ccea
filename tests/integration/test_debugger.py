"""The debugger (docs/kernel.md "Debugger"): debug_request/debug_reply on
control and debug_event on iopub, through debugpy's pydevd in the kernel, driven as
JupyterLab's debugger drives ipykernel's, through the gateway, on both backends.

- kernel_info_reply advertises it: `debugger: true` (protocol 5.3; with 5.5 the gateway turns
  it into `supported_features: ["debugger"]`, tests/integration/test_protocol55.py);
- before `initialize`, a request that needs the debugger, and garbage, get a failed reply
  (`success: false` with a message), and the kernel keeps running cells;
- the whole JupyterLab sequence: initialize, attach, debugInfo, dumpCell of a cell with a
  function, setBreakpoints on a line inside it, configurationDone; the cell that calls the
  function runs (not waited for) and stops: a `stopped` debug_event; meanwhile control is
  served: stackTrace shows the dumped file and line, scopes and variables the locals' values,
  threads only the main thread, evaluate an expression in the frame, richInspectVariables a
  local's display data; next stops on the next line; kernel_info on control is answered
  while the one on shell waits; continue, and the cell ends with its output;
- an interrupt while the cell is stopped ends it with KeyboardInterrupt; the next cell runs;
- with no thread stopped: inspectVariables lists the user's names, richInspectVariables gives
  a global's display data; disconnect, and the same cell runs through without stopping.
"""
import json
import queue
import time

import pytest

from sessions import BACKENDS, TIMEOUT, Session

# One scenario in steps over one session per backend: all on one worker, in order.
pytestmark = pytest.mark.xdist_group("debugger")

# What JupyterLab's DebuggerSession.start() sends.
INIT_ARGS = {"clientID": "jupyterlab", "clientName": "JupyterLab", "adapterID": "python",
             "pathFormat": "path", "linesStartAt1": True, "columnsStartAt1": True,
             "supportsVariableType": True, "supportsVariablePaging": True,
             "supportsRunInTerminalRequest": True, "locale": "en-us"}

CELL = ("def double_plus_one(a):\n"
        "    b = a * 2\n"
        "    c = b + 1\n"
        "    return c\n"
        "\n"
        "print('result', double_plus_one(20))\n")
BREAK_LINE = 3          # c = b + 1: a and b are set


def murmur2_x86(data, seed):
    """ipykernel.compiler's hash of a cell, the way JupyterLab computes it too."""
    from ipykernel.compiler import murmur2_x86 as ref
    return ref(data, seed)


@pytest.fixture(scope="module", params=list(BACKENDS))
def s(request):
    backend = request.param
    sess = Session(BACKENDS[backend], name=f"debugger-{backend}")
    try:
        sess.start()
        sess.drain_iopub()
        sess.seq = 0
        sess.events = []
        yield sess
    finally:
        sess.close()


def dap(s, command, arguments=None, timeout=TIMEOUT):
    """Send a DAP request as a debug_request on control; its debug_reply's content."""
    s.seq += 1
    content = {"type": "request", "seq": s.seq, "command": command}
    if arguments is not None:
        content["arguments"] = arguments
    return raw(s, content, timeout)


def raw(s, content, timeout=TIMEOUT):
    msg = s.kc.session.msg("debug_request", content)
    s.kc.control_channel.send(msg)
    deadline = time.monotonic() + timeout
    while True:
        reply = s.kc.get_control_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            assert reply["msg_type"] == "debug_reply", reply
            return reply["content"]


def ok(reply):
    assert reply.get("success") is True, reply
    return reply.get("body", {})


def wait_event(s, event, timeout=TIMEOUT):
    """The next debug_event named event on iopub (others are kept in s.events)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            m = s.kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if m["msg_type"] == "debug_event":
            s.events.append(m["content"])
            if m["content"].get("event") == event:
                return m["content"]
    raise AssertionError(f"no {event} debug_event; got {[e.get('event') for e in s.events]}")


def reply_of(s, msg_id, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        r = s.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if r["parent_header"].get("msg_id") == msg_id:
            return r


def cell_stdout(s, msg_id, timeout=TIMEOUT):
    """stdout of the cell msg_id up to its idle (debug_events met on the way are kept)."""
    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            m = s.kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if m["msg_type"] == "debug_event":
            s.events.append(m["content"])
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout":
            text += m["content"]["text"]
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return text
    raise AssertionError(f"no idle for {msg_id}")


# ------------------------------------------------------------------------------------------
def test_kernel_info_advertises_the_debugger(s):
    s.kc.kernel_info()
    info = s.kc.get_shell_msg(timeout=TIMEOUT)["content"]
    assert info["status"] == "ok"
    assert info.get("debugger") is True, info
    assert "supported_features" not in info, info      # a 5.5 field: the 5.5 gateway adds it
    # JupyterLab offers its debugger panel from the kernelspec: it says so only where it works.
    assert s.spec.metadata.get("debugger") is True, s.spec.metadata


def test_requests_before_initialize_and_garbage_fail_and_the_kernel_lives(s):
    r = dap(s, "stackTrace", {"threadId": 1})
    assert r["success"] is False and r["command"] == "stackTrace", r
    assert "initialize" in r["message"], r
    for garbage in ({}, {"type": "event", "event": "x"}, {"type": "request", "command": 5},
                    {"type": "request", "command": "nonsense", "seq": "x"}):
        r = raw(s, garbage)
        assert r["success"] is False and r.get("message"), (garbage, r)
    # debugInfo needs no start (as ipykernel's): not started yet.
    body = ok(dap(s, "debugInfo"))
    assert body["isStarted"] is False and body["hashMethod"] == "Murmur2", body
    assert s.output("print(6 * 7)") == "42\n"


def test_breakpoint_stops_and_control_is_served_meanwhile(s):
    caps = ok(dap(s, "initialize", INIT_ARGS))
    assert caps.get("supportsConfigurationDoneRequest") is True, caps
    ok(dap(s, "attach", {}))
    info = ok(dap(s, "debugInfo"))
    assert info["isStarted"] is True and info["tmpFileSuffix"] == ".py", info
    path = ok(dap(s, "dumpCell", {"code": CELL}))["sourcePath"]
    expect = f"{info['tmpFilePrefix']}{murmur2_x86(CELL, info['hashSeed'])}{info['tmpFileSuffix']}"
    assert path == expect
    if s.kind == "unsafe-local":
        with open(path, encoding="utf-8") as f:
            assert f.read() == CELL
    bps = ok(dap(s, "setBreakpoints", {"source": {"path": path},
                                       "breakpoints": [{"line": BREAK_LINE}],
                                       "sourceModified": False}))
    assert [b["line"] for b in bps["breakpoints"]] == [BREAK_LINE], bps
    ok(dap(s, "configurationDone"))
    info = ok(dap(s, "debugInfo"))
    assert info["breakpoints"] == [{"source": path, "breakpoints": [{"line": BREAK_LINE}]}]

    msg_id = s.kc.execute(CELL)                   # not waited for: it stops
    stopped = wait_event(s, "stopped")
    thread = stopped["body"]["threadId"]
    assert thread in ok(dap(s, "debugInfo"))["stoppedThreads"]

    frames = ok(dap(s, "stackTrace", {"threadId": thread}))["stackFrames"]
    assert frames[0]["source"]["path"] == path, frames
    assert frames[0]["line"] == BREAK_LINE and frames[0]["name"] == "double_plus_one", frames
    assert frames[-1]["source"]["path"] == path, frames     # the kernel's own frames are cut

    scopes = ok(dap(s, "scopes", {"frameId": frames[0]["id"]}))["scopes"]
    local = [sc for sc in scopes if sc["name"] == "Locals"][0]
    variables = ok(dap(s, "variables", {"variablesReference": local["variablesReference"]}))
    values = {v["name"]: v["value"] for v in variables["variables"]}
    assert values.get("a") == "20" and values.get("b") == "40", values
    assert "c" not in values, values

    threads = ok(dap(s, "threads"))["threads"]
    assert [t["name"] for t in threads] == ["MainThread"], threads    # none of the kernel's
    value = ok(dap(s, "evaluate", {"expression": "a + b", "frameId": frames[0]["id"],
                                   "context": "repl"}))
    assert value["result"] == "60", value
    rich = ok(dap(s, "richInspectVariables", {"variableName": "b",
                                              "frameId": frames[0]["id"]}))
    assert rich["data"].get("text/plain") == "40", rich

    # One step over: stopped again, on the next line, with c set.
    ok(dap(s, "next", {"threadId": thread}))
    stopped = wait_event(s, "stopped")
    assert stopped["body"]["reason"] == "step", stopped
    frames = ok(dap(s, "stackTrace", {"threadId": thread}))["stackFrames"]
    assert frames[0]["line"] == BREAK_LINE + 1, frames
    kernel_info = s.kc.kernel_info()         # shell waits behind the stopped cell; control not
    s.kc.control_channel.send(s.kc.session.msg("kernel_info_request", {}))
    assert s.kc.get_control_msg(timeout=TIMEOUT)["msg_type"] == "kernel_info_reply"

    ok(dap(s, "continue", {"threadId": thread}))
    assert cell_stdout(s, msg_id) == "result 41\n"
    assert "continued" in [e.get("event") for e in s.events]
    assert reply_of(s, msg_id)["content"]["status"] == "ok"
    assert reply_of(s, kernel_info)["msg_type"] == "kernel_info_reply"
    assert ok(dap(s, "debugInfo"))["stoppedThreads"] == []


def test_interrupt_at_a_breakpoint_ends_the_cell_and_the_next_runs(s):
    msg_id = s.kc.execute(CELL)                   # the breakpoint is still set
    wait_event(s, "stopped")
    s.events.clear()
    s.kc.control_channel.send(s.kc.session.msg("interrupt_request", {}))
    assert s.kc.get_control_msg(timeout=TIMEOUT)["content"]["status"] == "ok"
    reply = reply_of(s, msg_id)["content"]
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
    assert s.output("print('next')") == "next\n"      # not held at its first line
    assert ok(dap(s, "debugInfo"))["stoppedThreads"] == []     # the client heard "continued"


def test_variables_when_nothing_is_stopped_then_disconnect(s):
    assert s.output("answer = 42\nprint(answer)") == "42\n"
    names = {v["name"]: v for v in ok(dap(s, "inspectVariables"))["variables"]}
    assert names["answer"]["value"] == "42", sorted(names)
    # pydevd groups functions (double_plus_one) under "function variables", as in ipykernel.
    group = names["function variables"]["variablesReference"]
    funcs = [v["name"] for v in ok(dap(s, "variables", {"variablesReference": group}))["variables"]]
    assert "double_plus_one" in funcs, funcs
    assert not [n for n in names if n in ("In", "Out", "get_ipython", "__builtins__")]
    rich = ok(dap(s, "richInspectVariables", {"variableName": "answer"}))
    assert rich["data"] == {"text/plain": "42"}, rich
    ok(dap(s, "disconnect", {"restart": False, "terminateDebuggee": False}))
    assert ok(dap(s, "debugInfo"))["isStarted"] is False
    # No breakpoint any more: the same cell runs through.
    assert s.output(CELL, timeout=TIMEOUT) == "result 41\n"
    r = dap(s, "stackTrace", {"threadId": 1})
    assert r["success"] is False, r
    print(json.dumps([e.get("event") for e in s.events]))
