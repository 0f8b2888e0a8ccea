"""CurveZMQ on the gateway's five ports (docs/security.md), as ipykernel 7.3 and jupyter_client 8.9
do it: the connection file carries one keypair (curve_publickey, curve_secretkey, Z85), the
gateway makes every socket a CURVE server with it, and a client makes each of its sockets a CURVE
client whose server key is curve_publickey.

Debian's jupyter_client 7.4.9 knows no CurveZMQ, so the clients here are pyzmq sockets set up as
jupyter_client 8.9 sets its own (connect.py `_create_connected_socket`: the file's keypair as
the client's too; channels.py's heartbeat: a fresh client keypair), and they sign the messages
themselves. A gateway here is started from the kernelspec's argv (cellvm-launch, the prebound
path) or as cellvm-gateway itself (it binds), with a connection file written here, and is
killed by pid afterwards (the `reaper` fixture).
"""
import hashlib
import hmac
import json
import pathlib
import subprocess
import time
import uuid

import pytest
import zmq
from jupyter_client.connect import write_connection_file

import firstuse
from gwhelpers import reaper  # noqa: F401  (fixture)
from sessions import (FAKE_KERNEL, GATEWAY, LAUNCH, READY_TIMEOUT, SPECS, TIMEOUT, kernel_spec,
                      require_image, wait_no_leftovers)

KEY = b"curve-test-key-0b7d"
DELIM = b"<IDS|MSG>"
# How long a client that must get nothing is given. A good client's reply comes within
# milliseconds once the gateway answers; a CURVE handshake that fails is refused at once.
QUIET_S = 2.0


def write_conn(tmp_path, pair=None, name="conn.json", **fields):
    """A connection file as jupyter_client writes it, with pair = (public, secret) as bytes
    (zmq.curve_keypair()) added, and fields set (None deletes one). (path, info)."""
    path, _ = write_connection_file(str(tmp_path / name), ip="127.0.0.1", key=KEY)
    info = json.loads(pathlib.Path(path).read_text())
    if pair:
        info["curve_publickey"], info["curve_secretkey"] = pair[0].decode(), pair[1].decode()
    for k, v in fields.items():
        if v is None:
            info.pop(k, None)
        else:
            info[k] = v
    pathlib.Path(path).write_text(json.dumps(info))
    return path, info


class Client:
    """A client's sockets on the gateway's ports. curve: None (plain), or (server_key, public,
    secret) for CURVE client sockets. Messages are signed with KEY (HMAC-SHA256 over header,
    parent header, metadata and content)."""

    def __init__(self, info, curve=None):
        self.info = info
        self.curve = curve
        self.ctx = zmq.Context()
        self.session = uuid.uuid4().hex

    def socket(self, kind, channel):
        s = self.ctx.socket(kind)
        s.linger = 0
        # A send with no peer through the handshake would wait for one for ever: a client
        # the gateway refuses must not hang the test.
        s.sndtimeo = int(QUIET_S * 1000)
        if self.curve:
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = self.curve
        if kind == zmq.SUB:
            s.setsockopt(zmq.SUBSCRIBE, b"")
        s.connect(f"tcp://{self.info['ip']}:{self.info[channel + '_port']}")
        return s

    def send(self, sock, msg_type, content=None):
        """Send a signed request; its msg_id, or None when no peer took it within QUIET_S
        (no CURVE handshake completed)."""
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "session": self.session, "username": "curve-test",
                  "date": "2026-01-01T00:00:00.000000Z", "msg_type": msg_type, "version": "5.3"}
        parts = [json.dumps(header).encode(), b"{}", b"{}", json.dumps(content or {}).encode()]
        sig = hmac.new(KEY, b"".join(parts), hashlib.sha256).hexdigest().encode()
        try:
            sock.send_multipart([DELIM, sig, *parts])
        except zmq.Again:
            return None
        return msg_id

    @staticmethod
    def recv(sock, timeout):
        """The next message on sock as (header, parent_header, content), its signature checked;
        None when nothing came within timeout seconds."""
        if not sock.poll(timeout * 1000):
            return None
        frames = sock.recv_multipart()
        i = frames.index(DELIM)
        sig, h, p, m, c = frames[i + 1:i + 6]
        assert sig == hmac.new(KEY, h + p + m + c, hashlib.sha256).hexdigest().encode()
        return json.loads(h), json.loads(p), json.loads(c)

    def reply_to(self, sock, msg_id, timeout=TIMEOUT):
        """The reply to msg_id (other messages skipped), or None within timeout."""
        if msg_id is None:
            return None
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            msg = self.recv(sock, left)
            if msg is None:
                return None
            if msg[1].get("msg_id") == msg_id:
                return msg
        return None

    def close(self):
        self.ctx.destroy(linger=0)


