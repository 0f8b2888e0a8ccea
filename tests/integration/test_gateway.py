"""cellvm-gateway acceptance tests, driven the way Jupyter drives a kernel.

Three kinds of kernel sit behind the gateway:

- "fake": tests/integration/fake_kernel.py, a scriptable kernel that can also
  misbehave on purpose (hostile frames, deaths). These test the gateway alone.
- "unsafe-local" and "microvm": the real kernel, through the build's kernelspecs
  (`cellvm-unsafe-local`, and `cellvm`: the kernel in a QEMU microVM). The
  lifecycle tests (interrupt, kill, restart, shutdown, bad input on a live
  session) run against each; they FAIL (never skip) when a kernelspec, the real
  kernel or the guest image is missing or broken.

Tests of the client-facing wire alone (signatures, framing, connection files)
run once, behind the fake kernel. Sessions come from sessions.Session (the fake
kernel is its kernel "fake"); every process a test starts is recorded by pid and
killed at the end. The hostile-kernel tests (the fake kernel breaking the
channel protocol, dying, timing out) are in test_gateway_hostile.py; the
fixtures and helpers both modules use are in gwhelpers.py.
"""
import datetime
import hashlib
import hmac
import json
import os
import queue
import signal
import socket
import subprocess
import time
import uuid

import psutil
import pytest
import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from gwhelpers import KEY, gw, reaper, start_gateway, wait_iopub  # noqa: F401  (fixtures)
from sessions import (BACKENDS, FAKE_KERNEL as FAKE, READY_TIMEOUT, TIMEOUT, Session, gone,
                      qemu_run_dir, run_cell, wait_gone)

DELIM = b"<IDS|MSG>"


# --------------------------------------------------------------------------
# Raw wire helpers (pyzmq), for input no Jupyter client would send.

def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def sign(key, parts):
    return hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()


def raw_request(msg_type, content=None, key=KEY, msg_id=None):
    """(frames, msg_id) of a correctly signed request."""
    msg_id = msg_id or uuid.uuid4().hex
    header = {"msg_id": msg_id, "session": "raw-session", "username": "test", "date": utcnow(),
              "msg_type": msg_type, "version": "5.3"}
    parts = [json.dumps(header).encode(), b"{}", b"{}", json.dumps(content or {}).encode()]
    return [DELIM, sign(key, parts), *parts], msg_id


def recv_reply(sock, timeout=TIMEOUT, key=KEY):
    """Next message on a raw DEALER: (header, parent_header, content)."""
    if not sock.poll(timeout * 1000):
        raise AssertionError("no reply")
    frames = sock.recv_multipart()
    i = frames.index(DELIM)
    sig, h, p, m, c = frames[i + 1:i + 6]
    assert sig == sign(key, [h, p, m, c]), "gateway signature does not verify"
    return json.loads(h), json.loads(p), json.loads(c)


def assert_next_reply_is(sock, msg_id, key=KEY):
    """The next reply on sock answers msg_id: nothing came for what was sent before it."""
    header, parent, content = recv_reply(sock, key=key)
    assert parent["msg_id"] == msg_id, f"got a reply to {parent.get('msg_id')}, not {msg_id}"
    return header, content


# --------------------------------------------------------------------------
# Jupyter client helpers (cells: sessions.run_cell; wait_iopub: gwhelpers).

def wait_reply(kc, msg_id, timeout=TIMEOUT, channel="shell"):
    get = kc.get_shell_msg if channel == "shell" else kc.get_control_msg
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no {channel} reply to {msg_id} within {timeout} s") from None
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def collect_until_idle(kc, msg_id, timeout=TIMEOUT):
    out = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            out.append(("other", msg))
            continue
        out.append(("mine", msg))
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out


# --------------------------------------------------------------------------
# KernelManager: the way JupyterLab, nbclient and agents start a kernel. The lifecycle tests
# (interrupt, kill, restart, shutdown) run behind the fake kernel (the gateway alone) and
# through both backends' kernelspecs. The microVM kernel is shared by the tests in this
# section (a cold VM takes ~14 s under TCG): in file order, interrupt (its first error), kill
# (the kernel is restarted inside the same VM), bad input, restart (a new gateway and VM),
# shutdown (the end of it).
# A shared kernel that stopped answering is replaced before the next test.

