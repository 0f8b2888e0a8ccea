"""The cellvm channel (docs/channel.md): the one Python implementation of its framing in the tests.

Every Python end of a channel uses it: `kernel_driver` (drives cellvm-kernel over a socketpair),
`fake_kernel` (the kernel's end, on `--fd N`, run by the gateway) and `test_image` (QEMU's
virtio-serial unix sockets: the kernel port and init's control port).

- A frame is a 4-byte big-endian length L, then L bytes, 1 <= L <= max_frame.
- A message is one frame of UTF-8 JSON (an object: the envelope), then `buffers` raw frames
  (0..16).
- On a port device the kernel writes SYNC_MARKER (a zero length, then "CVM-SYNC") before every
  hello. A reader of a port skips it (allow_sync=True); anywhere else a zero length is an error.

Nothing read is trusted: a bad length raises ChannelError (the stream cannot be resynchronised),
EOF raises ChannelClosed. Encoding does not validate, so tests can send bad frames on purpose
(`length_prefix`, `Conn.send_bytes`).
"""
import codecs
import datetime
import json
import os
import socket
import struct
import threading
import time
import uuid

MAX_FRAME = 64 * 1024 * 1024
MAX_BUFFERS = 16
SYNC_TAG = b"CVM-SYNC"
SYNC_MARKER = b"\x00\x00\x00\x00" + SYNC_TAG
CHANNELS = ("shell", "control", "stdin", "iopub", "cellvm")
PROTOCOL_VERSION = "5.3"

_LEN = struct.Struct(">I")
_CHUNK = 1 << 20


class ChannelError(ValueError):
    """The peer broke the framing (bad length, bad sync marker, EOF inside a message)."""


class ChannelClosed(EOFError):
    """The peer closed the channel at a message boundary."""


# --------------------------------------------------------------------------
# Encoding

def length_prefix(n):
    """The 4 length bytes of a frame of n bytes (n is not checked: tests send bad lengths)."""
    return _LEN.pack(n)


def frame(payload):
    """One frame: the length, then the payload."""
    return _LEN.pack(len(payload)) + bytes(payload)


def utc_now():
    """A header date: UTC, ISO-8601 with microseconds and Z."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_header(msg_type, session, username="cellvm", msg_id=None):
    return {"msg_id": msg_id or str(uuid.uuid4()), "session": session, "username": username,
            "date": utc_now(), "msg_type": msg_type, "version": PROTOCOL_VERSION}


def envelope(channel, msg_type, content=None, parent=None, metadata=None, header=None,
             session="cellvm-tests", username="cellvm"):
    """A message: {"channel", "header", "parent_header", "metadata", "content", "buffers"}."""
    return {"channel": channel,
            "header": header if header is not None else make_header(msg_type, session, username),
            "parent_header": parent or {}, "metadata": metadata or {},
            "content": content if content is not None else {}, "buffers": 0}


def encode(msg, buffers=()):
    """The bytes of a message and its buffers (`buffers` in the envelope is set to match)."""
    msg = dict(msg)
    msg["buffers"] = len(buffers)
    out = frame(json.dumps(msg).encode("utf-8"))
    for b in buffers:
        out += frame(b)
    return out


# --------------------------------------------------------------------------
# Decoding

def decode(payload):
    """The envelope in a message frame: a JSON object in UTF-8, else ValueError."""
    msg = json.loads(bytes(payload).decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("not a JSON object")
    return msg


def _per_byte(err):
    return "\ufffd", err.start + 1


codecs.register_error("cellvm-per-byte", _per_byte)


def raw_stream(msg, buffers):
    """A raw stream text (docs/channel.md: iopub stream, content {"name"}, the text as its one
    buffer) made the content a client gets, as the gateway makes it: each invalid byte and NUL as
    U+FFFD. (msg, buffers), unchanged for any other message."""
    c = msg.get("content")
    h = msg.get("header")
    if (msg.get("channel") != "iopub" or not isinstance(h, dict) or h.get("msg_type") != "stream"
            or len(buffers) != 1 or not isinstance(c, dict) or set(c) != {"name"}):
        return msg, buffers
    text = buffers[0].decode("utf-8", "cellvm-per-byte").replace("\0", "\ufffd")
    msg = dict(msg, content={"name": c["name"], "text": text}, buffers=0)
    return msg, []


def buffer_count(msg):
    """The envelope's `buffers` (missing: 0); ValueError unless an int in 0..MAX_BUFFERS."""
    n = msg.get("buffers", 0)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_BUFFERS:
        raise ValueError(f"bad buffers field {n!r}")
    return n


