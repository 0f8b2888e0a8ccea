"""Jupyter protocol 5.5, opt-in (docs/gateway.md, "Protocol 5.5"): `--protocol 5.5` (the
`cellvm-5.5` kernelspec) makes IOPub an XPUB that sends each new subscriber an `iopub_welcome`,
and kernel_info_reply says protocol_version 5.5 with its supported_features. The 5.3 kernelspecs
keep their PUB socket and send no welcome.

The 5.5 checks run on unsafe-local (the cellvm-unsafe-local kernelspec plus `--protocol 5.5`) and
on the `cellvm-5.5` kernelspec (microvm); one session per backend for the module. IOPub is read
with raw ZeroMQ SUB sockets whose every message's HMAC is verified here.
"""
import hashlib
import hmac
import json
import time

import pytest
import zmq

from sessions import SPECS, TIMEOUT, Session, collect

SPECS_55 = {"unsafe-local": ("cellvm-unsafe-local", ["--protocol", "5.5"]),
            "microvm": ("cellvm-5.5", [])}
DELIM = b"<IDS|MSG>"
# Output flowing on IOPub while subscribers join: ~3 s of lines, 10 ms apart.
TICKER = "import time\nfor i in range(300):\n    print('tick', i, flush=True)\n    time.sleep(0.01)"


@pytest.fixture(scope="module", params=sorted(SPECS_55))
def s55(request):
    name, extra = SPECS_55[request.param]
    s = Session(name, extra_args=extra)
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def s53():
    s = Session("cellvm-unsafe-local")
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def subscriber(ctx, session, topic=b""):
    info = session.connection_info
    sock = ctx.socket(zmq.SUB)
    sock.linger = 0
    sock.connect(f"tcp://{info['ip']}:{info['iopub_port']}")
    sock.setsockopt(zmq.SUBSCRIBE, topic)
    return sock


def recv_verified(sock, key, timeout=10.0):
    """The next IOPub message, its signature checked (HMAC-SHA256 over the four JSON frames);
    None when nothing comes within timeout."""
    if not sock.poll(int(timeout * 1000)):
        return None
    frames = sock.recv_multipart()
    d = frames.index(DELIM)
    parts = frames[d + 2:d + 6]
    expect = hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()
    assert hmac.compare_digest(frames[d + 1], expect), "bad signature"
    header, parent, metadata, content = (json.loads(p) for p in parts)
    return {"topic": frames[:d], "header": header, "parent_header": parent,
            "metadata": metadata, "content": content, "msg_type": header["msg_type"]}


def assert_welcome(msg, subscription):
    assert msg is not None, "no message at all"
    assert msg["msg_type"] == "iopub_welcome", msg
    assert msg["content"] == {"subscription": subscription}
    assert msg["parent_header"] == {}
    assert msg["header"]["version"] == "5.5"
    assert msg["topic"] == [subscription.encode()]


def wait_stream(kc, msg_id):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = kc.get_iopub_msg(timeout=TIMEOUT)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
            return
    raise AssertionError("the ticker printed nothing")


def test_kernel_info_on_control_and_shell(s55):
    rep = s55.control("kernel_info_request")     # read from the control channel
    c = rep["content"]
    assert rep["msg_type"] == "kernel_info_reply" and c["status"] == "ok"
    assert c["protocol_version"] == "5.5" and rep["header"]["version"] == "5.5"
    assert c["supported_features"] == ["debugger"]   # the kernel's debugpy; no subshells
    assert c["language_info"]["name"] == "python"
    shell = s55.kc.kernel_info(reply=True, timeout=TIMEOUT)
    assert shell["content"]["protocol_version"] == "5.5"
    assert shell["content"]["supported_features"] == ["debugger"]


