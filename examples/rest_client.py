#!/usr/bin/python3
"""A cellvm session over Jupyter Server's REST + WebSocket API, in plain Python (docs/remote.md).

    make serve        # in one terminal: prints the URL and the token
    /usr/bin/python3 examples/rest_client.py --url http://127.0.0.1:8890 --token TOKEN

It creates a kernel (POST /api/kernels), runs a cell over /api/kernels/{id}/channels (Jupyter's
JSON messages on a WebSocket), prints what came back, writes a file under the session's output
directory (/workspace/out in a microVM) and shows the `output_files` of that cell's
execute_reply, downloads the file with `cellvm_get_request` on the control channel (a remote
client cannot read `host_path`, which is on the server's machine), and deletes the kernel.

Only the standard library and Debian's python3-websocket (websocket-client) are used.
--url and --token default to $CELLVM_SERVE_URL and $CELLVM_SERVE_TOKEN.
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import urllib.error
import urllib.request
import uuid

import websocket  # Debian: python3-websocket


class Server:
    """REST calls to a Jupyter Server, authenticated with its token."""

    def __init__(self, url, token):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method, path, body=None, timeout=300):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "token " + self.token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            raise SystemExit(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}")
        return json.loads(text) if text else None


class Channels:
    """One kernel's /channels WebSocket: Jupyter messages as JSON text frames; a message with
    binary buffers comes as one binary frame (jupyter_server's legacy wire format)."""

    def __init__(self, server, kernel_id, timeout=300):
        ws_url = server.url.replace("http", "ws", 1)
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(
            f"{ws_url}/api/kernels/{kernel_id}/channels?session_id={self.session}",
            header=["Authorization: token " + server.token], timeout=timeout)

    def send(self, channel, msg_type, content):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "channel": channel, "header": {"msg_id": msg_id, "msg_type": msg_type,
                                           "session": self.session, "username": "rest_client",
                                           "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": []}))
        return msg_id

    def recv(self):
        frame = self.ws.recv()
        if isinstance(frame, str):
            return json.loads(frame)
        # [n][n offsets, each from the frame's start][JSON message][buffer 1]...[buffer n-1]
        n = struct.unpack("!I", frame[:4])[0]
        offsets = list(struct.unpack("!" + "I" * n, frame[4:4 * (n + 1)])) + [len(frame)]
        msg = json.loads(frame[offsets[0]:offsets[1]])
        msg["buffers"] = [frame[offsets[i]:offsets[i + 1]] for i in range(1, n)]
        return msg

    def request(self, channel, msg_type, content):
        """Send a request; (its reply, the iopub messages it caused up to idle)."""
        msg_id = self.send(channel, msg_type, content)
        reply, outputs, idle = None, [], False
        while reply is None or not idle:
            msg = self.recv()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue                        # e.g. the server's own kernel_info requests
            if msg["channel"] == channel:
                reply = msg
            elif msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif msg["channel"] == "iopub":
                outputs.append(msg)
        return reply, outputs

    def execute(self, code):
        return self.request("shell", "execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})


def show(reply, outputs):
    for m in outputs:
        c = m["content"]
        if m["msg_type"] == "stream":
            for line in c["text"].splitlines():
                print(f"{c['name']}: {line}")
        elif m["msg_type"] in ("execute_result", "display_data"):
            print(f"result: {c['data'].get('text/plain', sorted(c['data']))}")
        elif m["msg_type"] == "error":
            print(f"error: {c['ename']}: {c['evalue']}")
    if reply["content"]["status"] != "ok":
        raise SystemExit(f"the cell failed: {reply['content'].get('ename')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("CELLVM_SERVE_URL", "http://127.0.0.1:8890"))
    ap.add_argument("--token", default=os.environ.get("CELLVM_SERVE_TOKEN"))
    ap.add_argument("--kernel", default="cellvm", help="kernelspec name (default: cellvm)")
    args = ap.parse_args()
    if not args.token:
        raise SystemExit("no token: pass --token or set CELLVM_SERVE_TOKEN (make serve prints it)")
    server = Server(args.url, args.token)

    kernel = server.call("POST", "/api/kernels", {"name": args.kernel})
    kid = kernel["id"]
    print(f"kernel {kid} ({kernel['name']}) started")
    try:
        ch = Channels(server, kid)
        show(*ch.execute("import platform\n"
                         "x = 6 * 7\n"
                         "print('hello from', platform.node(), platform.release())\n"
                         "x"))

        # The output directory is /workspace/out in a VM; CELLVM_OUTDIR names it on any backend.
        reply, outputs = ch.execute(
            "import os\n"
            "out = os.environ.get('CELLVM_OUTDIR', '/workspace/out')\n"
            "with open(os.path.join(out, 'hello.txt'), 'w') as f:\n"
            "    f.write(f'x is {x}\\n')\n")
        show(reply, outputs)
        files = reply["content"].get("output_files", [])
        print("output_files:")
        for f in files:
            print(f"  {f['path']}  {f['size']} bytes  {f.get('mime', '?')}  "
                  f"sha256 {f['sha256'][:16]}...")

        # The bytes, through the same WebSocket: the reply carries them as one buffer.
        hello = next(f for f in files if f["path"].endswith("/hello.txt"))
        reply, _ = ch.request("control", "cellvm_get_request", {"path": "out/hello.txt"})
        c = reply["content"]
        if c["status"] != "ok":
            raise SystemExit(f"cellvm_get_request failed: {c.get('ename')}: {c.get('evalue')}")
        data = reply["buffers"][0]
        ok = hashlib.sha256(data).hexdigest() == hello["sha256"]
        print(f"downloaded out/hello.txt: {len(data)} bytes, "
              f"sha256 {'matches' if ok else 'DIFFERS'}: {data.decode().strip()!r}")
        ch.ws.close()
    finally:
        server.call("DELETE", f"/api/kernels/{kid}")
        print(f"kernel {kid} deleted")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
