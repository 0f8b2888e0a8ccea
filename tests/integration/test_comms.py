"""Comms both ways, and ipywidgets through them (docs/kernel.md "Comms"), as a Jupyter client
sees them through the gateway, on both backends.

- a widget a cell makes and displays opens its comm (comm_open, target jupyter.widget) and
  shows a display_data of the widget-view MIME type naming that comm;
- the client's comm_msg changes the widget's value in the kernel, its observer runs on the
  kernel's main thread, and what the observer prints has the comm_msg as its parent;
- a change made in a cell goes to the client as a comm_msg update;
- comm_close both ways; comm_info_request lists the open comms (all, or one target's);
- a comm the client opens on a target a cell registered gets its messages (with binary
  buffers, both ways); one on an unknown target is closed;
- comm messages that arrive while a cell runs are handled after it, as ipykernel does;
- get_ipython().kernel: comm_manager, session.send on iopub_socket, get_parent(), shell;
- without IPython (on the kernel's channel directly), comms still work.

Debian bookworm ships ipywidgets 6, whose front-end protocol differs from 7/8 (a client sets
state with {"method": "backbone", "sync_data": ...} rather than {"method": "update",
"state": ...}); the tests speak the one the kernel's ipywidgets speaks.
"""
import json
import os
import queue
import time
import uuid

import pytest

from kernel_driver import assert_bracketed, assert_execute_ok, new_kernel  # noqa: F401
from sessions import BACKENDS, TIMEOUT, Session

VIEW_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module", params=list(BACKENDS))
def s(request):
    backend = request.param
    sess = Session(BACKENDS[backend], name=f"comms-{backend}")
    try:
        sess.start()
        have = sess.run("import importlib.util as _u, sys as _s; "
                        "print(_u.find_spec('ipywidgets') is not None, 'cellvm_comm' in "
                        "_s.modules); del _u, _s")
        assert have.status == "ok", have.describe()
        widgets, comms = have.stdout.split()
        if comms != "True":
            pytest.skip(f"the {backend} kernel predates comms (cellvm_comm): the guest image "
                        "holds an older cellvm-kernel; rebuild it with `make image`")
        if widgets != "True":
            pytest.skip(f"ipywidgets is not installed in the {backend} kernel's Python (the "
                        "guest image needs python3-ipywidgets: rebuild it with `make image`)")
        sess.drain_iopub()
        yield sess
    finally:
        sess.close()


@pytest.fixture(scope="module")
def widgets_major(s):
    return int(s.output("import ipywidgets; print(ipywidgets.version_info[0])").strip())


def ok(s, code):
    r = s.run(code)
    assert r.status == "ok", r.describe()
    return r


def send_shell(s, msg_type, content, buffers=()):
    """Send a shell message as a client does; its msg_id."""
    msg = s.kc.session.msg(msg_type, content)
    s.kc.session.send(s.kc.shell_channel.socket, msg, buffers=list(buffers))
    return msg["header"]["msg_id"]


