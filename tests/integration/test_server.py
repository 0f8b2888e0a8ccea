"""cellvm behind Jupyter Server, over REST + WebSocket (docs/remote.md).

`scripts/serve.sh` (what `make serve` runs) is started on a free port per module and driven the
way remote clients drive it: `POST /api/kernels`, Jupyter's JSON messages on
`/api/kernels/{id}/channels` (Debian's python3-websocket), `POST .../interrupt`,
`POST .../restart`, `DELETE`. For both kernelspecs, `cellvm` (microvm) and
`cellvm-unsafe-local`: a stream and an execute_result; `output_files` in the execute_reply (and
the bytes through `cellvm_get_request` on the control channel); an interrupted `time.sleep(60)`;
a restart that forgets variables and keeps the workspace (docs/sessions.md); a delete, a cull of
an idle kernel (a second server with a 6 s idle timeout; a busy kernel is not culled) and a
server stop that each leave no process. Also: a kernelspec that is not offered cannot be started,
`env` in the POST body does not reach a kernel but a kernelspec's `env` does, examples/
rest_client.py runs, and a second Jupyter Server pointed at the door with `--gateway-url` (what
`jupyter lab --gateway-url` does) runs a cell.

Every process a server starts is tracked (psutil handles of all descendants of serve.sh, polled
every 50 ms) and killed by pid at the end; the server's log, which holds the gateways' logs, is a
sessions.Logs (conftest attaches it to a failed test and scans it for `event=reactor.slow`).
"""
import ast
import hashlib
import json
import os
import pathlib
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import psutil
import pytest
import websocket

import sessions
from sessions import (BUILD, HOST_PYTHON, READY_TIMEOUT, ROOT, TIMEOUT, kernel_spec,
                      leftovers, qemu_children, wait_no_leftovers)

SERVE = ROOT / "scripts" / "serve.sh"
EXAMPLE = ROOT / "examples" / "rest_client.py"
KERNELS = ["cellvm", "cellvm-unsafe-local"]
ENV_SPEC = "cellvm-test-env"           # cellvm-unsafe-local plus an "env" in its kernelspec
SNAP_SPEC = "cellvm-test-snap"         # cellvm with CELLVM_FROM_SNAPSHOT=SNAP in its "env"
SNAP = "door-test"
CULL_IDLE = 6                          # the culling server's idle timeout (s)
STOP_TIMEOUT = 90                      # a server's SIGTERM to the last process gone


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(p):
    try:
        return f"pid {p.pid}: {' '.join(p.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {p.pid}"


# --------------------------------------------------------------------------
# The server, its REST calls and its processes

