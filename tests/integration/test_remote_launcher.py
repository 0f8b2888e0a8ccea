"""cellvm-remote against the front's side of Enterprise Gateway's remote-kernel protocol
(docs/cluster.md), played here from the protocol itself: an RSA-1024 key, a response port on
127.0.0.1, the version-1 payload decrypted with Cryptodome, then the comm port's requests, and a
real cell through the real gateway and microVM with jupyter_client on the connection info that
came back. Every process is started and killed here by pid.
"""
import base64
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from Cryptodome.PublicKey import ECC, RSA
from jupyter_client import BlockingKernelClient

import sessions
from sessions import BUILD, FAKE_KERNEL, IMAGE, READY_TIMEOUT, TIMEOUT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cluster"))
from egfront import Front  # noqa: E402

REMOTE = BUILD / "cellvm-remote"
FIELDS = {"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "ip", "key",
          "transport", "signature_scheme", "kernel_name", "kernel_id", "comm_port", "pid",
          "pgid"}
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "comm_port")
MICROVM = ("--backend", "microvm", "--image", str(IMAGE))
FAKE = ("--backend", "unsafe-local", "--kernel", str(FAKE_KERNEL))


def comm(port, data, shut_wr=False, timeout=5):
    """One request on the comm port as EG sends it: connect, send, (shutdown,) close."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)


def refused(port):
    try:
        comm(port, b'{"signum": 0}')
        return False
    except ConnectionRefusedError:
        return True


def free_range(size=1000):
    lo = random.randrange(20000, 60000 - size)
    return lo, lo + size - 1


def procs_naming(text):
    """Every process whose command line holds text (the kernel id: launcher, gateway)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if any(text in a for a in p.info["cmdline"] or []):
            out.append(p)
    return out


class Launcher:
    """One cellvm-remote run; close() kills by pid whatever it started that still runs."""

    def __init__(self, front, gateway_args=MICROVM, *, args=None, env=None, port_range=None,
                 kernel_id=None, argv=None, preexec_fn=None):
        self.kernel_id = kernel_id or f"remote-test-{os.getpid()}-{random.getrandbits(40):x}"
        self.range = port_range or "%d..%d" % free_range()
        self.logs = sessions.Logs(f"remote-{self.kernel_id}")
        self.log_path = self.logs.dir / "launcher.log"
        self.logs.gateway_log = self.log_path
        if args is None:
            args = ["--kernel-id", self.kernel_id, "--response-address", front.address,
                    "--public-key", front.public_key, "--port-range", self.range]
        self._log = open(self.log_path, "ab")
        argv = argv or [str(REMOTE), *args, "--", *gateway_args]
        self.proc = subprocess.Popen(argv,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})),
                                     start_new_session=True, preexec_fn=preexec_fn)
        self.handles = {self.proc.pid: psutil.Process(self.proc.pid)}

    def track(self):
        for pid in sessions.descendants(self.proc.pid):
            if pid not in self.handles:
                h = sessions.proc(pid)
                if h:
                    self.handles[pid] = h

    def gateway_pid(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            kids = [p for p in psutil.Process(self.proc.pid).children()
                    if p.name().startswith("cellvm-gateway")]
            if kids:
                self.track()
                return kids[0].pid
            time.sleep(0.05)
        raise AssertionError("no cellvm-gateway child")

    def text(self):
        return self.log_path.read_text(errors="replace")

    def close(self):
        self.track()
        sessions.kill_procs(list(self.handles.values()))
        sessions.wait_procs_gone(list(self.handles.values()), 10)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        self.logs.close()


@pytest.fixture
def front():
    f = Front()
    yield f
    f.close()


@pytest.fixture
def launch(front):
    started = []

    def start(*a, **kw):
        launcher = Launcher(front, *a, **kw)
        started.append(launcher)
        return launcher
    yield start
    for launcher in started:
        launcher.close()


def check_info(info, launcher, ip="127.0.0.1"):
    assert set(info) == FIELDS, sorted(set(info) ^ FIELDS)
    lo, hi = (int(x) for x in launcher.range.split(".."))
    ports = [info[p] for p in PORTS]
    assert len(set(ports)) == 6 and all(lo <= p <= hi for p in ports), (ports, launcher.range)
    assert info["ip"] == ip and info["transport"] == "tcp"
    assert info["signature_scheme"] == "hmac-sha256" and len(info["key"]) >= 32
    assert info["kernel_id"] == launcher.kernel_id
    assert info["pid"] == launcher.proc.pid and info["pgid"] == os.getpgid(launcher.proc.pid)


def client(info):
    kc = BlockingKernelClient()
    kc.load_connection_info(dict(info, ip="127.0.0.1", key=info["key"].encode()))
    kc.start_channels()
    kc.wait_for_ready(timeout=READY_TIMEOUT)
    return kc


def result_of(kc, code):
    return sessions.run_cell(kc, code, timeout=TIMEOUT).results()


def all_gone(pids, timeout=30):
    return sessions.wait_gone(pids, timeout)


def wait_for(cond, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def interrupt(kc, how):
    """A long cell, interrupted by how(): its reply is a KeyboardInterrupt error, soon."""
    msg_id = kc.execute("import time; time.sleep(30)")
    while True:                                  # the kernel has taken it: busy for it
        m = kc.get_iopub_msg(timeout=20)
        if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "busy"):
            break
    time.sleep(0.5)                              # and is inside time.sleep
    t0 = time.monotonic()
    how()
    reply = kc.get_shell_msg(timeout=20)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=20)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - t0 < 15


