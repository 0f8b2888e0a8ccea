"""cellvm-mcp (docs/mcp.md): the MCP acceptance list through the official TypeScript SDK client
(tests/mcp/acceptance.test.mjs, Node), and the bad input a client can send, over raw stdio.

Everything runs on microvm (the `cellvm` kernelspec). The raw tests read the server's replies
line by line; the ones that start a session check that closing stdin or SIGTERM leaves no gateway,
QEMU, run dir or socket behind (sessions.leftovers).
"""
import base64
import hashlib
import json
import os
import select
import signal
import subprocess
import time

import pytest

import sessions
from sessions import BUILD, ROOT

MCP = BUILD / "cellvm-mcp"
NODE_DIR = ROOT / "tests" / "mcp"
TIMEOUT = 30


@pytest.fixture(scope="module", autouse=True)
def _built():
    if not MCP.exists():
        pytest.fail(f"{MCP} is missing: run `make` first")
    sessions.require_image()


@pytest.mark.slow
def test_sdk_client_acceptance():
    """What cellvm-mcp promises (docs/mcp.md), one test each in tests/mcp/acceptance.test.mjs,
    through @modelcontextprotocol/sdk's own client."""
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.fail("tests/mcp/node_modules is missing: run scripts/deps.sh")
    env = dict(os.environ, CELLVM_MCP=str(MCP))
    r = subprocess.run(["node", "--test", "--test-reporter=spec", "acceptance.test.mjs"],
                       cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]


class Raw:
    """cellvm-mcp on pipes: write lines, read replies."""

    def __init__(self, *args):
        env = dict(os.environ, JUPYTER_PATH=str(BUILD / "share" / "jupyter"))
        self.p = subprocess.Popen([str(MCP), "--kernelspec", "cellvm", *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.buf = b""
        self.skipped = []           # what request() read while waiting for its reply

    def send(self, data):
        self.p.stdin.write(data if isinstance(data, bytes) else (json.dumps(data) + "\n").encode())
        self.p.stdin.flush()

    def recv(self, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "no reply from cellvm-mcp"
            if select.select([self.p.stdout], [], [], left)[0]:
                chunk = os.read(self.p.stdout.fileno(), 1 << 20)
                assert chunk, "cellvm-mcp closed stdout: " + self.p.stderr.read().decode()[-2000:]
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, id, method, params=None, timeout=TIMEOUT):
        self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}})
        while True:
            m = self.recv(timeout)
            if m.get("id") == id:
                return m
            self.skipped.append(m)

    def initialize(self, version="2025-11-25"):
        return self.request(0, "initialize", {"protocolVersion": version, "capabilities": {},
                                              "clientInfo": {"name": "raw", "version": "1"}})

    def close(self):
        """End of stdin, as a client that goes away; SIGKILL only if that did not end it."""
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.p.wait()

    def run_dir(self):
        """The private run directory it named in its log (after it exited)."""
        for line in self.p.stderr.read().decode().splitlines():
            if "event=mcp.start" in line:
                return line.rsplit("dir=", 1)[1]
        return None


@pytest.fixture
def raw():
    servers = []

    def make(*args):
        servers.append(Raw(*args))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("asked,got", [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"),
                                       ("2025-03-26", "2025-03-26"), ("2024-11-05", "2024-11-05"),
                                       ("1999-01-01", "2025-11-25")])
def test_version_negotiation(raw, asked, got):
    s = raw()
    r = s.initialize(asked)
    assert r["result"]["protocolVersion"] == got
    assert r["result"]["serverInfo"]["name"] == "cellvm-mcp"


def test_bad_input_gets_json_rpc_errors(raw):
    s = raw("--max-request", "4k")
    s.send(b"\x00\xff\xfe garbage\n")
    assert s.recv()["error"]["code"] == -32700
    s.send(b"{not json\n")
    assert s.recv()["error"]["code"] == -32700
    s.send(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n')
    assert "batch" in s.recv()["error"]["message"]
    s.send(b'{"jsonrpc": "1.0", "id": 2, "method": "ping"}\n')
    r = s.recv()
    assert r["id"] == 2 and r["error"]["code"] == -32600
    assert s.request(3, "tools/list")["error"]["code"] == -32000      # before initialize
    s.initialize()
    assert s.request(4, "no/such/method")["error"]["code"] == -32601
    s.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run_python",'
           b' "arguments": {"code": "' + b"x" * 10000 + b'"}}}\n')
    r = s.recv()
    assert r["id"] == 5 and r["error"]["code"] == -32001 and "--max-request" in r["error"]["message"]
    r = s.request(6, "tools/call", {"name": "upload_file", "arguments": {"path": "a", "text": "x",
                                                                          "content_base64": "eA=="}})
    assert r["error"]["code"] == -32602 and "exactly one" in r["error"]["message"]
    assert s.request(7, "ping")["result"] == {}                       # still serving
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