@pytest.fixture(scope="module")
def shared_microvm():
    pool = {}
    yield pool
    for k in pool.values():
        k.close()


@pytest.fixture(params=["fake", "unsafe-local", "microvm"])
def kernel(request, shared_microvm):
    """A started sessions.Session (.km, .kc, .kind) behind the fake kernel or a backend's
    kernelspec. Everything it started is killed by pid afterwards."""
    which = request.param
    if which == "microvm":
        k = shared_microvm.get(which)
        if k is None or not k.alive():
            shared_microvm.pop(which, None)
            if k is not None:
                k.close()
            k = shared_microvm[which] = Session(BACKENDS[which])     # closed at module end
            k.start()
        try:
            yield k
        finally:
            k.track()
            if not k.km.has_kernel:                     # the test shut it down
                shared_microvm.pop(which, None)
                k.close()
        return
    request.getfixturevalue("gateway_bin" if which == "fake" else "kernel_bin")  # fail loudly
    k = Session("fake" if which == "fake" else BACKENDS[which])
    try:
        k.start()
        yield k
    finally:
        k.close()


def guest_pid(kernel):
    return int(kernel.value("import os; os.getpid()"))


def test_interrupt_stops_sleep_within_1s(kernel):
    kc = kernel.kc
    msg_id = kc.execute("import time; time.sleep(100)")
    wait_iopub(kc, msg_id, "execute_input")
    time.sleep(0.2)                                  # let the sleep itself begin
    t0 = time.monotonic()
    kernel.km.interrupt_kernel()
    reply = wait_reply(kc, msg_id, timeout=5)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0, f"interrupt took {elapsed:.2f} s"
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert run_cell(kc, "1 + 1").status == "ok"      # still the same, working kernel


def test_killing_kernel_mid_cell_gives_error_then_working_kernel(kernel):
    kc = kernel.kc
    assert run_cell(kc, "y = 1").status == "ok"
    before = guest_pid(kernel)
    if kernel.kind == "microvm":
        # The kernel is in the guest: another guest process SIGKILLs it while it sleeps.
        qemu = kernel.qemu_pid()
        msg_id = kc.execute("import os, subprocess, time\n"
                            "subprocess.Popen(['/bin/sh', '-c', 'sleep 0.5; kill -9 %d' % os.getpid()])\n"
                            "time.sleep(100)")
        wait_iopub(kc, msg_id, "execute_input")
    else:
        msg_id = kc.execute("import time; time.sleep(100)")
        wait_iopub(kc, msg_id, "execute_input")
        assert kernel.kernel_pid() == before
        os.kill(before, signal.SIGKILL)
    msgs = collect_until_idle(kc, msg_id)
    errors = [m for who, m in msgs if who == "mine" and m["msg_type"] == "error"]
    assert len(errors) == 1, [m["msg_type"] for _, m in msgs]
    assert "SIGKILL" in errors[0]["content"]["evalue"]
    assert "re-run" in errors[0]["content"]["evalue"]
    reply = wait_reply(kc, msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KernelDied"
    # The client sees the kernel restarting, then starting.
    states = [m["content"]["execution_state"] for _, m in msgs if m["msg_type"] == "status"]
    deadline = time.monotonic() + TIMEOUT
    while not ("restarting" in states and "starting" in states[states.index("restarting"):]):
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["msg_type"] == "status":
            states.append(msg["content"]["execution_state"])
    assert run_cell(kc, "1 + 1").status == "ok"      # a new kernel answers
    assert run_cell(kc, "y").content["ename"] == "NameError"    # with a fresh namespace
    assert not gone(kernel.gateway_pid)
    if kernel.kind == "microvm":    # a warm kernel: the template restored over the same disk
        assert kernel.qemu_pid() not in (None, qemu), "the kernel came back in a new VM"
    else:                           # (a restored kernel has its template's guest pid)
        assert guest_pid(kernel) != before


@pytest.mark.parametrize("kernel", ["unsafe-local", "microvm"], indirect=True)
def test_bad_input_never_reaches_a_real_kernel(kernel):
    """Every bad input of the gateway suite, on shell and on control of a real session: none
    is answered, none reaches the kernel, and the next good request is answered."""
    info = kernel.km.get_connection_info()
    key = info["key"]
    count = run_cell(kernel.kc, "bad_hits = []").content["execution_count"]
    ctx = zmq.Context()
    try:
        for channel in ("shell", "control"):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"{info['transport']}://{info['ip']}:{info[channel + '_port']}")
            for make_bad in BAD_INPUTS:
                code = f"bad_hits.append({make_bad.__name__!r})"
                frames, _, _ = make_bad(key=key, msg_type="execute_request",
                                        content=json.dumps({"code": code}).encode(),
                                        max_msg=64 << 20)
                sock.send_multipart(frames)
            good, good_id = raw_request("kernel_info_request", key=key)
            sock.send_multipart(good)
            header, content = assert_next_reply_is(sock, good_id, key=key)
            assert content["status"] == "ok"
            sock.close()
    finally:
        ctx.destroy(linger=0)
    r = run_cell(kernel.kc, "bad_hits")
    assert r.status == "ok"
    assert r.content["execution_count"] == count + 1, "a bad execute_request ran"
    assert r.results() == ["[]"]