def ready(front, launcher):
    """The reply received and checked, the gateway's pid, and a client that got an answer."""
    info = front.receive()
    check_info(info, launcher)
    return info, launcher.gateway_pid(), client(info)


def test_reply_cell_comm_requests_and_shutdown(front, launch):
    launcher = launch()
    info, gateway, kc = ready(front, launcher)
    try:
        assert result_of(kc, "1+1") == ["2"]
        qemu = sessions.qemu_children(gateway)
        assert qemu, "a QEMU under the gateway"
        launcher.track()
        cport = info["comm_port"]

        comm(cport, b'{"signum": 0}')             # alive: accepted, nothing happens
        # What must never stop the launcher or the kernel:
        comm(cport, b"\x00\xff garbage \x01")
        comm(cport, b"not json at all")
        comm(cport, b'{"signum": "two"}')
        comm(cport, b'{"signum": 2' + b" " * 20000 + b"}")          # oversized
        wait_for(lambda: launcher.text().count("remote.comm_dropped") >= 4, "garbage dropped")
        text = launcher.text()
        assert "not a JSON object" in text and "over 1024 bytes" in text, text[-2000:]
        assert "not a signal number" in text, text[-2000:]
        half = socket.create_connection(("127.0.0.1", cport))     # never finished
        half.sendall(b'{"sig')
        flood = [socket.create_connection(("127.0.0.1", cport)) for _ in range(12)]
        comm(cport, b'{"signum": 0}')             # still served past the flood
        assert launcher.proc.poll() is None
        assert result_of(kc, "2+2") == ["4"]
        for s in flood + [half]:
            s.close()
        assert "too many open connections" in launcher.text()

        # signum 2 during a long cell: the cell ends with KeyboardInterrupt. Then SIGINT to
        # the process group the reply named, as EG's `kill -2 -PGID` fallback sends it: the
        # same, and nothing in the group dies of it.
        interrupt(kc, lambda: comm(cport, b'{"signum": 2}'))
        assert result_of(kc, "3+3") == ["6"]
        interrupt(kc, lambda: os.killpg(info["pgid"], signal.SIGINT))
        assert result_of(kc, "4+4") == ["8"]
        assert launcher.proc.poll() is None and all(sessions.alive(p) for p in qemu)

        # shutdown: launcher, gateway and QEMU gone, the comm port refused, nothing left.
        comm(cport, b'{"shutdown": 1}', shut_wr=True)
        assert all_gone([launcher.proc.pid, gateway] + qemu, 30), launcher.text()[-3000:]
        assert launcher.proc.wait(timeout=5) == 0
        assert refused(cport)
        assert sessions.wait_no_leftovers([gateway]) == []
        assert not list(pathlib.Path(os.environ.get("TMPDIR", "/tmp")).glob(
            f"cellvm-remote-{launcher.kernel_id}-*"))
    finally:
        kc.stop_channels()


def test_signum_15_ends_the_kernel(front, launch):
    launcher = launch()
    info, gateway, kc = ready(front, launcher)
    try:
        qemu = sessions.qemu_children(gateway)
        comm(info["comm_port"], b'{"signum": 15}')
        assert all_gone([launcher.proc.pid, gateway] + qemu, 30), launcher.text()[-3000:]
        assert refused(info["comm_port"])
        assert sessions.wait_no_leftovers([gateway]) == []
    finally:
        kc.stop_channels()


