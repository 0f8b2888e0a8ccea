"""What the egress tests and the egress bench serve on this host's loopback: an HTTPS server
whose certificate a test CA signed, and a package index of one wheel built here."""
import base64
import hashlib
import http.server
import io
import ssl
import subprocess
import threading
import zipfile

BIG = 1 << 20
PKG, VERSION = "cellvm-eg-probe", "1.0"


def tls_files(d):
    """A CA, and a certificate for 127.0.0.1 and localhost that it signed."""
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        "/CN=cellvm egress test CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", f"{d}/srv.key", "-out", f"{d}/srv.csr")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{d}/ext", "-out", f"{d}/srv.pem")
    return d / "ca.pem", d / "srv.pem", d / "srv.key"


def wheel(d):
    """A pure wheel of one module (VALUE = 42), its RECORD hashed as pip checks it, under
    d/simple/ as a PEP 503 index serves it."""
    name = PKG.replace("-", "_")
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-{VERSION}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {VERSION}\n".encode(),
             f"{name}-{VERSION}.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: cellvm-test\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    b64 = lambda b: base64.urlsafe_b64encode(hashlib.sha256(b).digest()).decode().rstrip("=")
    record = "".join(f"{p},sha256={b64(b)},{len(b)}\n" for p, b in files.items())
    record += f"{name}-{VERSION}.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p, b in files.items():
            z.writestr(p, b)
        z.writestr(f"{name}-{VERSION}.dist-info/RECORD", record)
    whl = f"{name}-{VERSION}-py3-none-any.whl"
    (d / "simple" / PKG).mkdir(parents=True)
    (d / "simple" / PKG / whl).write_bytes(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    (d / "simple" / PKG / "index.html").write_text(
        f'<html><body><a href="{whl}#sha256={digest}">{whl}</a></body></html>\n')
    (d / "simple" / "index.html").write_text(f'<a href="{PKG}/">{PKG}</a>\n')


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def tls_handler(size=BIG):
    """GET /big: size bytes of x; anything else: a short line."""
    class Tls(_Quiet):
        def do_GET(self):
            body = b"x" * size if self.path == "/big" else b"hello over tls\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    return Tls


def serve(handler, cert=None, key=None, directory=None):
    """A threading server on 127.0.0.1 (a free port); TLS when cert is given; the files
    of directory when handler is None."""
    if handler is None:
        handler = lambda *a, **k: _Quiet(*a, directory=str(directory), **k)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        #  The handshake in each handler's thread: a tunnel that sends no hello must not
        #  hold up the accepts of the others.
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