def test_restart_gives_fresh_namespace(kernel):
    kc = kernel.kc
    assert run_cell(kc, "x = 42").status == "ok"
    old = [kernel.gateway_pid] + ([kernel.qemu_pid()] if kernel.kind == "microvm" else [])
    kernel.km.restart_kernel(now=False)
    kernel.track()
    assert wait_gone(old, 2), "the old gateway (or its VM) outlived the restart"
    kc.wait_for_ready(timeout=READY_TIMEOUT)
    kernel.track()
    r = run_cell(kc, "x")
    assert r.status == "error"
    assert r.content["ename"] == "NameError"


def test_shutdown_leaves_no_process_behind(kernel):
    kc = kernel.kc
    r = run_cell(kc, "import subprocess\np = subprocess.Popen(['sleep', '300'])\np.pid")
    assert r.status == "ok"
    gw = kernel.gateway_pid
    if kernel.kind == "microvm":
        qemu = kernel.qemu_pid()
        run_dir = qemu_run_dir(qemu)
        assert run_dir and run_dir.is_dir()
        must_go = [gw, qemu]                          # the sleep is inside the VM
    else:
        grandchild = int(r.results()[0])
        must_go = [gw, kernel.kernel_pid(), grandchild]
    t0 = time.monotonic()
    kernel.km.shutdown_kernel(now=False)
    elapsed = time.monotonic() - t0
    # jupyter_client SIGTERMs at 2.5 s: the gateway must be gone well before.
    assert elapsed < 2.0, f"shutdown took {elapsed:.2f} s"
    assert wait_gone(must_go, 2), "a process outlived shutdown"
    if kernel.kind == "microvm":
        assert not run_dir.exists(), f"{run_dir} outlived shutdown: {list(run_dir.iterdir())}"


def test_restarting_status_is_published(gw):
    kc = gw.kc
    msg_id = kc.execute("%fake exit 3")
    states = []
    deadline = time.monotonic() + TIMEOUT
    while "starting" not in states and time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=TIMEOUT)
        if msg["msg_type"] == "status":
            states.append(msg["content"]["execution_state"])
    # the cell's own busy/idle, then the new kernel: restarting, starting
    assert states[-2:] == ["restarting", "starting"], states
    reply = wait_reply(kc, msg_id)
    assert "status 3" in reply["content"]["evalue"]


@pytest.mark.parametrize("code,words", [
    ("%fake exit 3", "exited unexpectedly with status 3"),
    ("%fake signal 11", "SIGSEGV"),
    ("%fake signal 6", "SIGABRT"),
])
def test_kernel_death_is_explained_in_words(gw, code, words):
    r = run_cell(gw.kc, code)
    assert len(r.errors) == 1 and words in r.errors[0]["content"]["evalue"]
    assert r.status == "error"
    assert run_cell(gw.kc, "2 * 21").status == "ok"


# --------------------------------------------------------------------------
# Process behaviour: signals, heartbeat, control, held requests, routing.

def test_sigterm_is_a_clean_shutdown(gw):
    kernel = gw.kernel_pid()
    t0 = time.monotonic()
    os.kill(gw.gateway_pid, signal.SIGTERM)
    assert gw.proc.wait(5) == 0
    assert time.monotonic() - t0 < 1.5
    assert wait_gone([kernel], 2)


