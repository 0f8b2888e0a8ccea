"""A small driver for `cellvm-kernel`, written from docs/channel.md.

It spawns the kernel with one end of a socketpair passed as `--fd N`, speaks the channel framing
through `chanclient` (4-byte big-endian length, then that many bytes; a JSON envelope, then
`buffers` raw frames), and records every message the kernel sends, in arrival order, with its
arrival time. Because the channel is one byte stream, the arrival order is the exact order the kernel wrote its messages in,
across iopub, shell, control, stdin and cellvm.

Nothing here trusts the kernel: frames are bounded, and anything that is not a well-formed message
is recorded in `bad_frames` (tests assert on it) rather than raised in the reader thread.
"""
import base64
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import chanclient
import firstuse
from chanclient import CHANNELS

DEFAULT_MAX_FRAME = chanclient.MAX_FRAME
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text):
    return ANSI_RE.sub("", text)


class KernelExited(AssertionError):
    pass


class Received:
    """One message from the kernel: the decoded envelope, its buffers and its arrival time."""

    __slots__ = ("msg", "buffers", "t", "index")

    def __init__(self, msg, buffers, t, index):
        self.msg, self.buffers, self.t, self.index = msg, buffers, t, index

    # Convenience accessors; they never raise on a malformed message.
    @property
    def channel(self):
        return self.msg.get("channel")

    @property
    def header(self):
        h = self.msg.get("header")
        return h if isinstance(h, dict) else {}

    @property
    def msg_type(self):
        return self.header.get("msg_type")

    @property
    def parent(self):
        p = self.msg.get("parent_header")
        return p if isinstance(p, dict) else {}

    @property
    def parent_id(self):
        return self.parent.get("msg_id")

    @property
    def content(self):
        c = self.msg.get("content")
        return c if isinstance(c, dict) else {}

    def __repr__(self):
        c = json.dumps(self.content)
        if len(c) > 300:
            c = c[:300] + "..."
        return f"<{self.channel}/{self.msg_type} #{self.index} t={self.t:.3f} {c}>"


class Result:
    """Everything the kernel sent for one request, in arrival order, up to its idle."""

    def __init__(self, request, msgs):
        self.request = request          # the envelope we sent
        self.msgs = msgs                # list[Received], parent_header.msg_id == request id
        self.iopub = [m for m in msgs if m.channel == "iopub"]
        self.stdin = [m for m in msgs if m.channel == "stdin"]
        replies = [m for m in msgs if m.channel in ("shell", "control")]
        self.replies = replies
        self.reply = replies[0] if replies else None

    @property
    def header(self):
        return self.request["header"]

    @property
    def msg_id(self):
        return self.request["header"]["msg_id"]

    @property
    def outputs(self):
        """iopub messages other than status and execute_input: what a frontend shows as output."""
        return [m for m in self.iopub if m.msg_type not in ("status", "execute_input")]

    def of_type(self, msg_type):
        return [m for m in self.iopub if m.msg_type == msg_type]

    def stream_text(self, name="stdout"):
        return "".join(m.content.get("text", "") for m in self.of_type("stream")
                       if m.content.get("name") == name)

    def types(self):
        return [(m.channel, m.msg_type) for m in self.msgs]

    def __repr__(self):
        return "Result(\n  " + "\n  ".join(repr(m) for m in self.msgs) + "\n)"