def test_the_kernelspec_as_eg_fills_it_in(front, launch):
    """build's cellvm-remote kernelspec, its placeholders replaced as EG does: a cell runs."""
    spec = json.loads((BUILD / "share" / "jupyter" / "kernels" / "cellvm-remote" /
                       "kernel.json").read_text())
    assert spec["interrupt_mode"] == "message"
    assert spec["metadata"]["process_proxy"]["class_name"].endswith(".DistributedProcessProxy")
    kid = f"remote-spec-{random.getrandbits(40):x}"
    lo, hi = free_range()
    values = {"{kernel_id}": kid, "{response_address}": front.address,
              "{public_key}": front.public_key, "{port_range}": f"{lo}..{hi}"}
    argv = [values.get(a, a) for a in spec["argv"]]
    assert set(values) <= set(spec["argv"]) and argv[0] == str(REMOTE)
    launcher = launch(argv=argv, kernel_id=kid, port_range=f"{lo}..{hi}")
    info, gateway, kc = ready(front, launcher)
    try:
        assert result_of(kc, "6*7") == ["42"]
        comm(info["comm_port"], b'{"shutdown": 1}', shut_wr=True)
        assert all_gone([launcher.proc.pid, gateway], 30), launcher.text()[-3000:]
        assert launcher.proc.wait(timeout=5) == 0
    finally:
        kc.stop_channels()


def test_env_and_old_spellings_signum_9_and_sigterm(front, launch):
    """Pod-style environment, EG's old --RemoteProcessProxy.NAME=VALUE spelling; signum 9 ends
    the kernel (through shutdown_request, so a named session is discarded, not left to resume:
    exit 0); SIGTERM to the launcher is forwarded and it exits with the gateway."""
    kid = f"remote-env-{random.getrandbits(40):x}"
    lo, hi = free_range()
    env = {"KERNEL_ID": kid, "RESPONSE_ADDRESS": front.address, "PUBLIC_KEY": front.public_key,
           "PORT_RANGE": f"{lo}..{hi}"}
    a = launch(FAKE, args=[], env=env, kernel_id=kid, port_range=f"{lo}..{hi}")
    check_info(front.receive(), a)
    a.gateway_pid()

    lo2, hi2 = free_range()
    b = launch(FAKE, args=[f"--RemoteProcessProxy.kernel-id={kid}-b",
                           f"--RemoteProcessProxy.response-address={front.address}",
                           "--RemoteProcessProxy.public-key", front.public_key,
                           f"--RemoteProcessProxy.port-range={lo2}..{hi2}",
                           "--RemoteProcessProxy.spark-context-initialization-mode", "none"],
               env={"KERNEL_ID": "ignored-since-flags-win"}, kernel_id=f"{kid}-b",
               port_range=f"{lo2}..{hi2}")
    info_b = front.receive()
    check_info(info_b, b)
    gw_b = b.gateway_pid()
    comm(info_b["comm_port"], b'{"signum": 9}')
    assert all_gone([b.proc.pid, gw_b], 15), b.text()[-2000:]
    assert b.proc.wait(timeout=5) == 0, b.text()[-2000:]
    assert "msg_type=shutdown_request sent=yes" in b.text(), b.text()[-2000:]

    gw_a = a.gateway_pid()
    a.proc.send_signal(signal.SIGTERM)
    assert all_gone([a.proc.pid, gw_a], 15), a.text()[-2000:]
    assert a.proc.wait(timeout=5) == 0, a.text()[-2000:]


def _run_bad(args, env=None, timeout=30):
    p = subprocess.run([str(REMOTE), *args, "--", *FAKE], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **(env or {})))
    return p.returncode, p.stderr


def _small_rsa_key():
    der = subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                          "rsa_keygen_bits:512", "-outform", "DER"], capture_output=True,
                         check=True).stdout
    key = RSA.import_key(der)
    return base64.b64encode(key.publickey().export_key("DER")).decode()


