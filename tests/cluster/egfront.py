"""The front's side of Enterprise Gateway's remote-kernel protocol, written from the protocol
(EG's ResponseManager): an RSA key pair, a response socket, the version-1 payload decoded. The
tests and the benchmarks play EG with it against cellvm-remote (docs/cluster.md)."""
import base64
import json
import socket

from Cryptodome.Cipher import AES, PKCS1_v1_5
from Cryptodome.PublicKey import RSA
from Cryptodome.Util.Padding import unpad


class Front:
    """What EG's ResponseManager does: a key pair, a response socket, the payload decoded."""

    def __init__(self, bits=1024):
        self.private = RSA.generate(bits)
        pem = self.private.publickey().export_key("PEM").decode()
        self.public_key = "".join(l for l in pem.splitlines() if "-----" not in l)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def receive(self, timeout=30):
        """The decrypted connection info of the next reply (read until the launcher closes).
        A connection whose bytes are not a reply is skipped, as EG's ResponseManager logs it
        and goes on: an ephemeral port can be one that a ZMQ socket elsewhere on this host
        still reconnects to, and its greeting must not count as the launcher's answer."""
        import time
        deadline, last = time.monotonic() + timeout, None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply within {timeout} s; last refused: {last!r}")
            self.sock.settimeout(left)
            conn, _ = self.sock.accept()
            conn.settimeout(left)
            data = b""
            with conn:
                while chunk := conn.recv(1024):
                    data += chunk
            try:
                return self.decode(data)
            except (ValueError, KeyError, AssertionError) as e:   # binascii.Error is one
                last = (data[:40], e)

    def decode(self, data):
        payload = json.loads(base64.b64decode(data, validate=True))
        assert set(payload) == {"version", "key", "conn_info"}
        assert payload["version"] == 1
        aes_key = PKCS1_v1_5.new(self.private).decrypt(base64.b64decode(payload["key"]), None)
        assert aes_key is not None and len(aes_key) == 16, "the raw 16-byte AES key, wrapped"
        sealed = base64.b64decode(payload["conn_info"])
        return json.loads(unpad(AES.new(aes_key, AES.MODE_ECB).decrypt(sealed), 16))

    def close(self):
        self.sock.close()