def test_sigint_is_ignored(gw):
    os.kill(gw.gateway_pid, signal.SIGINT)
    reply = gw.kc.kernel_info(reply=True, timeout=TIMEOUT)
    assert reply["content"]["status"] == "ok"
    assert gw.proc.poll() is None


def test_gateway_exits_when_its_jupyter_parent_dies(gateway_bin, tmp_path, reaper):
    conn, _ = write_connection_file(str(tmp_path / "conn.json"), ip="127.0.0.1", key=KEY)
    # sh starts the gateway in the background, names itself as the Jupyter
    # client (JPY_PARENT_PID) and exits: the gateway is orphaned.
    cmd = (f"JPY_PARENT_PID=$$ '{gateway_bin}' --connection-file '{conn}' --backend "
           f"unsafe-local --kernel '{FAKE}' >/dev/null 2>&1 & echo $!")
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, timeout=10)
    pid = int(out.stdout)
    reaper(pid)
    assert wait_gone([pid], 10), "orphaned gateway kept running"


def test_shutdown_request_exits_promptly(gw):
    kernel = gw.kernel_pid()
    t0 = time.monotonic()
    msg_id = gw.kc.shutdown()
    reply = wait_reply(gw.kc, msg_id, channel="control")
    assert reply["content"] == {"status": "ok", "restart": False}
    assert gw.proc.wait(5) == 0
    assert time.monotonic() - t0 < 1.0
    assert wait_gone([kernel], 2)


def test_heartbeat_answers_while_a_cell_runs(gw):
    msg_id = gw.kc.execute("import time; time.sleep(100)")
    wait_iopub(gw.kc, msg_id, "execute_input")
    req = gw.ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(gw.endpoint("hb"))
    for _ in range(3):
        req.send(b"ping")
        assert req.poll(1000), "heartbeat did not answer within 1 s"
        assert req.recv() == b"ping"
    req.close()


def test_control_is_answered_while_a_cell_runs(gw):
    msg_id = gw.kc.execute("import time; time.sleep(100)")
    wait_iopub(gw.kc, msg_id, "execute_input")
    info = gw.kc.session.msg("kernel_info_request")
    gw.kc.control_channel.send(info)
    reply = wait_reply(gw.kc, info["header"]["msg_id"], timeout=5, channel="control")
    assert reply["content"]["status"] == "ok"


def test_requests_before_hello_are_held(start_gateway):
    g = start_gateway(env={"FAKE_KERNEL_HELLO_DELAY": "1.0"})
    shell = g.dealer()
    frames, msg_id = raw_request("kernel_info_request")
    shell.send_multipart(frames)                      # the kernel is not ready yet
    header, content = assert_next_reply_is(shell, msg_id)
    assert content["status"] == "ok"
    assert "kernel.ready" in g.log_text()
    shell.close()


def test_input_request_goes_to_the_requesting_client(gw):
    asked = []

    def answer(msg):
        asked.append(msg["content"]["prompt"])
        gw.kc.input("ada")

    r = run_cell(gw.kc, "%fake input name?", stdin_hook=answer)
    assert asked == ["name?"]
    assert any(m["msg_type"] == "stream" and "got ada" in m["content"]["text"] for m in r.msgs)


def test_iopub_topics_and_parent_headers(gw):
    sub = gw.ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(gw.endpoint("iopub"))
    time.sleep(0.3)                                   # PUB/SUB slow joiner
    r = run_cell(gw.kc, "print('hi')")
    topics = set()
    while sub.poll(500):
        frames = sub.recv_multipart()
        topics.add(frames[0])
    sub.close()
    assert b"stream.stdout" in topics
    assert any(t.startswith(b"kernel.") and t.endswith(b".status") for t in topics)
    assert any(t.endswith(b".execute_input") for t in topics)
    for m in r.msgs:                                  # every parent is our request
        assert m["parent_header"]["msg_id"] == r.reply["parent_header"]["msg_id"]
        assert m["parent_header"]["session"] == gw.kc.session.session
        assert m["header"]["version"] == "5.3" and m["header"]["date"]


def test_empty_key_means_unsigned(start_gateway):
    g = start_gateway(key=b"")
    g.wait_ready()
    assert run_cell(g.kc, "3 * 3").status == "ok"
    assert "signed=no" in g.log_text()