def test_bad_inputs_exit_1_with_the_reason(front):
    kid = f"remote-bad-{random.getrandbits(40):x}"
    good = ["--kernel-id", kid, "--response-address", front.address, "--public-key",
            front.public_key, "--port-range", "%d..%d" % free_range()]

    def with_(name, value):
        args = list(good)
        args[args.index(name) + 1] = value
        return args
    ec = base64.b64encode(ECC.generate(curve="P-256").public_key().export_key(
        format="DER")).decode()
    cases = [
        (with_("--public-key", "not base64!"), "public key: not base64"),
        (with_("--public-key", base64.b64encode(b"x" * 90).decode()), "not a DER"),
        (with_("--public-key", front.public_key[:-8]), "public key"),
        (with_("--public-key", ec), "not an RSA key"),
        (with_("--public-key", _small_rsa_key()), "RSA key of 512 bits"),
        (with_("--response-address", "127.0.0.1"), "response address '127.0.0.1' is not"),
        (with_("--response-address", "127.0.0.1:99999"), "is not HOST:PORT"),
        (with_("--port-range", "5000..4000"), "port range '5000..4000' is not"),
        (with_("--port-range", "abc"), "port range 'abc' is not"),
        (with_("--port-range", "40000..40003"), "too narrow"),
        (with_("--kernel-id", "../etc"), "kernel id '../etc' is not a safe name"),
        (good[2:], "no kernel id"),
        (good[:4] + good[6:], "no public key"),
    ]
    for args, words in cases:
        rc, err = _run_bad(args)
        assert rc == 1 and words in err, (args[-6:], rc, err)
        assert len(err.strip().splitlines()) == 1, err
    assert not procs_naming(kid)


def test_unreachable_response_address_exit_1_nothing_left(front, launch):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))                   # bound, never listening: refused
    port = dead.getsockname()[1]
    launcher = launch(FAKE, args=["--kernel-id", "remote-unreach-%x" % random.getrandbits(40),
                                  "--response-address", f"127.0.0.1:{port}", "--public-key",
                                  front.public_key, "--launch-timeout", "2"])
    try:
        gateway = launcher.gateway_pid()
        assert launcher.proc.wait(timeout=20) == 1
        assert "unreachable within the launch timeout (2 s)" in launcher.text()
        assert all_gone([gateway], 10)
        assert not procs_naming(launcher.kernel_id)
        assert not list(pathlib.Path(os.environ.get("TMPDIR", "/tmp")).glob(
            f"cellvm-remote-{launcher.kernel_id}-*"))
    finally:
        dead.close()


def test_sigterm_while_the_reply_waits_ends_it_at_once(front, launch):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    launcher = launch(FAKE, args=["--kernel-id", "remote-stop-%x" % random.getrandbits(40),
                                  "--response-address", f"127.0.0.1:{dead.getsockname()[1]}",
                                  "--public-key", front.public_key])
    try:
        gateway = launcher.gateway_pid()
        t0 = time.monotonic()
        launcher.proc.send_signal(signal.SIGTERM)
        assert launcher.proc.wait(timeout=10) == 1
        assert time.monotonic() - t0 < 8, "not the 30 s launch timeout"
        assert "stopped by a signal before the reply reached" in launcher.text()
        assert all_gone([gateway], 10) and not procs_naming(launcher.kernel_id)
    finally:
        dead.close()


def _ignore_what_a_background_job_ignores():
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def test_inherited_ignores_lose_neither_status_nor_signals(front, launch):
    """Started with SIGCHLD, SIGINT and SIGTERM ignored: the gateway's exit status still comes
    back (an ignored SIGCHLD reaps children unasked), and SIGTERM is still forwarded."""
    a = launch(FAKE, preexec_fn=_ignore_what_a_background_job_ignores)
    info = front.receive()
    check_info(info, a)
    comm(info["comm_port"], b'{"signum": 9}')
    assert a.proc.wait(timeout=15) == 0, a.text()[-2000:]
    b = launch(FAKE, preexec_fn=_ignore_what_a_background_job_ignores)
    front.receive()
    gateway = b.gateway_pid()
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=15) == 0 and all_gone([gateway], 10), b.text()[-2000:]


def test_ip_picks_the_listen_address(front, launch):
    """--ip 127.0.0.1: the reply says so, all six ports listen there only, and the shutdown still
    reaches the control port."""
    lo, hi = free_range()
    kid = f"remote-ip-{random.getrandbits(40):x}"
    a = launch(FAKE, kernel_id=kid, port_range=f"{lo}..{hi}",
               args=["--kernel-id", kid, "--response-address", front.address, "--public-key",
                     front.public_key, "--port-range", f"{lo}..{hi}", "--ip", "127.0.0.1"])
    info = front.receive()
    check_info(info, a, ip="127.0.0.1")
    gateway = a.gateway_pid()
    kc = client(info)
    try:
        assert result_of(kc, "20+1") == ["21"]
        bound = {c.laddr for p in (a.proc.pid, gateway)
                 for c in psutil.Process(p).connections("tcp") if c.status == "LISTEN"}
        assert {(x.ip, x.port) for x in bound} == {("127.0.0.1", info[k]) for k in PORTS}
        comm(info["comm_port"], b'{"shutdown": 1}', shut_wr=True)
        assert a.proc.wait(timeout=15) == 0 and all_gone([gateway], 10), a.text()[-2000:]
    finally:
        kc.stop_channels()