def _gateways(server_pid):
    return [p for p in sessions.descendants(server_pid) if "cellvm" in " ".join(sessions.cmdline(p))]


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_client_vanishing_mid_cell_leaves_nothing(raw, how):
    s = raw()
    s.initialize()
    s.request(1, "tools/call", {"name": "run_python", "arguments": {"code": "1"}}, timeout=240)
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": "import time; time.sleep(600)"}}})
    time.sleep(1)
    everything = sessions.descendants(s.p.pid)
    gateways = _gateways(s.p.pid)
    assert gateways and any(sessions.is_qemu(p) for p in everything), everything
    if how == "eof":
        s.p.stdin.close()
    else:
        s.p.send_signal(signal.SIGTERM)
    assert s.p.wait(TIMEOUT) == 0
    assert sessions.wait_gone(everything, 10), [p for p in everything if sessions.alive(p)]
    assert sessions.wait_no_leftovers(gateways) == []
    run_dir = s.run_dir()
    assert run_dir and not os.path.exists(run_dir)


def test_large_upload_goes_in_parts_and_download_is_capped(raw):
    """40 MiB: two cellvm_put_requests (32 MiB, then 8 MiB with append), as raw buffers; a
    download over --max-download is refused in words."""
    data = os.urandom(40 << 20)
    s = raw("--max-download", "1M")
    s.initialize()
    r = s.request(1, "tools/call", {"name": "upload_file", "arguments": {
        "path": "big/blob.bin", "content_base64": base64.b64encode(data).decode()}}, timeout=240)
    assert r["result"]["isError"] is False, r
    assert r["result"]["structuredContent"]["size"] == len(data)
    r = s.request(2, "tools/call", {"name": "run_python", "arguments": {"code":
        "import hashlib; hashlib.sha256(open('/workspace/big/blob.bin', 'rb').read()).hexdigest()"}},
        timeout=240)
    assert r["result"]["structuredContent"]["result"] == repr(hashlib.sha256(data).hexdigest())
    r = s.request(3, "tools/call", {"name": "download_file", "arguments": {"path": "big/blob.bin"}},
                  timeout=240)
    assert r["result"]["isError"] is True
    assert "--max-download" in r["result"]["content"][0]["text"]
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


def test_older_revision_gets_no_links_or_structured_content(raw):
    """2024-11-05 predates resource_link and structuredContent: files are named in the text."""
    s = raw()
    assert s.initialize("2024-11-05")["result"]["protocolVersion"] == "2024-11-05"
    tools = s.request(1, "tools/list")["result"]["tools"]
    assert all("annotations" not in t for t in tools)
    r = s.request(2, "tools/call", {"name": "run_python", "arguments": {
        "code": "open('/workspace/out/old.txt', 'w').write('x')"}}, timeout=240)["result"]
    assert "structuredContent" not in r
    assert [c["type"] for c in r["content"]] == ["text"]
    assert "/workspace/out/old.txt" in r["content"][0]["text"]
    r = s.request(3, "tools/call", {"name": "list_files", "arguments": {"path": "out"}})["result"]
    assert "old.txt  1 bytes" in r["content"][0]["text"]
    r = s.request(4, "tools/call", {"name": "run_python", "arguments": {"code": "1"}})["result"]
    assert r["content"][0]["text"].startswith("Cell [2] ")        # the listing took no number
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


def test_cell_that_ignores_the_interrupt_gets_a_restart(raw):
    s = raw("--interrupt-grace", "1")
    s.initialize()
    s.request(1, "tools/call", {"name": "run_python", "arguments": {"code": "v = 1"}}, timeout=240)
    code = "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass"
    r = s.request(2, "tools/call", {"name": "run_python", "arguments": {"code": code, "timeout_s": 2}},
                  timeout=60)["result"]
    assert r["isError"] and r["structuredContent"]["status"] == "timeout"
    assert "did not stop when interrupted" in r["content"][0]["text"]
    r = s.request(3, "tools/call", {"name": "run_python", "arguments": {"code": "'v' in globals()"}},
                  timeout=240)["result"]
    assert r["structuredContent"]["result"] == "False"
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


def test_cancelled_call_is_interrupted_and_gets_no_reply(raw):
    s = raw()
    s.initialize()
    s.request(1, "tools/call", {"name": "run_python", "arguments": {"code": "w = 2"}}, timeout=240)
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": "import time; time.sleep(60)"}}})
    time.sleep(0.5)
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    t = time.monotonic()
    r = s.request(3, "tools/call", {"name": "run_python", "arguments": {"code": "w"}}, timeout=60)
    assert r["result"]["structuredContent"]["result"] == "2"
    assert time.monotonic() - t < 20
    assert [m for m in s.skipped if m.get("id") == 2] == []
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