class Conn:
    """One end of a channel: a stream socket or a file descriptor, used both ways.

    Writes are locked (any thread may send). Reads belong to one thread; they are buffered, and a
    socket timeout never loses a partly received message (nothing is consumed until the whole
    message is there)."""

    def __init__(self, sock=None, fd=None, max_frame=MAX_FRAME, allow_sync=False):
        if (sock is None) == (fd is None):
            raise TypeError("Conn needs exactly one of sock and fd")
        self.sock, self.fd = sock, (sock.fileno() if sock is not None else fd)
        self.max_frame = max_frame
        self.allow_sync = allow_sync
        self._buf = bytearray()
        self._wlock = threading.Lock()

    @classmethod
    def unix(cls, path, connect_timeout=10.0, **kw):
        """Connect to a unix stream socket, retrying until it exists (QEMU creates it)."""
        deadline = time.monotonic() + connect_timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                return cls(sock=sock, **kw)
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def settimeout(self, timeout):
        if self.sock is not None:
            self.sock.settimeout(timeout)

    # --- writing ----------------------------------------------------------
    def send_bytes(self, data):
        with self._wlock:
            if self.sock is not None:
                self.sock.sendall(data)
                return
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]

    def send_frame(self, payload):
        self.send_bytes(frame(payload))

    def send(self, msg, buffers=()):
        self.send_bytes(encode(msg, buffers))
        return msg

    # --- reading ----------------------------------------------------------
    def _fill(self, n):
        """At least n bytes buffered; False on EOF before that."""
        while len(self._buf) < n:
            if self.sock is not None:
                chunk = self.sock.recv(_CHUNK)
            else:
                chunk = os.read(self.fd, _CHUNK)
            if not chunk:
                return False
            self._buf += chunk
        return True

    def _frame_at(self, off, what):
        """(payload end, payload start) of the frame at offset off of the buffer."""
        if not self._fill(off + 4):
            if off == 0 and not self._buf:
                raise ChannelClosed("channel closed")
            raise ChannelError(f"EOF inside {what}")
        (n,) = _LEN.unpack_from(self._buf, off)
        if not 1 <= n <= self.max_frame:
            raise ChannelError(f"frame length {n} is out of range 1..{self.max_frame}")
        if not self._fill(off + 4 + n):
            raise ChannelError(f"EOF inside {what}")
        return off + 4 + n, off + 4

    def _skip_sync(self):
        """Drop sync markers at the head of the buffer (ports only)."""
        while self.allow_sync and self._fill(4) and self._buf[:4] == b"\x00\x00\x00\x00":
            if not self._fill(len(SYNC_MARKER)):
                raise ChannelError("EOF inside a sync marker")
            if bytes(self._buf[4:len(SYNC_MARKER)]) != SYNC_TAG:
                raise ChannelError(f"bad sync marker {bytes(self._buf[:len(SYNC_MARKER)])!r}")
            del self._buf[:len(SYNC_MARKER)]

    def read_frame(self):
        """The next frame's payload, or None on EOF at a frame boundary."""
        self._skip_sync()
        try:
            end, start = self._frame_at(0, "a frame")
        except ChannelClosed:
            return None
        payload = bytes(self._buf[start:end])
        del self._buf[:end]
        return payload

    def recv(self):
        """The next message: (envelope, [buffer bytes]). ChannelClosed on EOF, ChannelError on
        bad framing, ValueError (nothing consumed but that frame) on an undecodable envelope."""
        self._skip_sync()
        end, start = self._frame_at(0, "a message")
        try:
            msg = decode(self._buf[start:end])
            nbuf = buffer_count(msg)
        except ValueError:
            del self._buf[:end]
            raise
        spans, off = [], end
        for _ in range(nbuf):
            off, bstart = self._frame_at(off, "a message's buffers")
            spans.append((bstart, off))
        buffers = [bytes(self._buf[a:b]) for a, b in spans]
        del self._buf[:off]
        return raw_stream(msg, buffers)

    def close(self):
        if self.sock is not None:
            self.sock.close()