def test_ipc_transport(gateway_bin, tmp_path, reaper):
    conn, _ = write_connection_file(str(tmp_path / "conn.json"), transport="ipc",
                                    ip=str(tmp_path / "kernel-ipc"), key=KEY)
    log = open(tmp_path / "gw.log", "wb")
    proc = subprocess.Popen([str(gateway_bin), "--connection-file", conn, "--backend",
                             "unsafe-local", "--kernel", str(FAKE)],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    reaper(proc.pid, log=tmp_path / "gw.log")
    kc = BlockingKernelClient(connection_file=conn)
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=READY_TIMEOUT)
        assert run_cell(kc, "1 + 1").status == "ok"
        assert list(tmp_path.glob("kernel-ipc-*"))
    finally:
        kc.stop_channels()
        proc.terminate()
        assert proc.wait(5) == 0


def test_unsafe_local_warns_and_never_logs_the_key(start_gateway):
    g = start_gateway(args=("--log-level", "debug"))
    g.wait_ready()
    run_cell(g.kc, "print('secret stuff')")
    text = g.log_text()
    assert "isolation=none" in text
    assert KEY.decode() not in text


def test_log_level_from_environment(start_gateway):
    g = start_gateway(env={"CELLVM_LOG_LEVEL": "error"})
    g.wait_ready()
    text = g.log_text()
    assert "backend.unsafe" not in text and "kernel.ready" not in text


# --------------------------------------------------------------------------
# Bad client input: dropped with a log line, never reaches the kernel, and
# the next good request is still answered. Each bad_* builds (frames, msg_id,
# the reason the gateway logs) of an otherwise good request signed with `key`;
# test_bad_input_never_reaches_a_real_kernel sends them all to real sessions.

def _signed_parts(msg_type="kernel_info_request", content=b"{}", header=None):
    msg_id = uuid.uuid4().hex
    h = header if header is not None else json.dumps({
        "msg_id": msg_id, "session": "raw-session", "username": "test", "date": utcnow(),
        "msg_type": msg_type, "version": "5.3"}).encode()
    return [h, b"{}", b"{}", content], msg_id


def bad_unsigned(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content)
    return [DELIM, b"", *parts], msg_id, "unsigned message"


def bad_wrong_signature(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content)
    return [DELIM, sign(b"not-the-key", parts), *parts], msg_id, "bad signature"


def bad_signature_length(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content)
    return [DELIM, sign(key, parts)[:40], *parts], msg_id, "bad signature length"


def bad_missing_delimiter(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content)
    return [sign(key, parts), *parts], msg_id, "missing <IDS|MSG> delimiter"


def bad_too_few_frames(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content)
    return [DELIM, sign(key, parts), *parts[:3]], msg_id, "too few frames"


def bad_non_json(key=KEY, msg_type="kernel_info_request", **_):
    parts, msg_id = _signed_parts(msg_type, content=b"{this is not json")
    return [DELIM, sign(key, parts), *parts], msg_id, "content is not valid JSON"


def bad_non_json_header(key=KEY, msg_type="kernel_info_request", content=b"{}", **_):
    parts, msg_id = _signed_parts(msg_type, content, header=b"\xff\xfe garbage")
    return [DELIM, sign(key, parts), *parts], msg_id, "header is not valid JSON"


def bad_non_object(key=KEY, msg_type="kernel_info_request", **_):
    parts, msg_id = _signed_parts(msg_type, content=b"[1, 2, 3]")
    return [DELIM, sign(key, parts), *parts], msg_id, "content is not a JSON object"


def bad_unknown_msg_type(key=KEY, content=b"{}", **_):
    parts, msg_id = _signed_parts("bogus_request", content)
    return [DELIM, sign(key, parts), *parts], msg_id, "msg_type not accepted"


def bad_oversize(key=KEY, max_msg=65536, **_):
    """An execute_request over a --max-msg of max_msg whose JSON alone is over the 1 MiB the
    gateway reads of an oversize message to answer it (test_reactor.py has the answered kind):
    nothing can be trusted, so it is dropped."""
    content = b'{"code": "#' + b"x" * max(max_msg, 2 << 20) + b'"}'
    parts, msg_id = _signed_parts("execute_request", content)
    return [DELIM, sign(key, parts), *parts], msg_id, "message too large"