class Door:
    """One scripts/serve.sh: its REST API, and every process below it (psutil handles)."""

    def __init__(self, name, tmp, kernels=KERNELS, env=None):
        self.name, self.tmp = name, pathlib.Path(tmp)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = uuid.uuid4().hex + uuid.uuid4().hex
        self.log_path = self.tmp / f"{name}.log"
        self.logs = sessions.Logs(f"server-{name}", gateway_log=self.log_path)
        self.env = dict(os.environ, CELLVM_BUILD=str(BUILD), CELLVM_SERVE_PORT=str(self.port),
                        CELLVM_SERVE_TOKEN=self.token, CELLVM_SERVE_KERNELS=" ".join(kernels),
                        JUPYTER_CONFIG_DIR=str(self.tmp / "jupyter-config"), **(env or {}))
        self.procs = {}                 # pid -> psutil.Process, everything ever seen below
        self.proc = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None
        self.state_dir = None

    # --- lifecycle ------------------------------------------------------
    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["bash", str(SERVE)], env=self.env, cwd=str(ROOT),
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self.root = psutil.Process(self.proc.pid)
        self.procs[self.proc.pid] = self.root
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + TIMEOUT
        while "Stop with Ctrl-C" not in self.log():
            assert self.proc.poll() is None, f"serve.sh exited {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"serve.sh printed no banner:\n{self.log()}"
            time.sleep(0.1)
        m = re.search(r"Serving notebooks from local directory: (\S+)/root", self.log())
        self.state_dir = pathlib.Path(m.group(1)) if m else None
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.track()
            time.sleep(0.05)

    def track(self):
        try:
            kids = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        with self._lock:
            for k in kids:
                if k.pid not in self.procs or not self.procs[k.pid].is_running():
                    self.procs[k.pid] = k

    def alive_procs(self):
        self.track()
        with self._lock:
            return [p for p in self.procs.values() if running(p)]

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM to serve.sh (what Ctrl-C does); the processes still there after timeout
        (described), which are then SIGKILLed by pid."""
        self.track()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive_procs():
            time.sleep(0.1)
        left = [describe(p) for p in self.alive_procs()]
        self.kill()
        return left

    def kill(self):
        self._stop.set()
        if self._thread:
            self._thread.join(2)
        with self._lock:
            procs = list(self.procs.values())
        for p in procs:
            try:
                if p.is_running():
                    p.kill()
            except psutil.Error:
                pass
        sessions.wait_procs_gone(procs, 10)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if not self._log.closed:
            self._log.close()
        self.logs.close()

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # --- REST -----------------------------------------------------------
    def call(self, method, path, body=None, token=True, timeout=READY_TIMEOUT):
        """(HTTP status, parsed JSON body or None)."""
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "token " + self.token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        try:
            return status, (json.loads(text) if text else None)
        except ValueError:
            return status, text

    def create(self, name, **body):
        status, model = self.call("POST", "/api/kernels", dict(body, name=name))
        assert status == 201, (status, model)
        return model

    def kernel_ids(self):
        status, models = self.call("GET", "/api/kernels")
        assert status == 200, (status, models)
        return {m["id"] for m in models}

    # --- processes of one kernel -----------------------------------------
    def gateway_of(self, kid, timeout=TIMEOUT):
        """The gateway of kernel kid: the process below the server whose argv names the
        kernel's connection file (cellvm-launch execs the gateway in place)."""
        want = f"kernel-{kid}.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.alive_procs():
                try:
                    if any(a.endswith(want) for a in p.cmdline()):
                        return p
                except psutil.Error:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"no gateway for kernel {kid} below the server")

    def procs_of(self, kid, backend):
        """[gateway, and its QEMU (microvm) or kernel process (unsafe-local)], as psutil."""
        gw = self.gateway_of(kid)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if backend == "microvm":
                kids = [psutil.Process(q) for q in qemu_children(gw.pid)]
            else:
                kids = gw.children()
            if kids:
                return [gw] + kids
            time.sleep(0.05)
        raise AssertionError(f"gateway {gw.pid} of kernel {kid} has no {backend} child")


def wait_gone(procs, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p) for p in procs):
        time.sleep(0.05)
    return [describe(p) for p in procs if running(p)]


# --------------------------------------------------------------------------
# The /channels WebSocket