def start(argv, conn, tmp_path, reaper):
    """Run argv with {connection_file} as conn, its output to a log; (Popen, log path)."""
    log_path = tmp_path / f"gw-{uuid.uuid4().hex[:6]}.log"
    with open(log_path, "wb") as log:
        p = subprocess.Popen([a.replace("{connection_file}", conn) for a in argv],
                             stdout=log, stderr=subprocess.STDOUT)
    reaper(p.pid, log=log_path)
    return p, log_path


def ready(client, sock, timeout=READY_TIMEOUT):
    """kernel_info_request on sock until one is answered (a session may still be starting);
    the reply's content."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rep = client.reply_to(sock, client.send(sock, "kernel_info_request"), timeout=1)
        if rep:
            return rep[2]
    raise AssertionError(f"no kernel_info_reply within {timeout} s")


def iopub_status(client, shell, sub, timeout=TIMEOUT):
    """Requests on shell until sub (a late joiner) sees the status messages of one of them:
    [busy, idle] for that request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id = client.send(shell, "kernel_info_request")
        states = []
        while (msg := Client.recv(sub, 1)) is not None:
            if msg[1].get("msg_id") == msg_id and msg[0]["msg_type"] == "status":
                states.append(msg[2]["execution_state"])
                if states[-1] == "idle":
                    return states
    raise AssertionError("iopub never published a status for a request")


