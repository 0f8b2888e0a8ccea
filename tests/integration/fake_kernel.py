#!/usr/bin/python3
"""fake_kernel - a scriptable stand-in for cellvm-kernel, for gateway tests.

Speaks the cellvm channel (docs/channel.md) on --fd N: a hello when ready,
busy/idle around every shell and control request with the reply before
idle, control read on its own thread, `exiting` before a requested exit.

execute_request runs the code with exec() in one namespace (the value of a
last bare expression becomes execute_result), so ordinary cells work.
Cells starting with `%fake` make it misbehave on purpose:

    %fake oversize          frame length over --max-frame
    %fake zero              frame length 0
    %fake garbage           a frame that is not JSON
    %fake notobject         a JSON frame that is not an object
    %fake bogus_type        iopub msg_type nobody knows
    %fake bogus_channel     an envelope on an unknown channel
    %fake unknown_parent    an execute_reply for a request never sent
    %fake bad_content       a stream message without its text
    %fake idle_first        idle before the reply
    %fake big N             a stream message of N bytes of text
    %fake exit N            os._exit(N) mid-cell
    %fake signal N          kill itself with signal N mid-cell
    %fake close             close the channel, then hang
    %fake input PROMPT      input_request, then print the answer
    %fake late              a stream message after idle (late output)

Environment: FAKE_KERNEL_LOG=path appends "channel msg_type msg_id" for each
message received; FAKE_KERNEL_HELLO_DELAY=seconds delays the hello;
FAKE_KERNEL_NO_HELLO=1 never says hello; FAKE_KERNEL_EXIT=N exits at once.
"""
import argparse
import ast
import io
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import uuid

import chanclient      # beside this script: sys.path[0] when the gateway runs it

SESSION = str(uuid.uuid4())


class Channel:
    """The kernel's end of the channel on --fd N, framed by chanclient."""

    def __init__(self, fd, max_frame):
        self.fd = fd
        self.max_frame = max_frame
        self.conn = chanclient.Conn(fd=fd, max_frame=max_frame)

    def raw(self, data):
        self.conn.send_bytes(data)

    def frame(self, body):
        self.conn.send_frame(body)

    def send(self, channel, msg_type, content, parent=None, metadata=None):
        self.conn.send(chanclient.envelope(channel, msg_type, content, parent, metadata,
                                           session=SESSION))

    def recv(self):
        """The next message (its buffers are read and dropped). EOFError at the end, ValueError
        on bad framing or a bad envelope."""
        msg, _ = self.conn.recv()
        return msg


class Stream(io.TextIOBase):
    def __init__(self, kernel, name):
        self.kernel, self.name = kernel, name

    def writable(self):
        return True

    def write(self, text):
        if text and self.kernel.parent is not None:
            self.kernel.chan.send("iopub", "stream", {"name": self.name, "text": text},
                                  self.kernel.parent)
        return len(text)


