#!/usr/bin/python3
"""hostile_qemu - a test-only stand-in for qemu-system-x86_64: a guest that misbehaves on purpose
(docs/security.md, "Hostile and frozen guests").

The gateway runs it as `--qemu PATH` (with `--jail off --no-templates`: it is a Python script,
which the jail's minimal root cannot run, and it cannot restore a snapshot). It reads the argv
the gateway builds (gateway/vm/gw_vmargv.c): the kernel and init chardev sockets, the QMP socket
and the console log, listens on all three sockets as QEMU does, and plays the guest: init's side
of the control port (docs/init.md) and a minimal kernel on the kernel port (docs/channel.md):
hello after the sync marker, kernel_info, execute (a Python expression or statement), interrupt,
shutdown. Enough for a session to become ready and run `1 + 1`.

Then it misbehaves on request: a cell `%hostile WHAT` makes the guest do WHAT. Unless said
otherwise the cell never finishes (the gateway must end it).

    init_oversize       a frame on init's port with a length over any cap
    init_big            one 21 MiB message on init's port (over its 20 MiB cap)
    init_badjson        a frame of bad JSON on init's port (the cell finishes)
    init_unasked        a reply to a request the gateway never made (the cell finishes)
    init_flood          replies nobody asked for, without end
    init_endless        half a frame on init's port, then nothing (init stalled mid-write)
    init_deaf           init stops reading its port and answering
    init_dotdot         from now on file replies name /workspace/../../etc/... (finishes)
    kernel_oversize     a frame on the kernel port with a length over the cap
    kernel_badjson      a frame of bad JSON on the kernel port
    kernel_unasked      an execute_reply to a request never made
    kernel_endless      half a frame on the kernel port, then nothing
    kernel_flood        protocol_error notices (not fatal) on the kernel port, without end
    kernel_deaf         the kernel stops reading its port (the test then sends a lot)
    console_flood       the console log is written without end
    stop                SIGSTOP to this whole process (a frozen QEMU)
    qmp_oversize        from now on QMP answers a command with a line that never ends (finishes)
    qmp_badjson         ... with a line that is not JSON (finishes)
    qmp_flood           ... with events and replies to other ids, without end (finishes)
    qmp_stall           ... never (finishes)

HOSTILE_QEMU_LOG=path (optional) gets one line per VM started and per action.
"""
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chanclient  # noqa: E402

SYNC = chanclient.SYNC_MARKER


def log(text):
    path = os.environ.get("HOSTILE_QEMU_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {text}\n")


def parse_argv(argv):
    """{"kernel": path, "init": path, "qmp": path, "console": path} from QEMU's command line."""
    out = {}
    for i, a in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a == "-chardev" and nxt.startswith("socket,"):
            kv = dict(p.split("=", 1) for p in nxt.split(",")[1:] if "=" in p)
            out[{"k": "kernel", "i": "init"}.get(kv.get("id"), kv.get("id"))] = kv["path"]
        elif a == "-qmp" and nxt.startswith("unix:"):
            out["qmp"] = nxt[5:].split(",")[0]
        elif a == "-serial" and nxt.startswith("file:"):
            out["console"] = nxt[5:]
    return out