class Channels:
    """Jupyter's messages on /api/kernels/{id}/channels: JSON text frames; a message with
    buffers comes as one binary frame (jupyter_server's legacy format)."""

    def __init__(self, door, kid):
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{door.port}/api/kernels/{kid}/channels?session_id={self.session}",
            header=["Authorization: token " + door.token], timeout=READY_TIMEOUT)

    def send(self, channel, msg_type, content):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "channel": channel, "header": {"msg_id": msg_id, "msg_type": msg_type,
                                           "session": self.session, "username": "test",
                                           "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": []}))
        return msg_id

    def recv(self, timeout):
        """The next message, or None for a ping or pong (so that a caller's deadline holds
        while the server keeps the connection alive)."""
        self.ws.settimeout(max(timeout, 0.01))
        opcode, frame = self.ws.recv_data_frame(True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            raise websocket.WebSocketConnectionClosedException("the server closed the WebSocket")
        if opcode == websocket.ABNF.OPCODE_TEXT:
            return json.loads(frame.data.decode())
        if opcode != websocket.ABNF.OPCODE_BINARY:
            return None
        frame = frame.data
        n = struct.unpack("!I", frame[:4])[0]
        offsets = list(struct.unpack("!" + "I" * n, frame[4:4 * (n + 1)])) + [len(frame)]
        msg = json.loads(frame[offsets[0]:offsets[1]])
        msg["buffers"] = [frame[offsets[i]:offsets[i + 1]] for i in range(1, n)]
        return msg

    def send_execute(self, code):
        return self.send("shell", "execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})

    def collect(self, msg_id, channel="shell", timeout=TIMEOUT, on_msg=None):
        """(reply, [iopub messages]) of request msg_id, up to its reply and its idle."""
        deadline = time.monotonic() + timeout
        reply, msgs, idle = None, [], False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no reply and idle for {msg_id} within {timeout} s: "
                                     f"{[m['msg_type'] for m in msgs]}")
            try:
                msg = self.recv(left)
            except websocket.WebSocketTimeoutException:
                continue
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["channel"] == channel:
                reply = msg
            elif msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            else:
                msgs.append(msg)
            if on_msg:
                on_msg(msg)
        return reply, msgs

    def wait_ready(self, timeout=READY_TIMEOUT):
        """kernel_info_request, again every 2 s, until one is answered."""
        deadline = time.monotonic() + timeout
        while True:
            msg_id = self.send("shell", "kernel_info_request", {})
            try:
                return self.collect(msg_id, timeout=min(2, max(deadline - time.monotonic(), 0)))
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise

    def execute(self, code, timeout=TIMEOUT):
        return self.collect(self.send_execute(code), timeout=timeout)

    def value(self, code):
        """The text/plain result of a cell that must succeed."""
        reply, msgs = self.execute(code)
        assert reply["content"]["status"] == "ok", reply["content"]
        res = [m["content"]["data"]["text/plain"] for m in msgs if m["msg_type"] == "execute_result"]
        assert len(res) == 1, msgs
        return res[0]

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


def streams(msgs, name="stdout"):
    return "".join(m["content"]["text"] for m in msgs
                   if m["msg_type"] == "stream" and m["content"]["name"] == name)


def backend(name):
    return "microvm" if name == "cellvm" else "unsafe-local"


# Run in a cell: the session's workspace (/workspace in a VM; with unsafe-local a private
# directory of the gateway's), as the parent of CELLVM_OUTDIR (docs/files.md).
WS = "import os\nWS = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"


# --------------------------------------------------------------------------
# Fixtures

@pytest.fixture(scope="module")
def env_specs(tmp_path_factory):
    """A JUPYTER_PATH entry holding ENV_SPEC (cellvm-unsafe-local with an "env") and SNAP_SPEC
    (cellvm that starts from the snapshot SNAP)."""
    d = tmp_path_factory.mktemp("server-specs")
    for name, base, env in ((ENV_SPEC, "cellvm-unsafe-local",
                             {"CELLVM_SERVE_PROBE": "from-kernelspec"}),
                            (SNAP_SPEC, "cellvm", {"CELLVM_FROM_SNAPSHOT": SNAP})):
        spec = json.loads((pathlib.Path(kernel_spec(base).resource_dir) / "kernel.json")
                          .read_text())
        spec["env"] = env
        spec["display_name"] = f"{name} (test)"
        (d / "kernels" / name).mkdir(parents=True)
        (d / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    return d


@pytest.fixture(scope="module")
def door(tmp_path_factory, env_specs):
    """The module's server: both kernelspecs, ENV_SPEC and SNAP_SPEC, culling after an hour,
    snapshots in a store of its own."""
    for k in KERNELS:
        kernel_spec(k)                  # fails (never skips) without build, kernelspec or image
    tmp = tmp_path_factory.mktemp("server")
    (tmp / "snapshots").mkdir(mode=0o700)
    d = Door("main", tmp, kernels=KERNELS + [ENV_SPEC, SNAP_SPEC],
             env={"JUPYTER_PATH": f"{os.environ.get('JUPYTER_PATH', '')}:{env_specs}",
                  "CELLVM_SERVE_IDLE_TIMEOUT": "3600",
                  "CELLVM_SNAPSHOT_DIR": str(tmp / "snapshots")})
    try:
        d.start()
        yield d
    finally:
        left = d.stop()
        assert left == [], f"processes left after the server's SIGTERM: {left}"


@pytest.fixture(scope="module")
def cull_door(tmp_path_factory):
    """A server that culls kernels idle for CULL_IDLE s, checking every second."""
    tmp = tmp_path_factory.mktemp("server-cull")
    d = Door("cull", tmp, env={"CELLVM_SERVE_IDLE_TIMEOUT": str(CULL_IDLE),
                               "CELLVM_SERVE_CULL_INTERVAL": "1"})
    try:
        d.start()
        yield d
    finally:
        left = d.stop()
        assert left == [], f"processes left after the server's SIGTERM: {left}"


@pytest.fixture(params=KERNELS)
def kernel(request, door):
    """(door, kernel id, kernelspec name, Channels) of a fresh kernel; deleted afterwards."""
    name = request.param
    model = door.create(name)
    kid = model["id"]
    ch = None
    try:
        ch = Channels(door, kid)
        yield door, kid, name, ch
    finally:
        if ch:
            ch.close()
        if kid in door.kernel_ids():
            door.call("DELETE", f"/api/kernels/{kid}")


# --------------------------------------------------------------------------
# The server

def test_the_door_needs_the_token_and_offers_only_its_kernelspecs(door):
    assert door.call("GET", "/api/kernels", token=False)[0] == 403
    assert door.call("POST", "/api/kernels", {"name": "cellvm"}, token=False)[0] == 403
    status, specs = door.call("GET", "/api/kernelspecs")
    assert status == 200, specs
    assert specs["default"] == "cellvm"
    assert set(specs["kernelspecs"]) == set(KERNELS + [ENV_SPEC, SNAP_SPEC]), \
        specs["kernelspecs"]
    # Installed but not offered (cellvm-agent, and the host's ipykernel behind "python3", which
    # jupyter_client 7.4 would start although its listing hides it): refused in words.
    before = door.kernel_ids()
    for name in ("cellvm-agent", "no-such-spec"):
        status, body = door.call("POST", "/api/kernels", {"name": name})
        assert status == 404, (name, status, body)
        assert f"No such kernelspec: {name}" in body["message"], body
        assert "cellvm-unsafe-local" in body["message"], body
    assert door.kernel_ids() == before
    # "python3", what many clients ask for by default, is the default kernelspec: a microVM.
    model = door.create("python3")
    try:
        gw = door.gateway_of(model["id"])
        argv = gw.cmdline()
        assert argv[argv.index("--backend") + 1] == "microvm", argv
    finally:
        assert door.call("DELETE", f"/api/kernels/{model['id']}")[0] == 204


# --------------------------------------------------------------------------
# One kernel, both kernelspecs

def test_create_and_execute(kernel):
    door, kid, name, ch = kernel
    assert kid in door.kernel_ids()
    reply, msgs = ch.execute("import sys\nx = 6 * 7\nprint('out', x)\n"
                             "print('err', file=sys.stderr)\nx")
    c = reply["content"]
    assert c["status"] == "ok", c
    assert streams(msgs) == "out 42\n", msgs
    assert streams(msgs, "stderr") == "err\n", msgs
    results = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert [m["content"]["data"]["text/plain"] for m in results] == ["42"], msgs
    assert results[0]["content"]["execution_count"] == c["execution_count"]
    assert [m["msg_type"] for m in msgs][0] == "execute_input", msgs
    # An error is an error message and an error reply.
    reply, msgs = ch.execute("1 / 0")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert [m["content"]["ename"] for m in msgs if m["msg_type"] == "error"] == \
        ["ZeroDivisionError"]
    # Where the cell ran.
    ws = json.loads(ast.literal_eval(ch.value(WS + "import json\njson.dumps(WS)")))
    if backend(name) == "microvm":
        assert ws == "/workspace"
    else:
        assert ws != "/workspace" and ws.endswith("/workspace"), ws


def test_output_files_come_back_in_the_execute_reply(kernel):
    door, kid, name, ch = kernel
    reply, _ = ch.execute(
        "import os, hashlib\n"
        "out = os.environ['CELLVM_OUTDIR']\n"
        "os.makedirs(out + '/sub', exist_ok=True)\n"
        "data = b'0123456789' * 1000\n"
        "open(out + '/sub/result.bin', 'wb').write(data)\n"
        "open(out + '/note.txt', 'w').write('hello')\n"
        "print(out)")
    c = reply["content"]
    assert c["status"] == "ok", c
    files = {pathlib.PurePosixPath(f["path"]).name: f for f in c["output_files"]}
    assert set(files) == {"result.bin", "note.txt"}, c["output_files"]
    data = b"0123456789" * 1000
    f = files["result.bin"]
    assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest(), f
    if backend(name) == "microvm":
        assert f["path"] == "/workspace/out/sub/result.bin", f
        assert files["note.txt"]["path"] == "/workspace/out/note.txt"
    else:
        outdir = ast.literal_eval(ch.value("import os\nos.environ['CELLVM_OUTDIR']"))
        assert f["path"] == outdir + "/sub/result.bin", f
    assert c.get("output_files_truncated") is False, c
    # The gateway's own copy on the server's host (docs/files.md), unchanged by the server.
    assert "host_path" in f and pathlib.Path(f["host_path"]).read_bytes() == data, f
    # A later cell that writes nothing lists nothing.
    reply, _ = ch.execute("y = 1")
    assert reply["content"]["output_files"] == [], reply["content"]
    # The bytes through the same WebSocket: cellvm_get_request on control, one binary buffer.
    msg_id = ch.send("control", "cellvm_get_request", {"path": "out/sub/result.bin"})
    reply, _ = ch.collect(msg_id, channel="control")
    assert reply["content"]["status"] == "ok", reply["content"]
    assert reply["buffers"] == [data]


def test_interrupt_a_running_cell(kernel):
    door, kid, name, ch = kernel
    assert ch.value("kept = 'still here'\nkept") == "'still here'"
    msg_id = ch.send_execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
    started = threading.Event()
    interrupted = []

    def on_msg(msg):
        if msg["msg_type"] == "stream" and "sleeping" in msg["content"]["text"] and \
                not started.is_set():
            started.set()
            time.sleep(0.5)             # the cell is in time.sleep now
            t0 = time.monotonic()
            interrupted.append((door.call("POST", f"/api/kernels/{kid}/interrupt")[0], t0))

    reply, msgs = ch.collect(msg_id, on_msg=on_msg, timeout=TIMEOUT)
    assert started.is_set() and interrupted, [m["msg_type"] for m in msgs]
    status, t0 = interrupted[0]
    assert status == 204
    elapsed = time.monotonic() - t0
    c = reply["content"]
    assert c["status"] == "error" and c["ename"] == "KeyboardInterrupt", c
    assert any(m["msg_type"] == "error" and m["content"]["ename"] == "KeyboardInterrupt"
               for m in msgs), msgs
    assert elapsed < 30, f"the interrupt took {elapsed:.1f} s (the cell sleeps 60 s)"
    # The session goes on, with its state.
    assert ch.value("kept") == "'still here'"


def test_restart_forgets_variables_and_keeps_the_workspace(kernel):
    door, kid, name, ch = kernel
    be = backend(name)
    old = door.procs_of(kid, be)
    reply, _ = ch.execute(WS + "v = 123\nopen(WS + '/kept.txt', 'w').write('kept across')")
    assert reply["content"]["status"] == "ok", reply["content"]
    status, model = door.call("POST", f"/api/kernels/{kid}/restart")
    assert status == 200, (status, model)
    assert model["id"] == kid
    # The old gateway and its QEMU or kernel are gone; a new gateway serves the same id.
    assert wait_gone(old) == []
    new = door.procs_of(kid, be)
    assert new[0].pid != old[0].pid
    # The same WebSocket goes on (what a notebook's Restart relies on).
    reply, msgs = ch.execute("v")
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "NameError", \
        reply["content"]
    assert ch.value(WS + "open(WS + '/kept.txt').read()") == "'kept across'"
    assert ch.value("import os\nos.getpid() > 0") == "True"


def test_delete_leaves_no_process(kernel):
    door, kid, name, ch = kernel
    be = backend(name)
    assert ch.value("1 + 1") == "2"
    procs = door.procs_of(kid, be)
    gw = procs[0].pid
    status, _ = door.call("DELETE", f"/api/kernels/{kid}")
    assert status == 204
    assert kid not in door.kernel_ids()
    assert door.call("GET", f"/api/kernels/{kid}")[0] == 404
    assert wait_gone(procs) == [], "the kernel's processes outlived its DELETE"
    if be == "microvm":
        assert wait_no_leftovers([gw]) == []
    # Nothing else of this kernel is left below the server.
    assert not [p for p in door.alive_procs() if any(kid in a for a in p.cmdline())]


# --------------------------------------------------------------------------
# Environment: what reaches a kernel

def test_env_in_the_post_body_is_ignored_but_a_kernelspec_env_arrives(door):
    """jupyter_server 1.23 takes only "name" and "path" from the body of POST /api/kernels;
    a kernelspec's "env" (or the server's own environment) is what reaches the gateway, and
    through it the kernel (docs/remote.md: CELLVM_FROM_SNAPSHOT goes the same way)."""
    probe = "import os, json\njson.dumps(os.environ.get('CELLVM_SERVE_PROBE'))"
    for name, body_env, want in (("cellvm-unsafe-local", {"CELLVM_SERVE_PROBE": "from-body"},
                                  None),
                                 (ENV_SPEC, {}, "from-kernelspec")):
        model = door.create(name, env=body_env)
        ch = Channels(door, model["id"])
        try:
            assert json.loads(ast.literal_eval(ch.value(probe))) == want, name
            gw = door.gateway_of(model["id"])
            assert gw.environ().get("CELLVM_SERVE_PROBE") == want, name
        finally:
            ch.close()
            door.call("DELETE", f"/api/kernels/{model['id']}")


def test_a_snapshot_taken_over_the_websocket_starts_a_kernelspec_of_its_own(door):
    """cellvm_snapshot_request on the control channel, through the server; then a kernelspec
    with CELLVM_FROM_SNAPSHOT in its "env" starts sessions from it (docs/remote.md)."""
    model = door.create("cellvm")
    ch = Channels(door, model["id"])
    fork = fch = None
    try:
        reply, _ = ch.execute("secret = 'in RAM'\nopen('/workspace/f.txt', 'w').write('on disk')")
        assert reply["content"]["status"] == "ok", reply["content"]
        reply, _ = ch.collect(ch.send("control", "cellvm_snapshot_request", {"name": SNAP}),
                              channel="control", timeout=600)
        assert reply["content"]["status"] == "ok" and reply["content"]["name"] == SNAP, \
            reply["content"]
        fork = door.create(SNAP_SPEC)
        fch = Channels(door, fork["id"])
        assert fch.value("secret, open('/workspace/f.txt').read()") == "('in RAM', 'on disk')"
        # The two sessions are separate from here on.
        assert fch.value("secret = 'fork'\nsecret") == "'fork'"
        assert ch.value("secret") == "'in RAM'"
    finally:
        for c in (ch, fch):
            if c:
                c.close()
        for m in (model, fork):
            if m:
                door.call("DELETE", f"/api/kernels/{m['id']}")


# --------------------------------------------------------------------------
# Culling

@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.slow
def test_an_idle_kernel_is_culled_and_a_busy_one_is_not(cull_door, name):
    door = cull_door
    be = backend(name)
    model = door.create(name)
    kid = model["id"]
    ch = Channels(door, kid)
    try:
        procs = door.procs_of(kid, be)
        gw = procs[0].pid
        # Busy for over twice the idle timeout (and the WebSocket stays connected): not culled.
        t0 = time.monotonic()
        reply, _ = ch.execute(f"import time\ntime.sleep({3 * CULL_IDLE})\n'done'",
                              timeout=TIMEOUT)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert time.monotonic() - t0 >= 3 * CULL_IDLE
        assert kid in door.kernel_ids(), "a busy kernel was culled"
        # Idle now: culled (connected or not: cull_connected is on) within the timeout, the
        # check interval and the shutdown.
        t_idle = time.monotonic()
        deadline = t_idle + CULL_IDLE + TIMEOUT
        while kid in door.kernel_ids():
            assert time.monotonic() < deadline, "the idle kernel was not culled"
            time.sleep(0.2)
        culled_after = time.monotonic() - t_idle
        assert culled_after >= CULL_IDLE - 1, f"culled after {culled_after:.1f} s idle"
        assert wait_gone(procs) == [], "the culled kernel's processes are still there"
        if be == "microvm":
            assert wait_no_leftovers([gw]) == []
        assert f"Culling 'idle' kernel '{name}' ({kid})" in door.log(), door.log()[-3000:]
    finally:
        ch.close()
        if kid in door.kernel_ids():
            door.call("DELETE", f"/api/kernels/{kid}")


# --------------------------------------------------------------------------
# Clients: the example, and Jupyter Server's own gateway client (jupyter lab --gateway-url)

@pytest.mark.parametrize("name", KERNELS)
def test_the_rest_client_example(door, name):
    before = door.kernel_ids()
    r = subprocess.run([HOST_PYTHON, str(EXAMPLE), "--url", door.url, "--kernel", name],
                       env=dict(os.environ, CELLVM_SERVE_TOKEN=door.token),
                       capture_output=True, text=True, timeout=READY_TIMEOUT)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = r.stdout
    m = re.search(r"^kernel (\S+) \(" + re.escape(name) + r"\) started$", out, re.M)
    assert m, out
    assert re.search(r"^stdout: hello from ", out, re.M), out
    assert re.search(r"^result: 42$", out, re.M), out
    outdir = "/workspace/out" if backend(name) == "microvm" else r"/\S+/workspace/out"
    assert re.search(r"^output_files:\n  " + outdir + r"/hello\.txt  8 bytes  text/plain  "
                     r"sha256 [0-9a-f]{16}\.\.\.$", out, re.M), out
    assert "downloaded out/hello.txt: 8 bytes, sha256 matches: 'x is 42'" in out, out
    assert re.search(rf"^kernel {m.group(1)} deleted$", out, re.M), out
    assert door.kernel_ids() == before
    assert not [p for p in door.alive_procs() if any(m.group(1) in a for a in p.cmdline())]


def test_a_jupyter_server_with_gateway_url_runs_cells_here(door, tmp_path):
    """What `jupyter lab --gateway-url=URL --GatewayClient.auth_token=T` does, with Jupyter
    Server's own GatewayClient: its kernels are this door's."""
    port, token = free_port(), uuid.uuid4().hex
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_TOKEN=token)
    env.pop("JUPYTER_PATH", None)
    log = open(tmp_path / "lab.log", "wb")
    argv = [HOST_PYTHON, "-m", "jupyter_server", f"--port={port}", "--ServerApp.port_retries=0",
            "--ServerApp.open_browser=False", f"--ServerApp.root_dir={tmp_path}",
            f"--gateway-url={door.url}", f"--GatewayClient.auth_token={door.token}",
            "--GatewayClient.request_timeout=200"]
    if os.getuid() == 0:
        argv.append("--ServerApp.allow_root=True")
    lab = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                           stderr=subprocess.STDOUT)
    front = Door.__new__(Door)              # only its REST and WebSocket helpers
    front.url, front.port, front.token = f"http://127.0.0.1:{port}", port, token
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert lab.poll() is None, (tmp_path / "lab.log").read_text()
            try:
                if front.call("GET", "/api/status", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "lab.log").read_text()
            time.sleep(0.2)
        status, specs = front.call("GET", "/api/kernelspecs")
        assert status == 200 and set(KERNELS) <= set(specs["kernelspecs"]), specs
        before = door.kernel_ids()
        model = front.create("cellvm-unsafe-local")
        assert model["id"] in door.kernel_ids() - before, "the kernel is not the door's"
        ch = Channels(front, model["id"])
        try:
            # Jupyter Server's GatewayClient (1.23 and later) drops a message sent before its own
            # WebSocket to the door is being set up, an instant after ours opened: a client
            # that retries kernel_info_request until answered (as this one does) is unaffected.
            ch.wait_ready()
            assert ch.value("import os\nos.environ['CELLVM_OUTDIR'].endswith('/workspace/out')") \
                == "True"
        finally:
            ch.close()
        assert front.call("DELETE", f"/api/kernels/{model['id']}")[0] == 204
        deadline = time.monotonic() + TIMEOUT
        while model["id"] in door.kernel_ids():
            assert time.monotonic() < deadline, "the door kept the kernel after the DELETE"
            time.sleep(0.1)
    finally:
        procs = [psutil.Process(lab.pid)] if lab.poll() is None else []
        try:
            procs += procs[0].children(recursive=True) if procs else []
        except psutil.Error:
            pass
        lab.terminate()
        try:
            lab.wait(30)
        except subprocess.TimeoutExpired:
            pass
        for p in procs:
            try:
                if p.is_running():
                    p.kill()
            except psutil.Error:
                pass
        log.close()


# --------------------------------------------------------------------------
# Stopping the server

def test_stopping_the_server_shuts_every_kernel_down(tmp_path):
    d = Door("stop", tmp_path)
    gws = []
    try:
        d.start()
        assert d.state_dir and d.state_dir.is_dir(), d.log()
        kids = [d.create(k)["id"] for k in KERNELS]
        chans = [Channels(d, k) for k in kids]
        for ch in chans:
            assert ch.value("1 + 1") == "2"
        procs = [p for k, name in zip(kids, KERNELS) for p in d.procs_of(k, backend(name))]
        gws += [d.gateway_of(k).pid for k in kids]
        assert len(d.alive_procs()) >= 1 + 1 + len(procs)   # serve.sh, the server, the kernels
        for ch in chans:
            ch.close()
    finally:
        left = d.stop()
    assert left == [], f"left after SIGTERM to serve.sh: {left}"
    assert leftovers(gws) == []
    assert not d.state_dir.exists(), f"{d.state_dir} (token, connection files) is left"