def test_each_subscriber_is_welcomed_first_while_output_flows(s55, zctx):
    msg_id = s55.kc.execute(TICKER)
    wait_stream(s55.kc, msg_id)                   # output is flowing now
    first = subscriber(zctx, s55)
    assert_welcome(recv_verified(first, s55.key), "")
    m = recv_verified(first, s55.key)              # then the live output
    assert m["msg_type"] == "stream" and m["parent_header"]["msg_id"] == msg_id
    second = subscriber(zctx, s55)
    assert_welcome(recv_verified(second, s55.key), "")
    topical = subscriber(zctx, s55, b"stream.")
    assert_welcome(recv_verified(topical, s55.key), "stream.")
    m = recv_verified(topical, s55.key)
    assert m["msg_type"] == "stream"
    # The first subscriber sees the others' welcomes too, as the spec says it may.
    seen = []
    while (m := recv_verified(first, s55.key, timeout=0.5)) and len(seen) < 1000:
        seen.append(m)
    welcomes = [m["content"]["subscription"] for m in seen if m["msg_type"] == "iopub_welcome"]
    assert sorted(welcomes) == ["", "stream."], welcomes
    r = collect(s55.kc, msg_id)
    assert r.status == "ok" and "tick 299" in r.stdout


def test_a_flood_of_subscriptions_stalls_nothing(s55, zctx):
    """Anyone who can reach the port may subscribe: 300 topics, one that is not UTF-8 and one of
    2 KiB get the gateway through them a batch per turn (the watchdog would catch a long one),
    without a welcome for the two odd ones, and the session goes on."""
    flood = subscriber(zctx, s55, b"t-0")
    for i in range(1, 300):
        flood.setsockopt(zmq.SUBSCRIBE, f"t-{i}".encode())
    flood.setsockopt(zmq.SUBSCRIBE, b"\xff\xfe")
    flood.setsockopt(zmq.SUBSCRIBE, b"x" * 2048)
    got = set()
    while (m := recv_verified(flood, s55.key, timeout=2)) and len(got) < 300:
        assert m["msg_type"] == "iopub_welcome"
        got.add(m["content"]["subscription"])
    assert got == {f"t-{i}" for i in range(300)}
    assert recv_verified(flood, s55.key, timeout=0.5) is None
    # XPUB keeps what a peer sends up until it is read: a peer that sends more than a
    # subscription is cut off (4 KiB), not buffered.
    junk = zctx.socket(zmq.XSUB)
    junk.linger = 0
    info = s55.connection_info
    junk.connect(f"tcp://{info['ip']}:{info['iopub_port']}")
    for _ in range(20):                          # not subscriptions: libzmq's XSUB crashes at
        junk.send(b"j" * (1 << 20))               # exit after 1 MiB ones (the sender, not us)
    assert s55.run("print('still here')").stdout == "still here\n"


def test_53_sends_no_welcome(s53, zctx):
    sub = subscriber(zctx, s53)
    assert recv_verified(sub, s53.key, timeout=1.5) is None
    msg_id = s53.kc.kernel_info()
    m = recv_verified(sub, s53.key)
    assert m["msg_type"] == "status" and m["parent_header"]["msg_id"] == msg_id
    rep = s53.control("kernel_info_request")
    assert rep["content"]["protocol_version"] == "5.3"
    assert "supported_features" not in rep["content"]
    assert rep["header"]["version"] == "5.3"


def test_53_and_55_log_their_protocol(s55, s53):
    assert "protocol=5.5" in s55.log_path.read_text()
    assert "protocol=5.3" in s53.log_path.read_text()


def test_kernelspecs_say_their_protocol():
    spec = json.loads((SPECS / "cellvm-5.5" / "kernel.json").read_text())
    assert spec["kernel_protocol_version"] == "5.5"      # read by jupyter_client >= 8.8
    argv = spec["argv"]
    assert argv[argv.index("--protocol") + 1] == "5.5" and "microvm" in argv
    for name in ("cellvm", "cellvm-agent", "cellvm-unsafe-local"):
        spec = json.loads((SPECS / name / "kernel.json").read_text())
        assert "kernel_protocol_version" not in spec and "--protocol" not in spec["argv"]