def listen(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    return s


def reply(conn, req, msg_type, content, session, buffers=()):
    msg = chanclient.envelope("cellvm", msg_type, content, req["header"], session=session)
    conn.send(msg, buffers)


class Guest:
    """Init and the kernel of one fake VM."""

    def __init__(self, paths):
        self.paths = paths
        self.console = open(paths["console"], "wb", buffering=0)
        self.init = None                 # chanclient.Conn of init's port, once connected
        self.kconn = None                # ... of the kernel port
        self.session = str(uuid.uuid4())
        self.ksession = str(uuid.uuid4())
        self.generation = 0              # the running kernel; bumped when it is killed
        self.kernel_alive = False
        self.restarts = 0
        self.kernel_deaf = threading.Event()
        self.init_deaf = False
        self.dotdot = False
        self.files = {}
        self.discard = False             # a killed kernel's unread bytes go, as the guest's
                                         # port driver drops them when the next kernel opens it
        self.lock = threading.Lock()

    # --- the console --------------------------------------------------------
    def say(self, text):
        self.console.write(text.encode())

    # --- the kernel -----------------------------------------------------------
    def kernel_hello(self):
        self.kconn.send_bytes(SYNC)
        self.ksend("cellvm", "hello", {
            "protocol": "cellvm-channel", "version": 1, "role": "kernel", "pid": 100 + self.generation,
            "implementation": "hostile-qemu", "implementation_version": "0",
            "language_version": sys.version.split()[0], "ipython": False,
            "max_frame": chanclient.MAX_FRAME, "outdir": "/workspace/out", "session": self.ksession})

    def ksend(self, channel, msg_type, content, parent=None):
        self.kconn.send(chanclient.envelope(channel, msg_type, content, parent, session=self.ksession))

    def start_kernel(self):
        with self.lock:
            self.generation += 1
            self.kernel_alive = True
        if self.kconn:
            self.kernel_hello()

    def kill_kernel(self, requested):
        with self.lock:
            if not self.kernel_alive:
                return
            self.kernel_alive = False
            self.generation += 1
            self.discard = True
            self.kernel_deaf.clear()
        if requested:
            c = {"reason": "requested", "code": 137, "exit_code": None, "signal": "SIGKILL",
                 "requested": True, "description": "The kernel was stopped on request."}
        else:
            c = {"reason": "signaled", "code": 137, "exit_code": None, "signal": "SIGKILL",
                 "requested": False, "description": "The kernel died from signal SIGKILL (Killed)."}
        c.update({"pid": 100, "oom_killed": False, "runtime_s": 1.0, "restarts": self.restarts})
        self.init_notice("kernel_exited", c)

    def kernel_reader(self, sock):
        conn = chanclient.Conn(sock=sock)
        self.kconn = conn
        if self.kernel_alive:
            self.kernel_hello()
        while True:
            while self.kernel_deaf.is_set():
                time.sleep(0.05)
            if self.discard:
                self.drain(sock, conn)
            try:
                msg, _ = conn.recv()
            except (EOFError, OSError, ValueError):
                return
            gen = self.generation
            if not self.kernel_alive:
                continue
            t = msg["header"].get("msg_type")
            if msg["channel"] == "cellvm" and t == "hello":
                self.kernel_hello()
            elif msg["channel"] in ("shell", "control"):
                threading.Thread(target=self.kernel_request, args=(msg, gen), daemon=True).start()

    def drain(self, sock, conn):
        self.discard = False
        conn._buf.clear()
        sock.setblocking(False)
        try:
            while sock.recv(1 << 20):
                pass
        except OSError:
            pass
        sock.setblocking(True)

    def bracket(self, channel, msg, content, reply_type=None):
        h = msg["header"]
        self.ksend("iopub", "status", {"execution_state": "busy"}, h)
        self.ksend(channel, reply_type or h["msg_type"].replace("_request", "_reply"), content, h)
        self.ksend("iopub", "status", {"execution_state": "idle"}, h)

    def kernel_request(self, msg, gen):
        t = msg["header"]["msg_type"]
        if t == "kernel_info_request":
            self.bracket(msg["channel"], msg, {
                "status": "ok", "protocol_version": "5.3", "implementation": "hostile-qemu",
                "implementation_version": "0", "banner": "hostile qemu",
                "language_info": {"name": "python", "version": sys.version.split()[0],
                                  "mimetype": "text/x-python", "file_extension": ".py"},
                "help_links": []})
        elif t == "execute_request":
            self.execute(msg, gen)
        elif t == "shutdown_request":
            self.bracket(msg["channel"], msg, {"status": "ok", "restart": False})
            self.ksend("cellvm", "exiting", {"reason": "shutdown_request", "restart": False,
                                             "status": 0})
        elif t == "interrupt_request":
            self.bracket(msg["channel"], msg, {"status": "ok"})
        else:
            self.bracket(msg["channel"], msg, {"status": "error", "ename": "UnknownMessageType",
                                               "evalue": t, "traceback": []})

    def execute(self, msg, gen):
        h, code = msg["header"], msg["content"].get("code", "")
        self.ksend("iopub", "status", {"execution_state": "busy"}, h)
        if code.startswith("%hostile"):
            if not self.hostile(code.split()[1], h):
                while gen == self.generation:     # the gateway must end this kernel
                    time.sleep(0.1)
                return
            value = None
        else:
            try:
                value = repr(eval(code, {}))
            except SyntaxError:
                exec(code, {})
                value = None
        if value is not None:
            self.ksend("iopub", "execute_result", {"execution_count": 1,
                                                   "data": {"text/plain": value}, "metadata": {}}, h)
        self.ksend("shell", "execute_reply", {"status": "ok", "execution_count": 1, "payload": [],
                                              "user_expressions": {}}, h)
        self.ksend("iopub", "status", {"execution_state": "idle"}, h)

    # --- init -------------------------------------------------------------------
    def init_notice(self, msg_type, content):
        if self.init and not self.init_deaf:
            self.init.send(chanclient.envelope("cellvm", msg_type, content, session=self.session))

    def kernel_state(self):
        return {"state": "running" if self.kernel_alive else "exited", "pid": 100,
                "restarts": self.restarts, "uptime_s": 1.0, "memory_limit_bytes": 1 << 28,
                "last_exit": None}

    def init_reader(self, sock):
        conn = chanclient.Conn(sock=sock)
        self.init = conn
        while True:
            try:
                msg, bufs = conn.recv()
            except (EOFError, OSError, ValueError):
                return
            while self.init_deaf:
                time.sleep(3600)
            self.init_request(conn, msg, bufs)

    def init_request(self, conn, msg, bufs):
        t = msg["header"]["msg_type"]
        s = self.session
        if t == "hello":
            reply(conn, msg, "hello", {
                "protocol": "cellvm-init", "version": 1, "role": "init", "pid": 1,
                "implementation": "hostile-qemu", "implementation_version": "0",
                "boot_id": self.session, "hellos": 1, "workspace": "/workspace",
                "workspace_fs": "ext4", "workspace_mounted": True, "kernel_port": "cellvm.kernel",
                "max_frame": chanclient.MAX_FRAME, "kernel": self.kernel_state(), "status": "ok"}, s)
        elif t == "status_request":
            reply(conn, msg, "status_reply", {"status": "ok", "kernel": self.kernel_state(),
                                              "workspace_mounted": True}, s)
        elif t == "restart_request":
            self.kill_kernel(True)
            self.restarts += 1
            reply(conn, msg, "restart_reply", {"status": "ok", "kernel": self.kernel_state()}, s)
            self.start_kernel()
        elif t == "kill_request":
            reply(conn, msg, "kill_reply", {"status": "ok"}, s)
            self.kill_kernel(False)
        elif t in ("put_request", "get_request"):
            self.file_request(conn, msg, bufs)
        elif t == "workspace_detach_request":
            reply(conn, msg, "workspace_detach_reply", {"status": "ok", "detached": True,
                                                        "kernel_killed": False}, s)
        elif t == "shutdown_request":
            reply(conn, msg, "shutdown_reply", {"status": "ok"}, s)
            time.sleep(0.2)
            os._exit(0)
        else:
            reply(conn, msg, t.replace("_request", "_reply"), {
                "status": "error", "ename": "UnknownMessageType", "evalue": t}, s)

    def file_request(self, conn, msg, bufs):
        c = msg["content"]
        rel = c["path"].removeprefix("/workspace/")
        shown = "/workspace/../../etc/" + rel if self.dotdot else "/workspace/" + rel
        if msg["header"]["msg_type"] == "put_request":
            data = bufs[0] if bufs else b""
            self.files[rel] = (self.files.get(rel, b"") if c.get("append") else b"") + bytes(data)
            reply(conn, msg, "put_reply", {
                "status": "ok", "path": shown, "size": len(self.files[rel]), "written": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}, self.session)
            return
        data = self.files.get(rel)
        if data is None:
            reply(conn, msg, "get_reply", {"status": "error", "ename": "FileNotFound",
                                           "evalue": rel}, self.session)
            return
        off, n = c.get("offset", 0), c.get("length", 16 << 20)
        chunk = data[off:off + n]
        reply(conn, msg, "get_reply", {
            "status": "ok", "path": shown, "size": len(data), "offset": off, "length": len(chunk),
            "eof": off + len(chunk) >= len(data), "sha256": hashlib.sha256(chunk).hexdigest()},
            self.session, [chunk] if chunk else [])

    # --- misbehaving ------------------------------------------------------------
    def hostile(self, what, h):
        """Do WHAT; True when the cell should then finish normally."""
        log(f"hostile {what}")
        junk_reply = chanclient.envelope("cellvm", "status_reply", {"status": "ok"},
                                         {"msg_id": "never-sent", "msg_type": "status_request"},
                                         session=self.session)
        if what == "init_oversize":
            self.init.send_bytes(chanclient.length_prefix(0x7FFFFFF0) + b"x" * 64)
        elif what == "init_big":
            body = json.dumps(dict(junk_reply, content={"status": "ok", "pad": "x" * (21 << 20)}))
            self.init.send_frame(body.encode())
        elif what == "init_badjson":
            self.init.send_frame(b"{this is not json")
            return True
        elif what == "init_unasked":
            self.init.send(junk_reply)
            return True
        elif what == "init_flood":
            threading.Thread(target=self.flood_init, args=(junk_reply,), daemon=True).start()
        elif what == "init_endless":
            self.init_deaf = True
            self.init.send_bytes(chanclient.length_prefix(4096) + b'{"channel": "cellvm", ')
        elif what == "init_deaf":
            self.init_deaf = True
        elif what == "init_dotdot":
            self.dotdot = True
            return True
        elif what == "kernel_oversize":
            self.kconn.send_bytes(chanclient.length_prefix(0x7FFFFFF0) + b"x" * 64)
        elif what == "kernel_badjson":
            self.kconn.send_frame(b"{this is not json")
        elif what == "kernel_unasked":
            self.ksend("shell", "execute_reply", {"status": "ok", "execution_count": 1},
                       {"msg_id": "never-sent", "msg_type": "execute_request"})
        elif what == "kernel_endless":
            self.kconn.send_bytes(chanclient.length_prefix(4096) + b'{"channel": "iopub", ')
        elif what == "kernel_flood":
            gen = self.generation
            while gen == self.generation:
                try:
                    self.ksend("cellvm", "protocol_error", {"error": "flood", "fatal": False})
                except OSError:
                    break
        elif what == "kernel_deaf":
            self.kernel_deaf.set()
        elif what == "console_flood":
            threading.Thread(target=self.flood_console, daemon=True).start()
        elif what.startswith("qmp_"):
            QMP_MODE[0] = what
            return True
        elif what == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        return False

    def flood_init(self, msg):
        data = chanclient.encode(msg)
        try:
            while True:
                self.init.send_bytes(data * 64)
        except OSError:
            pass

    def flood_console(self):
        line = b"flood flood flood flood flood flood flood flood flood flood flood flood\n" * 900
        while True:                      # ~1.3 MB/s: several cap's worth before it is stopped
            self.console.write(line)
            time.sleep(0.05)


QMP_MODE = ["ok"]


def qmp_answer(f, cmd):
    mode = QMP_MODE[0]
    if cmd.get("execute") == "qmp_capabilities" or mode == "ok":
        ret = {"status": "running", "running": True} if cmd.get("execute") == "query-status" else {}
        f.write(json.dumps({"return": ret, "id": cmd.get("id")}).encode() + b"\r\n")
    elif mode == "qmp_oversize":
        while True:
            f.write(b"{" + b" " * 65536)
    elif mode == "qmp_badjson":
        f.write(b"this is not json\r\n")
    elif mode == "qmp_flood":
        junk = (b'{"event": "JUNK", "data": {}}\r\n{"return": {}, "id": 999999}\r\n') * 1000
        while True:
            f.write(junk)
    elif mode == "qmp_stall":
        time.sleep(3600)


def serve(listener, handler):
    while True:
        sock, _ = listener.accept()      # one client at a time, as QEMU serves a port
        handler(sock)
        sock.close()


def qmp_serve(listener):
    while True:
        sock, _ = listener.accept()
        f = sock.makefile("rwb", buffering=0)
        try:
            f.write(b'{"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}}, '
                    b'"capabilities": []}}\r\n')
            for line in f:
                qmp_answer(f, json.loads(line))
        except (OSError, ValueError):
            pass
        sock.close()


def main():
    paths = parse_argv(sys.argv[1:])
    log(f"start {json.dumps(paths)}")
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    guest = Guest(paths)
    guest.say("hostile_qemu: booting\n")
    listeners = {k: listen(paths[k]) for k in ("kernel", "init", "qmp")}
    threading.Thread(target=serve, args=(listeners["kernel"], guest.kernel_reader), daemon=True).start()
    threading.Thread(target=qmp_serve, args=(listeners["qmp"],), daemon=True).start()
    guest.start_kernel()
    serve(listeners["init"], guest.init_reader)


if __name__ == "__main__":
    main()