# Lifetimes (docs/mcp.md, "Lifetimes"): the gateway ends its own session after --idle-timeout or
# --ttl with one stderr stream saying why; the call that finds the session gone gets those words.

def _call(s, id, tool, args=None, timeout=240):
    return s.request(id, "tools/call", {"name": tool, "arguments": args or {}}, timeout=timeout)["result"]


def _text(result):
    return result["content"][0]["text"]


def _gateway_pids(server_pid):
    return [p for p in sessions.descendants(server_pid)
            if any(os.path.basename(a) == "cellvm-gateway" for a in sessions.cmdline(p)[:1])]


def _ended_by_itself(s):
    """The session's gateway, once it has ended by itself: its pid, after checking it left
    nothing behind."""
    gateways = _gateway_pids(s.p.pid)
    assert len(gateways) == 1, gateways
    assert sessions.wait_gone(gateways, 60), "the gateway did not end its session"
    assert sessions.wait_no_leftovers(gateways) == []
    return gateways[0]


IDLE_WORDS = ("cellvm: this session was idle longer than its limit (--idle-timeout) (3 s) and is "
              "being shut down.")
TTL_WORDS = "cellvm: this session reached its lifetime limit (--ttl) (10 s) and is being shut down."


@pytest.mark.slow
def test_idle_timeout_ends_the_session_in_the_gateways_words(raw):
    s = raw("--idle-timeout", "3")
    s.initialize()
    r = _call(s, 1, "run_python", {"code": "x = 1"})
    assert r["isError"] is False, r
    argv = sessions.cmdline(_gateway_pids(s.p.pid)[0])
    last = len(argv) - 1 - argv[::-1].index("--idle-timeout")     # the one the gateway takes
    assert argv[last + 1] == "3", argv
    t = time.monotonic()
    _ended_by_itself(s)
    assert time.monotonic() - t < 30
    r = _call(s, 2, "run_python", {"code": "x"})           # told once, and not run
    assert r["isError"] is True and r["structuredContent"]["status"] == "lost", r
    text = _text(r)
    assert IDLE_WORDS in text, text
    assert text.startswith('The session "default" had already ended, so this call was not run')
    assert "every variable" in text and "/workspace" in text
    assert "call run_python again" in text
    r = _call(s, 3, "run_python", {"code": "'x' in globals()"})    # a fresh session
    assert r["isError"] is False and r["structuredContent"]["result"] == "False", r
    assert r["structuredContent"]["execution_count"] == 1
    _ended_by_itself(s)                                    # it ends again: close, then restart
    r = _call(s, 4, "close")
    assert r["isError"] is False and "nothing left to close" in _text(r), r
    assert IDLE_WORDS in _text(r)
    r = _call(s, 5, "restart")
    assert r["isError"] is False and "is not open" in _text(r), r
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0


@pytest.mark.slow
def test_ttl_ends_the_session_in_the_gateways_words(raw):
    s = raw("--ttl", "10")
    s.initialize()
    r = _call(s, 1, "run_python", {"code": "y = 1", "session": "t"})
    assert r["isError"] is False, r
    _ended_by_itself(s)
    r = _call(s, 2, "run_python", {"code": "y", "session": "t"})
    assert r["isError"] is True and r["structuredContent"]["status"] == "lost", r
    assert TTL_WORDS in _text(r) and 'session "t" had already ended' in _text(r), r
    # The next call starts a fresh session, whose own lifetime ends the cell it runs.
    s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run_python",
            "arguments": {"code": "print('started', flush=True)\nimport time\ntime.sleep(120)",
                          "session": "t", "timeout_s": 200}}})
    deadline = time.monotonic() + 60
    while not (gateways := _gateway_pids(s.p.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    r = s.recv(240)["result"]
    assert r["isError"] is True and r["structuredContent"]["status"] == "lost", r
    assert _text(r).startswith('The session "t" ended while this call was running'), r
    assert TTL_WORDS in _text(r)
    assert r["structuredContent"]["stdout"] == "started\n"
    assert gateways and sessions.wait_no_leftovers(gateways) == []
    r = _call(s, 4, "restart", {"session": "t"})           # that call heard it: nothing is open
    assert r["isError"] is False and "is not open" in _text(r), r
    r = _call(s, 5, "run_python", {"code": "'y' in globals()", "session": "t"})
    assert r["structuredContent"]["result"] == "False", r
    s.p.stdin.close()
    assert s.p.wait(TIMEOUT) == 0