def iopub_until_idle(s, msg_id, timeout=TIMEOUT):
    """The iopub messages parented to msg_id, busy to idle."""
    deadline, out = time.monotonic() + timeout, []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no idle for {msg_id}; got {[m['msg_type'] for m in out]}")
        try:
            m = s.kc.get_iopub_msg(timeout=min(left, 1))
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        out.append(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return out


def comm_roundtrip(s, msg_type, content, buffers=()):
    msgs = iopub_until_idle(s, send_shell(s, msg_type, content, buffers))
    states = [m["content"]["execution_state"] for m in msgs if m["msg_type"] == "status"]
    assert states == ["busy", "idle"], [m["msg_type"] for m in msgs]
    return msgs


def of_type(msgs, msg_type):
    return [m for m in msgs if m["msg_type"] == msg_type]


def stdout(msgs):
    return "".join(m["content"]["text"] for m in of_type(msgs, "stream")
                   if m["content"]["name"] == "stdout")


def comm_info(s, target_name=None):
    content = {} if target_name is None else {"target_name": target_name}
    msg_id = send_shell(s, "comm_info_request", content)
    reply = s.kc.get_shell_msg(timeout=TIMEOUT)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = s.kc.get_shell_msg(timeout=TIMEOUT)
    assert reply["msg_type"] == "comm_info_reply" and reply["content"]["status"] == "ok", reply
    return reply["content"]["comms"]


def set_state(major, state):
    """A client's comm_msg data that sets widget state, in the kernel's ipywidgets' dialect."""
    if major >= 7:
        return {"method": "update", "state": state, "buffer_paths": []}
    return {"method": "backbone", "sync_data": state}


def make_slider(s, name):
    """A displayed IntSlider in the kernel as `name`; (its comm_id, the cell's messages)."""
    r = ok(s, f"import ipywidgets as w\n{name} = w.IntSlider()\ndisplay({name})")
    opens = of_type(r.msgs, "comm_open")
    mine = [m for m in opens if m["content"]["target_name"] == "jupyter.widget"
            and m["content"]["data"].get("state", m["content"]["data"])
            .get("_model_name") == "IntSliderModel"]
    assert len(mine) == 1, [m["content"] for m in opens]
    return mine[0]["content"]["comm_id"], r


# ------------------------------------------------------------------------------ widgets
def test_displayed_widget_opens_its_comm_and_shows_its_view(s):
    comm_id, r = make_slider(s, "s1")
    opened = [m for m in of_type(r.msgs, "comm_open") if m["content"]["comm_id"] == comm_id][0]
    assert opened["parent_header"]["msg_id"] == r.msg_id
    state = opened["content"]["data"].get("state", opened["content"]["data"])
    assert state["value"] == 0 and state["max"] == 100, state
    views = [m for m in of_type(r.msgs, "display_data") if VIEW_MIME in m["content"]["data"]]
    assert len(views) == 1, r.msgs
    assert views[0]["content"]["data"][VIEW_MIME]["model_id"] == comm_id
    types = [m["msg_type"] for m in r.msgs]
    assert types.index("comm_open") < types.index("display_data"), types
    assert comm_id in comm_info(s), "the widget's comm is open in the kernel"


def test_client_state_change_reaches_the_widget_and_its_observer(s, widgets_major):
    comm_id, _ = make_slider(s, "s2")
    ok(s, "import threading\nseen = []\n"
          "def on_value(change):\n"
          "    seen.append(threading.current_thread() is threading.main_thread())\n"
          "    print('value is now', change['new'])\n"
          "s2.observe(on_value, 'value')")
    msgs = comm_roundtrip(s, "comm_msg", {"comm_id": comm_id,
                                          "data": set_state(widgets_major, {"value": 7})})
    # The observer's print is the comm_msg's output.
    assert stdout(msgs) == "value is now 7\n", msgs
    assert s.output("print(s2.value, seen)") == "7 [True]\n"


def test_kernel_side_change_is_sent_to_the_client(s):
    comm_id, _ = make_slider(s, "s3")
    r = ok(s, "s3.value = 3")
    updates = [m for m in of_type(r.msgs, "comm_msg") if m["content"]["comm_id"] == comm_id]
    assert len(updates) == 1, r.msgs
    data = updates[0]["content"]["data"]
    assert data["method"] == "update" and data["state"] == {"value": 3}, data
    assert updates[0]["parent_header"]["msg_id"] == r.msg_id


def test_comm_close_both_ways(s):
    a, _ = make_slider(s, "s4")
    r = ok(s, "s4.close()")
    closes = [m for m in of_type(r.msgs, "comm_close") if m["content"]["comm_id"] == a]
    assert len(closes) == 1, r.msgs
    assert a not in comm_info(s)
    ok(s, "from ipykernel.comm import Comm\nclosed = []\n"
          "c5 = Comm(target_name='plain', data={'x': 1})\n"
          "c5.on_close(lambda msg: closed.append(msg['content']['data']))")
    b = s.output("print(c5.comm_id)").strip()
    assert comm_info(s, "plain") == {b: {"target_name": "plain"}}
    comm_roundtrip(s, "comm_close", {"comm_id": b, "data": {"why": "client"}})
    assert b not in comm_info(s)
    assert s.output("print(closed, c5._closed)") == "[{'why': 'client'}] True\n"


def test_comm_info_lists_open_comms_by_target(s):
    ok(s, "from ipykernel.comm import Comm\n"
          "ca = [Comm(target_name='t-a') for _ in range(2)]\ncb = Comm(target_name='t-b')")
    ids = json.loads(s.output("import json; print(json.dumps([c.comm_id for c in ca + [cb]]))"))
    everything = comm_info(s)
    for cid, target in zip(ids, ["t-a", "t-a", "t-b"]):
        assert everything.get(cid) == {"target_name": target}, everything
    assert comm_info(s, "t-a") == {ids[0]: {"target_name": "t-a"},
                                   ids[1]: {"target_name": "t-a"}}
    assert comm_info(s, "t-b") == {ids[2]: {"target_name": "t-b"}}
    assert comm_info(s, "no-such-target") == {}


# ------------------------------------------------------------------------------ client's comms
def test_client_opened_comm_exchanges_messages_with_buffers(s):
    ok(s, "def echo_target(comm, msg):\n"
          "    comm.send({'opened': msg['content']['data']})\n"
          "    comm.on_msg(lambda m: comm.send({'echo': m['content']['data'],\n"
          "        'sizes': [len(b) for b in m['buffers']]},\n"
          "        buffers=[bytes(b)[::-1] for b in m['buffers']]))\n"
          "get_ipython().kernel.comm_manager.register_target('echo', echo_target)")
    cid = uuid.uuid4().hex
    msgs = comm_roundtrip(s, "comm_open", {"comm_id": cid, "target_name": "echo",
                                           "data": {"hello": 1}})
    sent = of_type(msgs, "comm_msg")
    assert [m["content"]["data"] for m in sent] == [{"opened": {"hello": 1}}], msgs
    assert comm_info(s, "echo") == {cid: {"target_name": "echo"}}
    blob = bytes(range(256)) * 300
    msgs = comm_roundtrip(s, "comm_msg", {"comm_id": cid, "data": {"n": 2}},
                          buffers=[b"abc", blob])
    back = of_type(msgs, "comm_msg")
    assert len(back) == 1, msgs
    assert back[0]["content"]["data"] == {"echo": {"n": 2}, "sizes": [3, len(blob)]}
    assert [bytes(b) for b in back[0]["buffers"]] == [b"cba", blob[::-1]]


def test_comm_open_on_unknown_target_is_closed(s):
    cid = uuid.uuid4().hex
    msgs = comm_roundtrip(s, "comm_open", {"comm_id": cid, "target_name": "nobody-home",
                                           "data": {}})
    closes = of_type(msgs, "comm_close")
    assert [m["content"]["comm_id"] for m in closes] == [cid], msgs
    assert cid not in comm_info(s)
    # A message for a comm that is not open is dropped; the kernel goes on.
    comm_roundtrip(s, "comm_msg", {"comm_id": cid, "data": {}})
    assert s.output("print(1)") == "1\n"


def test_comm_msg_sent_while_a_cell_runs_is_handled_after_it(s, widgets_major):
    comm_id, _ = make_slider(s, "s6")
    cell = s.kc.execute("import time; time.sleep(1.5); print('in cell', s6.value)")
    time.sleep(0.3)
    upd = send_shell(s, "comm_msg", {"comm_id": comm_id,
                                     "data": set_state(widgets_major, {"value": 9})})
    deadline, order, cell_out = time.monotonic() + TIMEOUT, [], ""
    while len(order) < 4 and time.monotonic() < deadline:
        try:
            m = s.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        pid = m["parent_header"].get("msg_id")
        if m["msg_type"] == "status" and pid in (cell, upd):
            order.append(("cell" if pid == cell else "comm", m["content"]["execution_state"]))
        if m["msg_type"] == "stream" and pid == cell:
            cell_out += m["content"]["text"]
    assert order == [("cell", "busy"), ("cell", "idle"), ("comm", "busy"), ("comm", "idle")]
    assert cell_out == "in cell 0\n"
    assert s.output("print(s6.value)") == "9\n"


# ------------------------------------------------------------------------------ the kernel
def test_get_ipython_kernel_gives_what_libraries_use(s):
    r = ok(s, "k = get_ipython().kernel\n"
              "print(k.shell is get_ipython(), k.get_parent()['header']['msg_type'],\n"
              "      k.get_parent()['header']['msg_id'])\n"
              "k.session.send(k.iopub_socket, 'display_data',\n"
              "    {'data': {'text/plain': 'sent by session'}, 'metadata': {}},\n"
              "    parent=k.get_parent('shell'), ident=b'x', metadata={'m': 1})\n"
              "k.session.send(k.iopub_socket, k.session.msg('display_data',\n"
              "    {'data': {'text/plain': 'as a message'}, 'metadata': {}}, parent=k._parent_header))\n"
              "k.session.send(k.iopub_socket, 'display_data',\n"
              "    {'data': {'text/plain': 'no parent'}, 'metadata': {}})\n"
              "print(type(k.comm_manager).__name__, callable(k.comm_manager.register_target))")
    lines = r.stdout.splitlines()
    assert lines[0] == f"True execute_request {r.msg_id}", lines
    assert lines[1] == "CommManager True", lines
    shown = [m for m in of_type(r.msgs, "display_data")
             if m["content"]["data"].get("text/plain") == "sent by session"]
    assert len(shown) == 1, r.msgs
    assert shown[0]["metadata"] == {"m": 1}
    assert shown[0]["parent_header"]["msg_id"] == r.msg_id
    assert [m["content"]["data"]["text/plain"] for m in of_type(r.msgs, "display_data")] == \
        ["sent by session", "as a message"], "parent=None means no parent, as jupyter_client"


def test_shell_parent_header_is_the_running_request(s):
    """get_ipython().parent_header as ipykernel's shell has it: the running request as a
    message (header, msg_id, content, ...), what code sends with, as nbclient's own
    update-display-id.ipynb does (`session.send(iopub, ..., parent=ip.parent_header)`)."""
    r = ok(s, "ip = get_ipython()\n"
              "ph = ip.parent_header\n"
              "print(type(ph).__name__, ph['header']['msg_type'], ph['header']['msg_id'],\n"
              "      ph['msg_id'], ph['content']['code'].startswith('ip = get_ipython()'),\n"
              "      ip.get_parent() == ph)\n"
              "for t, text in (('display_data', 'shown'), ('update_display_data', 'updated')):\n"
              "    ip.kernel.session.send(ip.kernel.iopub_socket, t,\n"
              "        {'data': {'text/plain': text}, 'metadata': {},\n"
              "         'transient': {'display_id': 'ph1'}}, parent=ip.parent_header)")
    assert r.stdout.split() == ["dict", "execute_request", r.msg_id, r.msg_id, "True", "True"]
    sent = [m for m in r.msgs if m["msg_type"] in ("display_data", "update_display_data")]
    assert [(m["msg_type"], m["content"]["data"]["text/plain"],
             m["content"]["transient"]["display_id"], m["parent_header"]["msg_id"])
            for m in sent] == [("display_data", "shown", "ph1", r.msg_id),
                               ("update_display_data", "updated", "ph1", r.msg_id)], r.msgs
    # A later request gets its own.
    r2 = ok(s, "print(get_ipython().parent_header['header']['msg_id'])")
    assert r2.stdout.strip() == r2.msg_id != r.msg_id


def test_output_widget_captures_with_the_cells_parent(s):
    """ipywidgets' Output widget reads get_ipython().kernel._parent_header: the msg_id it
    sends the client is the running cell's."""
    ok(s, "import ipywidgets as w\nout7 = w.Output()")
    r = ok(s, "with out7:\n    pass")
    ids = [m["content"]["data"].get("state", {}).get("msg_id") for m in of_type(r.msgs, "comm_msg")
           if m["content"]["data"].get("method") == "update"]
    assert r.msg_id in ids, r.msgs


def test_comm_handler_can_be_interrupted(s):
    ok(s, "import time\n"
          "def sleeper(comm, msg):\n"
          "    comm.on_msg(lambda m: time.sleep(60))\n"
          "get_ipython().kernel.comm_manager.register_target('sleeper', sleeper)")
    cid = uuid.uuid4().hex
    comm_roundtrip(s, "comm_open", {"comm_id": cid, "target_name": "sleeper", "data": {}})
    t0 = time.monotonic()
    msg_id = send_shell(s, "comm_msg", {"comm_id": cid, "data": {}})
    time.sleep(0.5)
    assert s.control("interrupt_request")["content"]["status"] == "ok"
    msgs = iopub_until_idle(s, msg_id, timeout=30)
    assert time.monotonic() - t0 < 20, "the handler was not interrupted"
    assert [m["content"]["execution_state"] for m in of_type(msgs, "status")] == ["busy", "idle"]
    assert s.output("print('still here')") == "still here\n"


def test_ipykernel_comm_is_ours_and_the_comm_package_is_hooked(s, tmp_path):
    """`from ipykernel.comm import Comm` needs no ipykernel kernel (nor imports one);
    `import ipykernel.comm` works too; a `comm` package imported later creates our comms
    and hands out our manager (ipywidgets 8 uses those)."""
    pkg = tmp_path / "fakecomm" / "comm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def create_comm(*a, **kw):\n    return 'dummy'\n"
                                     "def get_comm_manager():\n    return 'dummy'\n")
    if s.backend != "unsafe-local":
        pytest.skip("the package is written on the host")
    got = json.loads(s.output(
        "import sys, json\n"
        "from ipykernel.comm import Comm as C1\n"
        "import ipykernel.comm\n"
        f"sys.path.insert(0, {str(pkg.parent)!r})\n"
        "sys.modules.pop('comm', None)\n"
        "import comm\n"
        "c = comm.create_comm(target_name='via-comm', data={'a': 1})\n"
        "print(json.dumps([C1 is ipykernel.comm.Comm, 'ipykernel.kernelbase' in sys.modules,\n"
        "  isinstance(c, C1), comm.get_comm_manager() is get_ipython().kernel.comm_manager,\n"
        "  c.comm_id]))\n"
        "sys.path.remove(sys.path[0])"))
    assert got[:4] == [True, False, True, True], got
    assert comm_info(s, "via-comm") == {got[4]: {"target_name": "via-comm"}}


def test_comms_work_without_ipython(new_kernel):
    k = new_kernel(env=dict(os.environ, CELLVM_NO_IPYTHON="1"))
    assert k.hello.content.get("ipython") is False
    r = k.execute("from ipykernel.comm import Comm\n"
                  "c = Comm(target_name='plain', data={'a': 1})\n"
                  "c.send({'b': 2}, buffers=[b'xyz'])\n"
                  "print(c.comm_id)")
    assert_execute_ok(r)
    (opened,) = r.of_type("comm_open")
    (sent,) = r.of_type("comm_msg")
    cid = r.stream_text().strip()
    assert opened.content["comm_id"] == sent.content["comm_id"] == cid
    assert opened.content["target_name"] == "plain" and opened.content["data"] == {"a": 1}
    assert sent.content["data"] == {"b": 2} and [bytes(b) for b in sent.buffers] == [b"xyz"]
    c = assert_bracketed(k.roundtrip("shell", "comm_info_request", {})).content
    assert c["comms"] == {cid: {"target_name": "plain"}}, c
