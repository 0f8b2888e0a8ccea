"""Output a client missed (docs/replay.md): `cellvm_replay_request` on control sends a cell's
IOPub output again, or everything since a msg_id, to a client that reconnects.

One session per backend (the 5.3 kernelspecs `cellvm-unsafe-local` and `cellvm`) for the module.
The reconnecting client is a fresh BlockingKernelClient on the session's connection file, as
`jupyter console --existing` would make it.
"""
import time

import pytest
from jupyter_client import BlockingKernelClient

from sessions import BACKENDS, TIMEOUT, Session

CELL = ("import sys\nfrom IPython.display import HTML, display\nprint('out 1')\n"
        "display(HTML('<b>shown</b>'))\nprint('err 1', file=sys.stderr)\n6 * 7")


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def s(request):
    sess = Session(BACKENDS[request.param])
    try:
        sess.start()
        yield sess
    finally:
        sess.close()


@pytest.fixture
def kc2(s):
    """A second client on the same connection file: the one that reconnects."""
    kc = BlockingKernelClient(connection_file=s.km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)
        yield kc
    finally:
        kc.stop_channels()


def replay(kc, content, timeout=TIMEOUT):
    """Send cellvm_replay_request; (the replayed messages in order, the reply). Checks the
    request's busy comes first and its idle last on IOPub."""
    msg = kc.session.msg("cellvm_replay_request", content)
    kc.control_channel.send(msg)
    req = msg["header"]["msg_id"]
    deadline = time.monotonic() + timeout
    states, replayed = [], []
    while not states or states[-1] != "idle":
        m = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == req:
            assert m["msg_type"] == "status", m
            states.append(m["content"]["execution_state"])
        elif m["metadata"].get("cellvm_replay_request") == req:
            assert states == ["busy"], "a replayed message outside busy..idle"
            replayed.append(m)
    assert states == ["busy", "idle"]
    while True:
        rep = kc.get_control_msg(timeout=max(0.01, deadline - time.monotonic()))
        if rep["parent_header"].get("msg_id") == req:
            assert rep["msg_type"] == "cellvm_replay_reply"
            return replayed, rep["content"]


def outputs(cell):
    return [m for m in cell.msgs if m["msg_type"] != "status"]


def assert_same(replayed, originals):
    assert [m["msg_type"] for m in replayed] == [m["msg_type"] for m in originals]
    for r, o in zip(replayed, originals):
        assert r["content"] == o["content"]
        assert r["parent_header"] == o["parent_header"]          # the original request
        assert r["header"]["msg_id"] != o["header"]["msg_id"]    # a message of its own
        assert r["metadata"]["cellvm_replay"] is True
        assert r["metadata"]["cellvm_replay_of"] == o["header"]["msg_id"]
        assert {k: v for k, v in r["metadata"].items() if not k.startswith("cellvm_replay")} \
            == o["metadata"]


def test_reconnecting_client_gets_the_cell_again(s, kc2):
    cell = s.run(CELL)
    assert cell.status == "ok", cell.describe()
    originals = outputs(cell)
    assert [m["msg_type"] for m in originals] == ["execute_input", "stream", "display_data",
                                                  "stream", "execute_result"]
    replayed, reply = replay(kc2, {"msg_id": cell.msg_id})
    assert_same(replayed, originals)
    assert reply["status"] == "ok" and reply["count"] == len(originals)
    assert reply["bytes"] > len("out 1") + len("<b>shown</b>")
    assert all(m["parent_header"]["msg_id"] == cell.msg_id for m in replayed)


def test_since_a_cell_or_a_message(s, kc2):
    a = s.run("print('A')")
    b = s.run("print('B')")
    replayed, reply = replay(kc2, {"since": a.msg_id})
    assert_same(replayed, outputs(a) + outputs(b))
    assert reply["count"] == len(replayed)
    a_stream = a.of_type("stream")[-1]
    replayed, _ = replay(kc2, {"since": a_stream["header"]["msg_id"]})
    assert_same(replayed, outputs(b))


def test_a_long_replay_goes_out_whole_and_in_order(s, kc2):
    cell = s.run("for i in range(400):\n    print('line', i, flush=True)")
    assert cell.status == "ok" and cell.stdout.count("line") == 400
    originals = outputs(cell)
    assert len(originals) > 2 * 128, len(originals)    # more than two of the gateway's batches
    replayed, reply = replay(kc2, {"msg_id": cell.msg_id})
    assert_same(replayed, originals)
    assert reply["count"] == len(originals)


def test_evicted_and_too_large_cells_say_why(s, kc2):
    first = s.run("print('first')")
    for i in range(32):                          # the buffer keeps 32 cells
        assert s.run(f"x = {i}").status == "ok"
    _, reply = replay(kc2, {"msg_id": first.msg_id})
    assert reply["status"] == "error" and reply["ename"] == "ReplayUnavailable"
    assert "evicted" in reply["evalue"] and "32 cells" in reply["evalue"], reply
    big = s.run("print('x' * (17 << 20))")
    assert big.status == "ok" and len(big.stdout) > 17 << 20
    _, reply = replay(kc2, {"msg_id": big.msg_id})
    assert reply["ename"] == "ReplayUnavailable"
    assert "larger than the replay buffer (16 MiB)" in reply["evalue"], reply
    replayed, reply = replay(kc2, {"since": big.msg_id})
    assert reply["status"] == "ok" and reply["skipped"] == [big.msg_id]


@pytest.mark.parametrize("content,words", [
    ({}, "missing"),
    ({"msg_id": 7}, "must be a msg_id"),
    ({"msg_id": ""}, "must be a msg_id"),
    ({"since": ["x"]}, "must be a msg_id"),
    ({"msg_id": "a", "since": "b"}, "not both"),
])
def test_bad_request_gets_an_error_reply(s, kc2, content, words):
    replayed, reply = replay(kc2, content)
    assert replayed == []
    assert reply["status"] == "error" and reply["ename"] == "BadRequest"
    assert words in reply["evalue"] and reply["traceback"] == []
    assert s.run("1 + 1").results() == ["2"]           # the gateway goes on


def test_unknown_msg_id(s, kc2):
    _, reply = replay(kc2, {"msg_id": "no-such-request"})
    assert reply["ename"] == "ReplayUnavailable" and "Nothing is kept" in reply["evalue"]