def test_a_range_without_six_free_ports_exit_1(front):
    lo, _ = free_range()
    taken = socket.socket()
    taken.bind(("0.0.0.0", lo + 3))
    taken.listen(1)
    try:
        rc, err = _run_bad(["--kernel-id", "remote-full-%x" % random.getrandbits(40),
                            "--response-address", front.address, "--public-key",
                            front.public_key, "--port-range", f"{lo}..{lo + 5}"])
        assert rc == 1 and f"in {lo}..{lo + 5} on 0.0.0.0: Address already in use" in err, err
        assert err.startswith("cellvm-remote: no free port for ")
    finally:
        taken.close()


def test_an_evicted_kernel_relaunched_with_its_kernel_id_resumes(front, launch, tmp_path):
    """The session is named after the kernel id: SIGTERM to the launcher (a pod evicted, a node
    drained) suspends it into the store and exits 0; EG's relaunch with the same kernel id
    resumes it, new ports and all; the comm port's shutdown then discards it."""
    store = tmp_path / "store"
    kid = f"remote-move-{random.getrandbits(40):x}"
    a = launch(MICROVM + ("--snapshot-dir", str(store)), kernel_id=kid)
    info, gw, kc = ready(front, a)
    try:
        assert result_of(kc, "v = 6 * 7; v") == ["42"]
    finally:
        kc.stop_channels()
    assert f"--session-name {kid}" in " ".join(psutil.Process(gw).cmdline())
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=READY_TIMEOUT) == 0, a.text()[-2000:]
    assert all_gone([gw], 15)
    assert (store / f"session-{kid}" / "meta.json").exists(), a.text()[-2000:]
    b = launch(MICROVM + ("--snapshot-dir", str(store)), kernel_id=kid)
    info_b, gw_b, kc = ready(front, b)
    try:
        assert info_b["shell_port"] != info["shell_port"]
        assert result_of(kc, "v") == ["42"]
    finally:
        kc.stop_channels()
    comm(info_b["comm_port"], b'{"shutdown": 1}')
    assert b.proc.wait(timeout=30) == 0, b.text()[-2000:]
    assert not (store / f"session-{kid}").exists()


def test_encryption_curve_hands_the_front_a_keypair_that_guards_the_ports(front, launch):
    """--encryption curve (here CELLVM_REMOTE_ENCRYPTION, as a pod gets it): a keypair of the
    launcher's own in the connection file and the reply; a client with it is answered, a plain
    one gets nothing."""
    import zmq
    from jupyter_client.session import Session
    a = launch(FAKE, env={"CELLVM_REMOTE_ENCRYPTION": "curve"})
    info = front.receive()
    pub, sec = info.pop("curve_publickey"), info.pop("curve_secretkey")
    check_info(info, a)
    assert len(pub) == 40 and len(sec) == 40 and pub != sec
    assert zmq.curve_public(sec.encode()) == pub.encode()
    session = Session(key=info["key"].encode())
    ctx = zmq.Context()
    try:
        def shell(curve):
            s = ctx.socket(zmq.DEALER)
            s.linger, s.sndtimeo = 0, 2000
            if curve:
                s.curve_serverkey, s.curve_publickey, s.curve_secretkey = (
                    pub.encode(), pub.encode(), sec.encode())
            s.connect(f"tcp://127.0.0.1:{info['shell_port']}")
            return s
        good, plain = shell(True), shell(False)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:                      # the gateway may still be starting its kernel
            session.send(good, "kernel_info_request", {})
            if good.poll(1000):
                break
            assert time.monotonic() < deadline, "no kernel_info_reply through CurveZMQ"
        _, reply = session.recv(good)
        assert reply["msg_type"] == "kernel_info_reply", reply
        try:
            session.send(plain, "kernel_info_request", {})
        except zmq.Again:
            pass
        assert not plain.poll(2000), "a client without the keys was answered"
    finally:
        ctx.destroy(linger=0)


def test_an_unknown_encryption_is_refused():
    rc, err = _run_bad(["--kernel-id", "k", "--response-address", "127.0.0.1:1",
                        "--public-key", "x", "--encryption", "tls"])
    assert rc == 1 and "encryption 'tls' is not known: use none or curve" in err, err
