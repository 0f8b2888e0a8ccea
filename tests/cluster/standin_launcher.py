#!/usr/bin/python3
"""A stand-in for build/cellvm-remote, written from the remote-kernel launch protocol that
Jupyter Enterprise Gateway and Gateway Provisioners speak (docs/slurm.md), for the provisioner's
tests. Its "kernel" is `sleep`, with SIGINT ignored so that an interrupt leaves it running.

    standin_launcher.py --kernel-id ID --response-address IP:PORT --public-key B64DER
                        --port-range LO..HI [-- ARGS...]

(or KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY, PORT_RANGE in the environment). It binds the five
kernel ports and the comm port, sends ONE connection to the response address carrying
base64(JSON {"version": 1, "key": K, "conn_info": C}) with C = base64(AES-128-ECB(PKCS#7(JSON
connection info))) and K = base64(RSA-PKCS#1-v1.5(the raw 16-byte AES key)), then serves the
comm port: one JSON per connection, read to EOF: {"signum": N} (0 only checks the kernel is
alive) or {"shutdown": 1}.

For the tests: CELLVM_STANDIN_LOG names a file where it appends one line per event (started,
each request, exit); CELLVM_STANDIN_MODE=silent never answers (a launcher that hangs).
"""
import argparse
import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid

from Cryptodome.Cipher import AES, PKCS1_v1_5
from Cryptodome.PublicKey import RSA
from Cryptodome.Random import get_random_bytes
from Cryptodome.Util.Padding import pad

PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")


def log(event, **fields):
    path = os.environ.get("CELLVM_STANDIN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "host": socket.gethostname(), **fields}) + "\n")


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--kernel-id", default=os.environ.get("KERNEL_ID"))
    p.add_argument("--response-address", default=os.environ.get("RESPONSE_ADDRESS"))
    p.add_argument("--public-key", default=os.environ.get("PUBLIC_KEY"))
    p.add_argument("--port-range", default=os.environ.get("PORT_RANGE", "0..0"))
    p.add_argument("rest", nargs="*")
    a = p.parse_args(argv)
    for name in ("kernel_id", "response_address", "public_key"):
        if not getattr(a, name):
            p.error(f"--{name.replace('_', '-')} is required")
    lo, hi = (int(x) for x in a.port_range.split(".."))
    a.ports = (lo, hi)
    return a


def bind(ports, ip):
    lo, hi = ports
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for _ in range(100):
        try:
            s.bind((ip, 0 if lo == hi == 0 else random.randint(lo, hi)))
            s.listen(8)
            return s
        except OSError:
            continue
    raise SystemExit(f"no free port in {lo}..{hi}")


def local_ip_towards(addr):
    """The address of the interface that reaches the response address: the node's own."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))
        return s.getsockname()[0]


def payload(info, public_key_b64):
    aes_key = get_random_bytes(16)
    conn = AES.new(aes_key, AES.MODE_ECB).encrypt(pad(json.dumps(info).encode(), 16))
    rsa = PKCS1_v1_5.new(RSA.import_key(base64.b64decode(public_key_b64)))
    body = {"version": 1, "key": base64.b64encode(rsa.encrypt(aes_key)).decode(),
            "conn_info": base64.b64encode(conn).decode()}
    return base64.b64encode(json.dumps(body).encode())


def serve(comm, kernel):
    comm.settimeout(0.5)
    while kernel.poll() is None:
        try:
            conn, _ = comm.accept()
        except socket.timeout:
            continue
        with conn:
            conn.settimeout(5)
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
        try:
            req = json.loads(data)
        except ValueError:
            log("bad-request", data=data.decode(errors="replace"))
            continue
        log("request", request=req)
        if "signum" in req and int(req["signum"]) > 0:
            kernel.send_signal(int(req["signum"]))
        if req.get("shutdown"):
            kernel.terminate()
    return kernel.wait()


def main():
    a = parse(sys.argv[1:])
    rip, rport = a.response_address.rsplit(":", 1)
    if os.environ.get("CELLVM_STANDIN_MODE") == "silent":
        log("silent")
        time.sleep(3600)
        return 0
    ip = local_ip_towards(rip)
    socks = [bind(a.ports, "0.0.0.0") for _ in PORT_NAMES]
    comm = bind(a.ports, "0.0.0.0")
    # The kernel: ignores SIGINT (ignored dispositions survive exec), dies of 15 and 9.
    kernel = subprocess.Popen(["sleep", "100000"],
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    info = {name: s.getsockname()[1] for name, s in zip(PORT_NAMES, socks)}
    info.update(ip=ip, key=str(uuid.uuid4()), transport="tcp", signature_scheme="hmac-sha256",
                kernel_id=a.kernel_id, comm_port=comm.getsockname()[1], pid=kernel.pid,
                pgid=os.getpgid(kernel.pid))
    with socket.create_connection((rip, int(rport)), timeout=10) as s:
        s.sendall(payload(info, a.public_key))
    log("started", info=info, rest=a.rest)
    rc = serve(comm, kernel)
    log("exit", rc=rc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