class Kernel:
    def __init__(self, chan, log):
        self.chan, self.log = chan, log
        self.shell = queue.Queue()
        self.stdin = queue.Queue()
        self.ns = {"__name__": "__main__"}
        self.count = 0
        self.parent = None
        self.running = False
        self.ready = False
        self.closing = False

    # --- reader thread: control and stdin handled here, shell queued ------
    def reader(self):
        try:
            while True:
                msg = self.chan.recv()
                h = msg["header"]
                if self.log:
                    with open(self.log, "a") as f:
                        f.write(f"{msg['channel']} {h.get('msg_type')} {h.get('msg_id')}\n")
                if msg["channel"] == "cellvm":
                    if h["msg_type"] == "hello" and self.ready:
                        self.hello()
                elif msg["channel"] == "control":
                    self.control(msg)
                elif msg["channel"] == "stdin":
                    self.stdin.put(msg)
                else:
                    self.shell.put(msg)
        except (EOFError, OSError, ValueError):
            while self.closing:
                time.sleep(3600)
            os._exit(0)

    def hello(self):
        self.chan.send("cellvm", "hello", {
            "protocol": "cellvm-channel", "version": 1, "role": "kernel", "pid": os.getpid(),
            "implementation": "fake-kernel", "implementation_version": "0",
            "language_version": sys.version.split()[0], "ipython": False,
            "max_frame": self.chan.max_frame, "outdir": "/tmp", "session": SESSION})

    def bracket(self, channel, msg, content, reply_type=None):
        h = msg["header"]
        self.chan.send("iopub", "status", {"execution_state": "busy"}, h)
        self.chan.send(channel, reply_type or h["msg_type"].replace("_request", "_reply"),
                       content, h)
        self.chan.send("iopub", "status", {"execution_state": "idle"}, h)

    def control(self, msg):
        t = msg["header"]["msg_type"]
        if t == "interrupt_request":
            if self.running:
                os.kill(os.getpid(), signal.SIGINT)
            self.bracket("control", msg, {"status": "ok"})
        elif t == "shutdown_request":
            restart = bool(msg["content"].get("restart", False))
            self.bracket("control", msg, {"status": "ok", "restart": restart})
            self.chan.send("cellvm", "exiting",
                           {"reason": "shutdown_request", "restart": restart, "status": 0})
            os._exit(0)
        elif t == "kernel_info_request":
            self.bracket("control", msg, self.kernel_info())
        else:
            self.bracket("control", msg, {"status": "error", "ename": "UnknownMessageType",
                                          "evalue": t, "traceback": []})

    # --- main thread: shell ------------------------------------------------
    def kernel_info(self):
        return {"status": "ok", "protocol_version": "5.3", "implementation": "fake-kernel",
                "implementation_version": "0", "banner": "fake kernel",
                "language_info": {"name": "python", "version": sys.version.split()[0],
                                  "mimetype": "text/x-python", "file_extension": ".py"},
                "help_links": []}

    def serve(self):
        while True:
            try:
                msg = self.shell.get()
            except KeyboardInterrupt:
                continue
            t = msg["header"]["msg_type"]
            if t == "execute_request":
                self.execute(msg)
            elif t == "kernel_info_request":
                self.bracket("shell", msg, self.kernel_info())
            elif t.startswith("comm_") and not t.endswith("_request"):
                h = msg["header"]
                self.chan.send("iopub", "status", {"execution_state": "busy"}, h)
                self.chan.send("iopub", "status", {"execution_state": "idle"}, h)
            else:
                self.bracket("shell", msg, {"status": "error", "ename": "UnknownMessageType",
                                            "evalue": t, "traceback": []})

    def execute(self, msg):
        h, c = msg["header"], msg["content"]
        code, silent = c.get("code", ""), c.get("silent", False)
        self.chan.send("iopub", "status", {"execution_state": "busy"}, h)
        if not silent and c.get("store_history", True):
            self.count += 1
        if not silent:
            self.chan.send("iopub", "execute_input", {"code": code, "execution_count": self.count}, h)
        self.parent = h
        try:
            if code.startswith("%fake"):
                if self.hostile(code.split()[1:], h) == "replied":
                    return
            else:
                self.run(code, h)
            reply = {"status": "ok", "execution_count": self.count, "payload": [],
                     "user_expressions": {}}
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt included
            err = {"ename": type(e).__name__, "evalue": str(e),
                   "traceback": traceback.format_exception(type(e), e, e.__traceback__)}
            self.chan.send("iopub", "error", err, h)
            reply = dict(status="error", execution_count=self.count, **err)
        finally:
            self.parent = None
        self.chan.send("shell", "execute_reply", reply, h)
        self.chan.send("iopub", "status", {"execution_state": "idle"}, h)

    def run(self, code, h):
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = Stream(self, "stdout"), Stream(self, "stderr")
        self.running = True
        try:
            exec(compile(tree, "<cell>", "exec"), self.ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), self.ns)
                if value is not None:
                    self.chan.send("iopub", "execute_result",
                                   {"execution_count": self.count,
                                    "data": {"text/plain": repr(value)}, "metadata": {}}, h)
        finally:
            self.running = False
            sys.stdout, sys.stderr = old

    def hostile(self, args, h):
        what, arg = args[0], (args[1] if len(args) > 1 else "")
        c = self.chan
        if what == "oversize":
            c.raw(chanclient.length_prefix(c.max_frame + 1) + b"x" * 64)
        elif what == "zero":
            c.raw(chanclient.length_prefix(0))
        elif what == "garbage":
            c.frame(b"this is not json{")
        elif what == "notobject":
            c.frame(b"[1, 2, 3]")
        elif what == "bogus_type":
            c.send("iopub", "bogus_type", {"x": 1}, h)
        elif what == "bogus_channel":
            c.send("weird", "stream", {"name": "stdout", "text": "x"}, h)
        elif what == "unknown_parent":
            c.send("shell", "execute_reply", {"status": "ok", "execution_count": 1},
                   {"msg_id": "no-such-request", "msg_type": "execute_request"})
        elif what == "bad_content":
            c.send("iopub", "stream", {"name": "stdout"}, h)
        elif what == "idle_first":
            c.send("iopub", "status", {"execution_state": "idle"}, h)
        elif what == "big":
            c.send("iopub", "stream", {"name": "stdout", "text": "x" * int(arg)}, h)
            return None
        elif what == "exit":
            os._exit(int(arg))
        elif what == "signal":
            os.kill(os.getpid(), int(arg))
        elif what == "close":
            self.closing = True                  # the reader must not exit on EOF
            socket.socket(fileno=os.dup(c.fd)).shutdown(socket.SHUT_RDWR)
            time.sleep(3600)
        elif what == "input":
            c.send("stdin", "input_request", {"prompt": arg, "password": False}, h)
            answer = self.stdin.get(timeout=30)
            c.send("iopub", "stream", {"name": "stdout", "text": f"got {answer['content']['value']}\n"}, h)
            return None
        elif what == "late":
            self.chan.send("shell", "execute_reply", {"status": "ok", "execution_count": self.count}, h)
            self.chan.send("iopub", "status", {"execution_state": "idle"}, h)
            time.sleep(0.2)
            self.chan.send("iopub", "stream", {"name": "stdout", "text": "late\n"}, h)
            return "replied"
        time.sleep(30)  # hostile input sent: the gateway should stop us now
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--max-frame", type=int, default=64 << 20)
    args, _ = ap.parse_known_args()
    if os.environ.get("FAKE_KERNEL_EXIT"):
        os._exit(int(os.environ["FAKE_KERNEL_EXIT"]))
    chan = Channel(args.fd, args.max_frame)
    kernel = Kernel(chan, os.environ.get("FAKE_KERNEL_LOG"))
    if kernel.log:
        with open(kernel.log, "a") as f:
            f.write(f"start {os.getpid()}\n")
    delay = float(os.environ.get("FAKE_KERNEL_HELLO_DELAY", "0"))
    threading.Thread(target=kernel.reader, daemon=True).start()
    if not os.environ.get("FAKE_KERNEL_NO_HELLO"):
        time.sleep(delay)
        kernel.ready = True
        kernel.hello()
    kernel.serve()


if __name__ == "__main__":
    main()