class KernelDriver:
    def __init__(self, kernel_bin, outdir=None, max_frame=None, extra_args=(), env=None,
                 send_hello=True, startup_timeout=60.0, wait_hello=True, launcher=()):
        self.kernel_bin = str(kernel_bin)
        self.session = uuid.uuid4().hex
        self.max_frame = max_frame or DEFAULT_MAX_FRAME
        self.received = []          # list[Received], arrival order
        self.bad_frames = []        # (reason, raw bytes) of frames we could not decode
        self.sent = {}              # msg_id -> envelope we sent
        self.eof = False
        self._cond = threading.Condition()
        self._tmp = tempfile.TemporaryDirectory(prefix="cellvm-kt-")
        # Never the kernel's default (/workspace/out): on the host that is the
        # host's own /workspace.
        if outdir is None:
            outdir = os.path.join(self._tmp.name, "out")
        self.outdir = outdir
        self.stderr_path = os.path.join(self._tmp.name, "kernel.stderr")

        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Frames from the kernel are bounded by the default maximum, whatever --max-frame it got.
        self.conn = chanclient.Conn(sock=self.sock, max_frame=DEFAULT_MAX_FRAME)
        # launcher: a program that execs the kernel (careless_launcher.py), so the same pid
        argv = list(launcher) + [self.kernel_bin, "--fd", str(child.fileno())]
        if outdir is not None:
            argv += ["--outdir", str(outdir)]
        if max_frame is not None:
            argv += ["--max-frame", str(max_frame)]
        argv += list(extra_args)
        self.argv = argv
        kenv = dict(os.environ if env is None else env)
        firstuse.ensure(kenv)       # matplotlib's font cache for this HOME, once
        self._stderr_f = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=self._stderr_f, stderr=self._stderr_f, env=kenv,
                                     cwd=self._tmp.name)
        self.pid = self.proc.pid
        child.close()
        self._reader = threading.Thread(target=self._read_loop, name="kernel-reader", daemon=True)
        self._reader.start()
        self.hello = None
        if send_hello:
            self.send_hello()
        if wait_hello:
            self.hello = self.wait_for(lambda m: m.channel == "cellvm" and m.msg_type == "hello",
                                       timeout=startup_timeout, what="kernel hello")

    # ---------------------------------------------------------------- reading
    def _read_loop(self):
        try:
            while True:
                data = self.conn.read_frame()
                if data is None:
                    break
                t = time.monotonic()
                try:
                    msg = chanclient.decode(data)
                except (ValueError, UnicodeDecodeError) as e:
                    self._bad(f"undecodable frame: {e}", data)
                    continue
                try:
                    nbuf = chanclient.buffer_count(msg)
                except ValueError as e:
                    self._bad(str(e), data)
                    nbuf = 0
                buffers = []
                for _ in range(nbuf):
                    b = self.conn.read_frame()
                    if b is None:
                        raise ValueError("EOF before all buffers")
                    buffers.append(b)
                msg, buffers = chanclient.raw_stream(msg, buffers)
                with self._cond:
                    self.received.append(Received(msg, buffers, t, len(self.received)))
                    self._cond.notify_all()
        except (OSError, ValueError) as e:
            self._bad(f"reader stopped: {e}", b"")
        finally:
            with self._cond:
                self.eof = True
                self._cond.notify_all()

    def _bad(self, reason, data):
        with self._cond:
            self.bad_frames.append((reason, data[:200]))
            self._cond.notify_all()

    # ---------------------------------------------------------------- writing
    def send_bytes(self, data: bytes):
        self.conn.send_bytes(data)

    def send_frame(self, payload: bytes):
        self.conn.send_frame(payload)

    def make_header(self, msg_type):
        return chanclient.make_header(msg_type, self.session, "tester", msg_id=uuid.uuid4().hex)

    def envelope(self, channel, msg_type, content=None, parent=None, metadata=None, header=None):
        return chanclient.envelope(channel, msg_type, content, parent, metadata,
                                   header or self.make_header(msg_type))

    def encode(self, env, buffers=()):
        return chanclient.encode(env, buffers)

    def send(self, env, buffers=()):
        if "header" in env and isinstance(env["header"], dict) and "msg_id" in env["header"]:
            self.sent[env["header"]["msg_id"]] = env
        self.send_bytes(self.encode(env, buffers))
        return env

    def send_hello(self, **extra):
        content = {"protocol": "cellvm-channel", "version": 1, "role": "driver"}
        content.update(extra)
        return self.send(self.envelope("cellvm", "hello", content))

    def request(self, channel, msg_type, content=None, metadata=None):
        """Send a request; returns its msg_id."""
        env = self.send(self.envelope(channel, msg_type, content, metadata=metadata))
        return env["header"]["msg_id"]

    def execute_content(self, code, silent=False, store_history=True, user_expressions=None,
                        allow_stdin=False, stop_on_error=True):
        return {"code": code, "silent": silent, "store_history": store_history,
                "user_expressions": user_expressions or {}, "allow_stdin": allow_stdin,
                "stop_on_error": stop_on_error}

    def send_execute(self, code, **kw):
        return self.request("shell", "execute_request", self.execute_content(code, **kw))

    # ---------------------------------------------------------------- waiting
    def snapshot(self):
        with self._cond:
            return list(self.received)

    def wait_for(self, pred, timeout=10.0, start=0, what="message"):
        """First received message at index >= start matching pred."""
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.received):
                    m = self.received[i]
                    i += 1
                    if pred(m):
                        return m
                if self.eof:
                    raise KernelExited(f"channel closed while waiting for {what}; "
                                       f"exit={self.proc.poll()} stderr:\n{self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}; "
                                         f"last messages: {self.received[-8:]}\n"
                                         f"stderr:\n{self.stderr_tail()}")
                self._cond.wait(left)

    def for_parent(self, msg_id):
        return [m for m in self.snapshot() if m.parent_id == msg_id]

    def collect(self, msg_id, timeout=30.0):
        """Wait for the reply and the iopub idle of request msg_id; return a Result with every
        message whose parent is that request, in arrival order (up to and including idle)."""
        def done():
            msgs = [m for m in self.received if m.parent_id == msg_id]
            has_reply = any(m.channel in ("shell", "control") for m in msgs)
            idle = [m for m in msgs if m.channel == "iopub" and m.msg_type == "status"
                    and m.content.get("execution_state") == "idle"]
            return msgs if (has_reply and idle) else None

        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                msgs = done()
                if msgs is not None:
                    break
                if self.eof:
                    raise KernelExited(f"channel closed while collecting {msg_id}; got "
                                       f"{[m for m in self.received if m.parent_id == msg_id]}; "
                                       f"exit={self.proc.poll()} stderr:\n{self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    got = [m for m in self.received if m.parent_id == msg_id]
                    raise AssertionError(f"timed out after {timeout}s collecting {msg_id}: got "
                                         f"{got}\nstderr:\n{self.stderr_tail()}")
                self._cond.wait(left)
        # Messages arriving after idle (there should be none) stay visible via for_parent().
        last_idle = max(m.index for m in msgs if m.channel == "iopub" and m.msg_type == "status"
                        and m.content.get("execution_state") == "idle")
        return Result(self.sent[msg_id], [m for m in msgs if m.index <= last_idle])

    def execute(self, code, timeout=30.0, **kw):
        return self.collect(self.send_execute(code, **kw), timeout=timeout)

    def roundtrip(self, channel, msg_type, content=None, timeout=10.0):
        return self.collect(self.request(channel, msg_type, content), timeout=timeout)

    def reply_to_input(self, input_request, value):
        env = self.envelope("stdin", "input_reply", {"value": value}, parent=input_request.header)
        return self.send(env)

    # ---------------------------------------------------------------- lifecycle
    def stderr_tail(self, n=4000):
        try:
            self._stderr_f.flush()
            with open(self.stderr_path, "rb") as f:
                data = f.read()
            return data[-n:].decode("utf-8", "replace")
        except OSError:
            return "<no stderr>"

    def wait_exit(self, timeout=10.0):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self):
        return self.proc.poll() is None

    def close(self):
        """Kill the kernel by pid (never by name) and release everything."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self._reader.join(timeout=2)
        self._stderr_f.close()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def b64_png(data):
    """Decode an image/png mimebundle value; returns bytes (raises if not base64)."""
    if isinstance(data, list):        # nbformat may split strings into lines
        data = "".join(data)
    return base64.b64decode(data, validate=False)


# =============================================================================== checks
# Shared assertions used by the test modules. Every one of them can fail.

IOPUB_TYPES = {"status", "stream", "display_data", "execute_input", "execute_result", "error",
               "clear_output", "update_display_data", "comm_open", "comm_msg", "comm_close"}
DATE_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                     r"[0-9a-fA-F]{12}$")


def reply_type(request_type):
    assert request_type.endswith("_request")
    return request_type[: -len("_request")] + "_reply"


def status_of(m):
    if m.channel == "iopub" and m.msg_type == "status":
        return m.content.get("execution_state")
    return None


def assert_bracketed(res):
    """busy first, idle last, one reply (on the request's channel, typed *_reply) before idle,
    and every message's parent_header exactly equal to the request header."""
    req = res.request
    msgs = res.msgs
    assert msgs, f"nothing received for {req['header']['msg_type']}"
    assert status_of(msgs[0]) == "busy", f"first message is not status busy: {res}"
    assert status_of(msgs[-1]) == "idle", f"last message is not status idle: {res}"
    states = [status_of(m) for m in msgs if status_of(m)]
    assert states == ["busy", "idle"], f"expected exactly one busy and one idle, got {states}"
    assert len(res.replies) == 1, f"expected exactly one reply, got {res.replies}"
    reply = res.reply
    assert reply.channel == req["channel"], \
        f"reply came on {reply.channel!r}, request was on {req['channel']!r}"
    assert reply.msg_type == reply_type(req["header"]["msg_type"]), reply
    assert reply.index < msgs[-1].index, "reply must be sent before idle"
    for m in msgs:
        assert m.parent == req["header"], \
            f"parent_header of {m!r} is not the request header byte for byte:\n" \
            f"{m.parent}\n!=\n{req['header']}"
    return reply


def assert_execute_ok(res, silent=False):
    reply = assert_bracketed(res)
    c = reply.content
    assert c.get("status") == "ok", f"execute failed: {c}\n{res}"
    assert isinstance(c.get("execution_count"), int) and not isinstance(
        c.get("execution_count"), bool), c
    if not silent:
        ei = res.of_type("execute_input")
        assert len(ei) == 1, f"expected one execute_input: {res}"
        assert res.msgs[1] is ei[0], f"execute_input must directly follow busy: {res}"
        assert ei[0].content.get("code") == res.request["content"]["code"], \
            "execute_input.code is not byte-exact"
    return c


def assert_only_stream_before(res, later_types):
    """Every stream message precedes every message of later_types and the reply."""
    streams = [m.index for m in res.of_type("stream")]
    later = [m.index for m in res.iopub if m.msg_type in later_types]
    if res.reply:
        later.append(res.reply.index)
    if streams and later:
        assert max(streams) < min(later), f"stream after {later_types}/reply: {res}"


def envelope_problems(driver):
    """Everything wrong with the envelopes the kernel sent so far (list of strings)."""
    probs = []
    seen_ids = set()
    session = driver.hello.content.get("session") if driver.hello else None
    for reason, data in driver.bad_frames:
        probs.append(f"bad frame from kernel: {reason} {data!r}")
    for m in driver.snapshot():
        msg = m.msg
        where = repr(m)
        extra = set(msg) - {"channel", "header", "parent_header", "metadata", "content", "buffers"}
        if extra:
            probs.append(f"unexpected envelope keys {extra}: {where}")
        if m.channel not in CHANNELS:
            probs.append(f"bad channel: {where}")
        for k in ("header", "parent_header", "metadata", "content"):
            if not isinstance(msg.get(k), dict):
                probs.append(f"{k} is not an object: {where}")
        b = msg.get("buffers", 0)
        if b != len(m.buffers):
            probs.append(f"buffers {b!r} but {len(m.buffers)} buffer frames: {where}")
        h = m.header
        want = {"msg_id", "session", "username", "date", "msg_type", "version"}
        if set(h) != want:
            probs.append(f"header keys {sorted(h)} != {sorted(want)}: {where}")
        if not isinstance(h.get("msg_id"), str) or not UUID_RE.match(h.get("msg_id", "")):
            probs.append(f"msg_id is not a UUID: {h.get('msg_id')!r} {where}")
        elif h["msg_id"] in seen_ids:
            probs.append(f"msg_id reused: {where}")
        seen_ids.add(h.get("msg_id"))
        if session is not None and h.get("session") != session:
            probs.append(f"header.session {h.get('session')!r} != kernel session {session!r}")
        if h.get("username") != "cellvm":
            probs.append(f"username {h.get('username')!r}: {where}")
        if not isinstance(h.get("date"), str) or not DATE_RE.match(h.get("date", "")):
            probs.append(f"date {h.get('date')!r} is not ISO-8601 with microseconds and Z")
        if h.get("version") != "5.3":
            probs.append(f"version {h.get('version')!r}: {where}")
        if not isinstance(h.get("msg_type"), str) or not h.get("msg_type"):
            probs.append(f"msg_type missing: {where}")
        t = m.msg_type
        if m.channel == "iopub" and t not in IOPUB_TYPES:
            probs.append(f"unexpected iopub msg_type: {where}")
        if m.channel in ("shell", "control") and not str(t).endswith("_reply"):
            probs.append(f"non-reply on {m.channel}: {where}")
        if m.channel == "stdin" and t != "input_request":
            probs.append(f"unexpected stdin msg_type: {where}")
        if m.channel == "cellvm":
            if t not in ("hello", "protocol_error", "exiting"):
                probs.append(f"unexpected cellvm msg_type: {where}")
            if m.parent != {}:
                probs.append(f"cellvm message with a parent: {where}")
        starting = t == "status" and m.content.get("execution_state") == "starting"
        if m.channel in ("iopub", "shell", "control", "stdin") and not starting:
            pid = m.parent_id
            if pid not in driver.sent:
                probs.append(f"parent_header is not a request we sent: {where}")
            elif m.parent != driver.sent[pid]["header"]:
                probs.append(f"parent_header differs from the request header: {where}")
        try:
            json.dumps(msg, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            probs.append(f"message is not valid UTF-8 (lone surrogate?): {where}")
    return probs


# =============================================================================== fixtures
import pytest  # noqa: E402  (the driver itself does not need pytest)


@pytest.fixture
def new_kernel(kernel_bin, tmp_path):
    """Factory: new_kernel(**kw) -> a started KernelDriver; every one is killed at teardown."""
    made = []

    def make(**kw):
        kw.setdefault("outdir", tmp_path / f"out{len(made)}")
        d = KernelDriver(kernel_bin, **kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


@pytest.fixture(scope="module")
def kernel(kernel_bin, tmp_path_factory):
    """One kernel shared by a test module (tests only rely on what they set up themselves)."""
    d = KernelDriver(kernel_bin, outdir=tmp_path_factory.mktemp("shared-out"))
    yield d
    d.close()