def assert_nothing_reaches(info, curve, tag):
    """A client with these curve options gets nothing on any of the five ports."""
    bad = Client(info, curve)
    try:
        shell, control = bad.socket(zmq.DEALER, "shell"), bad.socket(zmq.DEALER, "control")
        sub, hb = bad.socket(zmq.SUB, "iopub"), bad.socket(zmq.REQ, "hb")
        bad.send(shell, "kernel_info_request")
        bad.send(control, "kernel_info_request")
        try:
            hb.send(b"ping")
        except zmq.Again:
            pass
        deadline = time.monotonic() + QUIET_S
        poller = zmq.Poller()
        for s in (shell, control, sub, hb):
            poller.register(s, zmq.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            got = dict(poller.poll(left * 1000))
            names = [n for n, s in (("shell", shell), ("control", control), ("iopub", sub),
                                    ("hb", hb)) if s in got]
            assert not got, f"{tag}: a client without the server key was answered on {names}"
    finally:
        bad.close()


def serve_curve_only(argv, tmp_path, reaper, prebound):
    """The acceptance of one gateway: good clients are served on all five ports, clients without
    the key (plain, or another server key) get nothing, and the good client is served after
    them; then a curve shutdown_request ends the gateway with 0."""
    pub, sec = zmq.curve_keypair()
    conn, info = write_conn(tmp_path, (pub, sec))
    p, log_path = start(argv, conn, tmp_path, reaper)
    good = Client(info, (pub, pub, sec))                # jupyter_client 8.9's sockets
    try:
        shell, control = good.socket(zmq.DEALER, "shell"), good.socket(zmq.DEALER, "control")
        sub = good.socket(zmq.SUB, "iopub")
        assert ready(good, shell)["status"] == "ok"
        rep = good.reply_to(control, good.send(control, "kernel_info_request"), timeout=10)
        assert rep and rep[0]["msg_type"] == "kernel_info_reply", f"control: {rep}"
        assert iopub_status(good, shell, sub, timeout=10) == ["busy", "idle"]
        hb_pub, hb_sec = zmq.curve_keypair()            # the heartbeat's own keypair, as 8.9's
        hb = Client(info, (pub, hb_pub, hb_sec))
        try:
            beat = hb.socket(zmq.REQ, "hb")
            try:
                beat.send(b"ping-curve")
            except zmq.Again:
                raise AssertionError("hb: no CURVE handshake") from None
            assert beat.poll(10_000) and beat.recv() == b"ping-curve", "hb: no echo"
        finally:
            hb.close()

        assert_nothing_reaches(info, None, "plain")
        other_pub, other_sec = zmq.curve_keypair()
        assert_nothing_reaches(info, (other_pub, other_pub, other_sec), "another server key")

        rep = good.reply_to(shell, good.send(shell, "kernel_info_request"), timeout=10)
        assert rep and rep[2]["status"] == "ok", "the good client was not served afterwards"
        assert p.poll() is None
        text = log_path.read_text()
        assert "curve=yes" in text, text
        assert f"prebound={'yes' if prebound else 'no'}" in text, text
        rep = good.reply_to(control, good.send(control, "shutdown_request", {"restart": False}))
        assert rep and rep[0]["msg_type"] == "shutdown_reply", rep
        assert p.wait(TIMEOUT) == 0
        assert wait_no_leftovers([p.pid]) == []
    finally:
        good.close()


def test_microvm_serves_only_curve_clients(tmp_path, reaper):
    """The `cellvm` kernelspec as a client runs it: cellvm-launch binds the ports first, the
    gateway adopts them (--listen-fds) as CURVE servers, and the kernel runs in a microVM."""
    require_image()
    serve_curve_only(kernel_spec("cellvm").argv, tmp_path, reaper, prebound=True)


@pytest.mark.parametrize("protocol", ["5.3", "5.5"])
def test_unsafe_local_serves_only_curve_clients(tmp_path, reaper, protocol):
    """cellvm-gateway binding the ports itself (no launcher), the real kernel on the host; iopub
    a PUB socket (5.3) or an XPUB (5.5)."""
    argv = [a if a != str(LAUNCH) else str(GATEWAY) for a in kernel_spec("cellvm-unsafe-local").argv]
    assert argv[0] == str(GATEWAY), argv
    argv += ["--protocol", protocol]
    firstuse.ensure()                                   # the kernel runs on the host, as us
    serve_curve_only(argv, tmp_path, reaper, prebound=False)


def test_plain_ports_without_keys(tmp_path, reaper):
    """No keys, no CURVE: a plain client is served, a CURVE client is not (libzmq refuses a
    CURVE handshake with a NULL server), and assert_nothing_reaches sees a plain client
    answered."""
    conn, info = write_conn(tmp_path)
    p, log_path = start([str(GATEWAY), "--connection-file", "{connection_file}", "--backend",
                         "unsafe-local", "--kernel", str(FAKE_KERNEL)], conn, tmp_path, reaper)
    plain = Client(info)
    try:
        assert ready(plain, plain.socket(zmq.DEALER, "shell"))["status"] == "ok"
        assert "curve=no" in log_path.read_text()
    finally:
        plain.close()
    pub, sec = zmq.curve_keypair()
    assert_nothing_reaches(info, (pub, pub, sec), "a CURVE client of a plain gateway")
    with pytest.raises(AssertionError, match="was answered on"):   # the check can fail
        assert_nothing_reaches(info, None, "a plain client of a plain gateway")
    p.terminate()
    assert p.wait(TIMEOUT) == 0


@pytest.mark.parametrize("program", ["gateway", "launch"])
@pytest.mark.parametrize("case,words", [
    ("only_public", 'field "curve_publickey" is given without "curve_secretkey"'),
    ("only_secret", 'field "curve_secretkey" is given without "curve_publickey"'),
    ("short_public", 'field "curve_publickey" must be a CurveZMQ key'),
    ("not_z85_secret", 'field "curve_secretkey" holds a character that is not Z85'),
    ("number", 'field "curve_publickey" must be a CurveZMQ key'),
    ("mismatched", "curve_publickey is not the public key of its curve_secretkey"),
])
def test_bad_curve_key_is_refused(tmp_path, program, case, words):
    """A bad key is refused like any bad connection file: exit 1 and the reason on stderr,
    naming the field and never quoting a key; cellvm-launch passes the file to the gateway
    unchanged, which says the same."""
    pub, sec = zmq.curve_keypair()
    fields = {
        "only_public": {"curve_secretkey": None},
        "only_secret": {"curve_publickey": None},
        "short_public": {"curve_publickey": pub.decode()[:39]},
        "not_z85_secret": {"curve_secretkey": sec.decode()[:20] + "~" + sec.decode()[21:]},
        "number": {"curve_publickey": 12345},
        "mismatched": {"curve_publickey": zmq.curve_keypair()[0].decode()},
    }[case]
    conn, _ = write_conn(tmp_path, (pub, sec), **fields)
    binary = GATEWAY if program == "gateway" else LAUNCH
    r = subprocess.run([str(binary), "--connection-file", conn, "--backend", "unsafe-local",
                        "--kernel", str(FAKE_KERNEL)], capture_output=True, timeout=TIMEOUT)
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert words in err, err
    assert sec.decode() not in err and pub.decode() not in err, err


def test_kernelspecs_declare_curve():
    """jupyter_client 8.9 provisions keys (transport_encryption "auto") only for a kernelspec
    whose metadata.supported_encryption holds "curve"."""
    specs = sorted(SPECS.glob("*/kernel.json"))
    assert specs, f"no kernelspecs under {SPECS}"
    for path in specs:
        meta = json.loads(path.read_text())["metadata"]
        assert meta.get("supported_encryption") == ["curve"], (path, meta)