BAD_INPUTS = [bad_unsigned, bad_wrong_signature, bad_signature_length, bad_missing_delimiter,
              bad_too_few_frames, bad_non_json, bad_non_json_header, bad_non_object,
              bad_unknown_msg_type, bad_oversize]


@pytest.mark.parametrize("make_bad", BAD_INPUTS, ids=[f.__name__[4:] for f in BAD_INPUTS])
@pytest.mark.parametrize("channel", ["shell", "control"])
def test_bad_client_input_is_dropped(start_gateway, make_bad, channel):
    g = start_gateway(args=("--max-msg", "65536"))
    g.wait_ready()
    sock = g.dealer(channel)
    frames, bad_id, reason = make_bad()
    sock.send_multipart(frames)
    good, good_id = raw_request("kernel_info_request")
    sock.send_multipart(good)
    header, content = assert_next_reply_is(sock, good_id)
    assert content["status"] == "ok"
    assert g.proc.poll() is None
    log = g.log_text()
    assert "event=client.drop" in log and reason in log, log[-2000:]
    assert not any(bad_id in line for line in g.kernel_requests()), "bad input reached the kernel"
    sock.close()


def test_replayed_message_is_dropped(gw):
    sock = gw.dealer()
    frames, msg_id = raw_request("kernel_info_request")
    sock.send_multipart(frames)
    assert_next_reply_is(sock, msg_id)
    sock.send_multipart(frames)                       # the very same signed bytes
    good, good_id = raw_request("kernel_info_request")
    sock.send_multipart(good)
    assert_next_reply_is(sock, good_id)
    assert "replayed signature" in gw.log_text()
    assert sum(msg_id in line for line in gw.kernel_requests()) == 1
    sock.close()


def test_garbage_multipart_is_dropped(gw):
    sock = gw.dealer()
    for junk in ([b""], [b"x" * 10], [DELIM], [DELIM] * 300, [b"\x00" * 5, DELIM, b"", b"", b""]):
        sock.send_multipart(junk)
    good, good_id = raw_request("kernel_info_request")
    sock.send_multipart(good)
    assert_next_reply_is(sock, good_id)
    sock.close()


@pytest.mark.parametrize("setup,words", [
    ("missing", "cannot"),
    ("not_json", "JSON"),
    ("no_port", "shell_port"),
    ("bad_scheme", "signature_scheme"),
])
def test_bad_connection_file_is_refused(gateway_bin, tmp_path, setup, words):
    path = tmp_path / "conn.json"
    good = {"shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003,
            "control_port": 50004, "hb_port": 50005, "ip": "127.0.0.1", "key": "k",
            "transport": "tcp", "signature_scheme": "hmac-sha256"}
    if setup == "not_json":
        path.write_text("{ this is not json")
    elif setup == "no_port":
        del good["shell_port"]
        path.write_text(json.dumps(good))
    elif setup == "bad_scheme":
        good["signature_scheme"] = "hmac-nope"
        path.write_text(json.dumps(good))
    r = subprocess.run([str(gateway_bin), "--connection-file", str(path), "--backend",
                        "unsafe-local", "--kernel", str(FAKE)], capture_output=True, timeout=10)
    assert r.returncode != 0
    assert words in r.stderr.decode(), r.stderr.decode()


@pytest.mark.parametrize("argv,words", [
    ([], "--backend is required"),
    (["--backend", "microvm", "--image", "/nonexistent/image"], "/nonexistent/image/vmlinux"),
    (["--backend", "docker"], "unknown backend"),
    (["--backend", "unsafe-local", "--kernel", "/nonexistent/kernel"], "not an executable"),
    (["--backend", "unsafe-local", "--max-msg", "lots"], "bad value"),
])
def test_bad_arguments_are_refused(gateway_bin, tmp_path, argv, words):
    conn, _ = write_connection_file(str(tmp_path / "conn.json"), ip="127.0.0.1", key=KEY)
    r = subprocess.run([str(gateway_bin), "--connection-file", conn, *argv],
                       capture_output=True, timeout=10)
    assert r.returncode != 0
    assert words in r.stderr.decode(), r.stderr.decode()


def test_busy_port_is_refused(gateway_bin, tmp_path):
    conn, info = write_connection_file(str(tmp_path / "conn.json"), ip="127.0.0.1", key=KEY)
    ctx = zmq.Context()
    squatter = ctx.socket(zmq.ROUTER)
    squatter.bind(f"tcp://127.0.0.1:{info['control_port']}")
    try:
        r = subprocess.run([str(gateway_bin), "--connection-file", conn, "--backend",
                            "unsafe-local", "--kernel", str(FAKE)], capture_output=True, timeout=10)
    finally:
        squatter.close(linger=0)
        ctx.term()
    assert r.returncode != 0
    assert "cannot bind control" in r.stderr.decode()


# --------------------------------------------------------------------------
# cellvm-launch: listening before the gateway loads (docs/gateway.md).

def test_launch_prebinds_and_the_kernel_answers(gateway_bin, tmp_path, reaper):
    launch = gateway_bin.parent / "cellvm-launch"
    conn, info = write_connection_file(str(tmp_path / "conn.json"), ip="127.0.0.1", key=KEY)
    log = open(tmp_path / "gw.log", "wb")
    p = subprocess.Popen([str(launch), "--connection-file", conn, "--backend", "unsafe-local",
                          "--kernel", str(FAKE)], stdout=log, stderr=subprocess.STDOUT)
    reaper(p.pid, log=tmp_path / "gw.log")
    deadline = time.monotonic() + TIMEOUT
    while True:                                 # the launcher binds within milliseconds
        try:
            socket.create_connection(("127.0.0.1", info["shell_port"]), timeout=TIMEOUT).close()
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the shell port never listened"
            time.sleep(0.001)
    kc = BlockingKernelClient(connection_file=conn)
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=READY_TIMEOUT)
        assert kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]["status"] == "ok"
        assert kc.is_alive()                    # the heartbeat adopted its fd too
        text = (tmp_path / "gw.log").read_text()
        assert "event=gateway.listening" in text and "prebound=yes" in text, text
        # The exec'd gateway is the launched process: the client's pid is the gateway.
        assert psutil.Process(p.pid).exe().endswith("cellvm-gateway")
    finally:
        kc.stop_channels()
        p.terminate()
        p.wait(10)
        log.close()


@pytest.mark.parametrize("fds,words", [
    ("5,6,7,8,9", "fd 5 is not a socket listening on 127.0.0.1"),
    ("3,4", "--listen-fds wants five fds"),
])
def test_gateway_refuses_listen_fds_that_are_not_its_ports(gateway_bin, tmp_path, fds, words):
    conn, _ = write_connection_file(str(tmp_path / "conn.json"), ip="127.0.0.1", key=KEY)
    r = subprocess.run([str(gateway_bin), "--connection-file", conn, "--backend", "unsafe-local",
                        "--kernel", str(FAKE), "--listen-fds", fds], capture_output=True,
                       timeout=10)
    assert r.returncode != 0
    assert words in r.stderr.decode(), r.stderr.decode()


def test_launch_leaves_what_it_cannot_prebind_to_the_gateway(gateway_bin, tmp_path):
    launch = gateway_bin.parent / "cellvm-launch"
    path = tmp_path / "conn.json"
    path.write_text("{ this is not json")
    r = subprocess.run([str(launch), "--connection-file", str(path), "--backend",
                        "unsafe-local", "--kernel", str(FAKE)], capture_output=True, timeout=10)
    assert r.returncode != 0
    assert "JSON" in r.stderr.decode(), r.stderr.decode()


def test_failed_kernel_info_reply_still_parses(start_gateway):
    """A kernel that never starts: a kernel_info_request held for it is
    answered with an error that clients can still read (protocol_version)."""
    g = start_gateway(env={"FAKE_KERNEL_EXIT": "1"})
    s = g.dealer("shell")
    frames, msg_id = raw_request("kernel_info_request")
    s.send_multipart(frames)
    header, parent, content = recv_reply(s)
    assert parent["msg_id"] == msg_id and header["msg_type"] == "kernel_info_reply"
    assert content["status"] == "error"
    assert content["protocol_version"].startswith("5.")
    assert content["language_info"]["name"] == "python"
    assert g.proc.wait(TIMEOUT) == 1
