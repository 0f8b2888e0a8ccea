"""Egress (docs/network.md): a session's cells reach what the operator allows through the
guest's proxy, and nothing else, with the gateway's words in the cell and in the log.

On this machine only: an HTTPS server on the host's loopback with a test CA (allowed by its
exact address), a package index of one wheel built here (served over HTTP on loopback), and
destinations that must be refused. The session passes an empty NO_PROXY (CELLVM_ENV_), so
that 127.0.0.1 in a cell means the host's loopback through the proxy, as an internal API's
address would; a default session keeps the guest's own loopback local, which one test checks.
Each refusal is checked in the cell's words and the log's. A session without --egress-allow
has no proxy, no port reader and no proxy variables. unsafe-local ignores the options, and
says so.
"""
import hashlib
import json
import os
import re
import subprocess
import time

import pytest

from egresshelpers import BIG, PKG, VERSION, serve, tls_files, tls_handler, wheel
from sessions import IMAGE, Session, require_image


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    require_image(IMAGE)
    d = tmp_path_factory.mktemp("egress")
    ca, cert, key = tls_files(d)
    wheel(d)
    tls = serve(tls_handler(), cert, key)
    index = serve(None, directory=d)
    info = {"ca": ca.read_text(), "tls": tls.server_address[1],
            "index": index.server_address[1]}
    yield info
    tls.shutdown()
    index.shutdown()


def _egress_args(net, streams=16):
    return ["--egress-allow", f"127.0.0.1:{net['tls']},127.0.0.1:{net['index']},"
                              f"localhost:{net['tls'] + 1},*.example",
            "--egress-deny", "denied.example", "--egress-streams", str(streams)]


@pytest.fixture(scope="module")
def sess(net):
    s = Session("cellvm", extra_args=_egress_args(net), name="egress",
                env={"CELLVM_ENV_NO_PROXY": "", "CELLVM_ENV_no_proxy": ""})
    try:
        s.start(timeout=600)
        s.output(f"open('/workspace/ca.pem', 'w').write({net['ca']!r})")
        yield s
    finally:
        s.close()


def _get(url, ca=True, timeout=60):
    """A cell that GETs url through the environment's proxy and prints what happened."""
    ctx = "ssl.create_default_context(cafile='/workspace/ca.pem')" if ca else "None"
    return (f"import ssl, urllib.request, urllib.error, hashlib\n"
            f"try:\n"
            f"    b = urllib.request.urlopen({url!r}, context={ctx}, timeout={timeout}).read()\n"
            f"    print('GOT', len(b), hashlib.sha256(b).hexdigest())\n"
            f"except Exception as e:\n"
            f"    print('FAILED', type(e).__name__, e)\n")


def _log_after(s, mark, pattern, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tail = s.log_text()[mark:]
        if re.search(pattern, tail):
            return tail
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in the log: {s.log_text()[mark:][-3000:]}")


def test_the_kernel_is_pointed_at_its_proxy(sess, net):
    out = sess.output("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
                      "('HTTPS_PROXY', 'http_proxy', 'NO_PROXY', 'PYTHONUSERBASE', "
                      "'PIP_USER', 'SSL_CERT_FILE')}))")
    env = json.loads(out.strip().splitlines()[-1])
    assert env == {"HTTPS_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
                   "NO_PROXY": "", "PYTHONUSERBASE": "/workspace/.local", "PIP_USER": "1",
                   "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}, env
    log = sess.log_text()
    assert "event=egress.started" in log and "event=egress.proxy_ready" in log, log[-3000:]


def test_an_allowed_https_get_of_1_mib_arrives_whole(sess, net):
    mark = len(sess.log_text())
    out = sess.output(_get(f"https://127.0.0.1:{net['tls']}/big"))
    assert out.strip() == f"GOT {BIG} {hashlib.sha256(b'x' * BIG).hexdigest()}", out
    tail = _log_after(sess, mark, r"event=egress.closed .*bytes_in=\d{7}")
    assert f"event=egress.allowed stream=" in tail and f"dest=127.0.0.1:{net['tls']}" in tail


@pytest.mark.parametrize("how", ["%pip", "!pip"])
def test_pip_installs_from_the_index_into_the_workspace(sess, net, how):
    """%pip runs in a fork of the kernel (pip imported by the template), !pip in a shell;
    both install into /workspace/.local, importable at once."""
    out = sess.output(f"{how} install --force-reinstall --no-cache-dir --index-url "
                      f"http://127.0.0.1:{net['index']}/simple/ {PKG}", timeout=300)
    assert f"Successfully installed {PKG}-{VERSION}" in out, out
    out = sess.output("import importlib, cellvm_eg_probe; importlib.reload(cellvm_eg_probe); "
                      "print(cellvm_eg_probe.VALUE, cellvm_eg_probe.__file__)")
    assert out.split()[0] == "42" and out.split()[1].startswith("/workspace/.local/"), out
    out = sess.output("import os; print(sorted(os.listdir('/tmp/home/.local/lib/python3.11/"
                      "site-packages')) if os.path.isdir('/tmp/home/.local/lib/python3.11/"
                      "site-packages') else [])")
    assert "cellvm_eg_probe" not in out, out        # not in the throwaway home


#  No name here is looked up in the DNS (the test sends nothing off this host): a refusal
#  by name comes before any lookup, and localhost is in /etc/hosts.
@pytest.mark.parametrize("url, words", [
    ("https://denied.example/", ["denied.example:443 matches the deny rule denied.example"]),
    ("https://other.test/", ["other.test:443 matches no rule of --egress-allow"]),
    ("https://127.0.0.1:{port_other}/", ["127.0.0.1:{port_other}: port {port_other} is not "
                                         "allowed (the rule 127.0.0.1:"]),
    ("https://127.0.0.2:{port_other}/", ["127.0.0.2:{port_other} is a loopback, private, "
                                         "link-local or reserved address"]),
    ("https://localhost:{port_name}/", ["egress refused: localhost (", "):{port_name} is a "
                                        "loopback, private, link-local or reserved address"]),
])
def test_refusals_reach_the_cell_in_words(sess, net, url, words):
    fill = {"port_other": net["index"] + 2, "port_name": net["tls"] + 1}
    url, words = url.format(**fill), [w.format(**fill) for w in words]
    mark = len(sess.log_text())
    out = sess.output(_get(url))
    assert out.startswith("FAILED") and "403 Forbidden" in out, out
    assert all(w in out for w in words), out
    tail = _log_after(sess, mark, r"event=egress.refused")
    assert all(w in tail for w in words), tail


RAW_TUNNEL = """
import socket, ssl
s = socket.create_connection(('127.0.0.1', 3128), timeout=30)
s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n')
print(s.recv(200).split(b'\\r\\n')[0].decode())
ctx = ssl.create_default_context(cafile='/workspace/ca.pem')
ctx.check_hostname = False
try:
    t = ctx.wrap_socket(s, server_hostname='{sni}')
    print('TLS OK', t.version())
except Exception as e:
    print('TLS FAILED', e)
"""


def test_a_tls_server_name_other_than_the_tunnels_host_is_refused(sess, net):
    mark = len(sess.log_text())
    out = sess.output(RAW_TUNNEL.format(port=net["tls"], sni="pypi.org"))
    lines = out.strip().splitlines()
    assert lines[0] == "HTTP/1.1 200 Connection established", out
    assert lines[1].startswith("TLS FAILED") and "ACCESS_DENIED" in lines[1].upper(), out
    tail = _log_after(sess, mark, r"event=egress.refused")
    assert f"the TLS server name pypi.org differs from the tunnel's host 127.0.0.1" in tail


def test_no_dns_and_no_raw_network_in_the_guest(sess):
    out = sess.output(
        "import socket\n"
        "try:\n    socket.getaddrinfo('pypi.org', 443); print('DNS ANSWERED')\n"
        "except OSError as e:\n    print('DNS', type(e).__name__)\n"
        "for addr in [('1.1.1.1', 80), ('10.0.2.2', 80), ('169.254.169.254', 80)]:\n"
        "    try:\n        socket.create_connection(addr, timeout=5); print('CONNECTED', addr)\n"
        "    except OSError as e:\n        print('RAW', addr[0], e.errno)\n"
        "import os; print(sorted(os.listdir('/sys/class/net')))\n")
    lines = out.strip().splitlines()
    assert lines[0] == "DNS gaierror", out
    assert all(l.startswith("RAW ") and l.endswith(" 101") for l in lines[1:4]), out
    assert lines[4] == "['lo']", out                 # still no network device


FLOOD = """
import socket, time
held, words = [], []
for i in range(60):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=30)
    s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')
    held.append(s)
for s in held:
    line = s.recv(300).split(b'\\r\\n')[0].decode()
    words.append(line)
ok = sum(w.startswith('HTTP/1.1 200') for w in words)
busy = [w for w in words if w.startswith('HTTP/1.1 503')]
print(ok, len(busy), busy[0] if busy else '')
for s in held:
    s.close()
"""


def test_a_flood_of_connections_is_capped_and_the_session_goes_on(sess, net):
    out = sess.output(FLOOD.format(port=net["tls"]), timeout=300)
    ok, busy, first = out.strip().split(" ", 2)
    assert int(ok) == 16 and int(busy) == 44, out
    assert "16 connections are open, the most this session may have at once" in first, out
    time.sleep(1)                                    # the closes reach the host
    out = sess.output(_get(f"https://127.0.0.1:{net['tls']}/hello"))
    assert out.startswith("GOT 15 "), out


def test_a_live_change_narrows_and_answers_with_the_policy(sess, net):
    rep = sess.control("cellvm_egress_request", {"allow": f"127.0.0.1:{net['index']}"})
    c = rep["content"]
    assert c["status"] == "ok" and c["policy"]["client_allow"] == f"127.0.0.1:{net['index']}", c
    assert "denied.example" in c["policy"]["deny"], c
    out = sess.output(_get(f"https://127.0.0.1:{net['tls']}/hello"))
    assert "FAILED" in out and "is not in this session's CELLVM_EGRESS_ALLOW" in out, out
    rep = sess.control("cellvm_egress_request", {"allow": "*"})    # * is public addresses only
    out = sess.output(_get(f"https://127.0.0.1:{net['tls']}/hello"))
    assert "FAILED" in out and "needs an address rule there too" in out, out
    bad = sess.control("cellvm_egress_request", {"allow": "10.0.0.0/33"})["content"]
    assert bad["status"] == "error" and bad["ename"] == "BadEgressList", bad
    rep = sess.control("cellvm_egress_request", {"allow": ""})     # back to the operator's
    assert "client_allow" not in rep["content"]["policy"], rep["content"]
    out = sess.output(_get(f"https://127.0.0.1:{net['tls']}/hello"))
    assert out.startswith("GOT 15 "), out
    asked = sess.control("cellvm_egress_request", {})["content"]
    assert asked["status"] == "ok" and "allow" in asked["policy"], asked


def test_a_client_list_from_the_environment_only_narrows(net):
    s = Session("cellvm", extra_args=_egress_args(net), name="egress-narrow",
                env={"CELLVM_EGRESS_ALLOW": f"127.0.0.1:{net['tls']},10.9.9.9",
                     "CELLVM_ENV_NO_PROXY": "", "CELLVM_ENV_no_proxy": ""})
    try:
        s.start(timeout=600)
        s.output(f"open('/workspace/ca.pem', 'w').write({net['ca']!r})")
        assert s.output(_get(f"https://127.0.0.1:{net['tls']}/hello")).startswith("GOT 15 ")
        out = s.output(_get(f"http://127.0.0.1:{net['index']}/simple/"))
        assert "is not in this session's CELLVM_EGRESS_ALLOW" in out, out
        assert "event=egress.policy" in s.log_text()
    finally:
        s.close()


def test_a_default_session_keeps_its_own_loopback_local(net):
    s = Session("cellvm", extra_args=_egress_args(net), name="egress-default")
    try:
        s.start(timeout=600)
        out = s.output(
            "import socket, threading, urllib.request, os\n"
            "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n"
            "port = srv.getsockname()[1]\n"
            "def serve():\n"
            "    c, _ = srv.accept(); c.recv(1000)\n"
            "    c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 5\\r\\n\\r\\nlocal'); c.close()\n"
            "threading.Thread(target=serve).start()\n"
            "print(os.environ['NO_PROXY'], urllib.request.urlopen(f'http://127.0.0.1:{port}/',"
            " timeout=30).read().decode())\n")
        assert out.strip() == "localhost,127.0.0.1,::1 local", out
    finally:
        s.close()


def test_without_egress_there_is_no_proxy_and_no_variable():
    s = Session("cellvm", name="egress-off")
    try:
        s.start(timeout=600)
        out = s.output(
            "import os, socket\n"
            "print(os.environ.get('HTTPS_PROXY'), os.environ.get('PYTHONUSERBASE'))\n"
            "try:\n    socket.create_connection(('127.0.0.1', 3128), timeout=5); print('OPEN')\n"
            "except OSError as e:\n    print('REFUSED', e.errno)\n"
            "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and "
            "open(f'/proc/{p}/status').read().count('Uid:\\t65534')))\n")
        assert out.strip().splitlines() == ["None None", "REFUSED 111", "0"], out
        assert "event=egress." not in s.log_text(), s.log_text()[-3000:]
    finally:
        s.close()


def test_unsafe_local_ignores_egress_options_and_says_so(net):
    s = Session("cellvm-unsafe-local", extra_args=_egress_args(net), name="egress-local")
    try:
        s.start(timeout=120)
        assert s.output("print(1)").strip() == "1"
        log = s.log_text()
        assert "event=egress.ignored backend=unsafe-local" in log, log[-3000:]
    finally:
        s.close()


NOPROXY = {"CELLVM_ENV_NO_PROXY": "", "CELLVM_ENV_no_proxy": ""}


def _wait_log(s, pattern, count, timeout=120):
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, s.log_text())) < count:
        assert time.monotonic() < deadline, s.log_text()[-3000:]
        time.sleep(0.3)


def test_an_idle_pause_resumes_with_a_new_proxy_and_the_same_policy(net, tmp_path):
    """The resumed VM's proxy (the paused one's, with an old nonce and maybe half a frame
    in flight) is replaced by a new one; the live change made before the pause holds."""
    s = Session("cellvm", name="egress-pause", env=NOPROXY,
                extra_args=_egress_args(net) + ["--snapshot-dir", str(tmp_path / "store"),
                                                "--idle-pause", "3"])
    try:
        s.start(timeout=600)
        s.output(f"open('/workspace/ca.pem', 'w').write({net['ca']!r})")
        assert s.output(_get(f"https://127.0.0.1:{net['tls']}/hello")).startswith("GOT 15 ")
        c = s.control("cellvm_egress_request", {"allow": f"127.0.0.1:{net['tls']}"})["content"]
        assert c["status"] == "ok", c
        _wait_log(s, r"event=session\.paused", 1)
        assert s.output(_get(f"https://127.0.0.1:{net['tls']}/big")).startswith(f"GOT {BIG} ")
        out = s.output(_get(f"http://127.0.0.1:{net['index']}/simple/"))
        assert "is not in this session's CELLVM_EGRESS_ALLOW" in out, out
        log = s.log_text()
        assert log.count("event=egress.started") == 2, log[-4000:]
        assert "event=vm.stopped" not in log, log[-4000:]     # no stream violation
    finally:
        s.close()


def test_a_snapshot_keeps_its_client_list_unless_the_start_names_another(net, tmp_path):
    store = str(tmp_path / "store")
    a = Session("cellvm", name="egress-snap", env=NOPROXY,
                extra_args=_egress_args(net) + ["--snapshot-dir", store])
    try:
        a.start(timeout=600)
        a.output(f"open('/workspace/ca.pem', 'w').write({net['ca']!r})")
        a.control("cellvm_egress_request", {"allow": f"127.0.0.1:{net['tls']}"})
        rep = a.control("cellvm_snapshot_request", {"name": "egress-snap"}, timeout=300)
        assert rep["content"]["status"] == "ok", rep["content"]
    finally:
        a.close()
    meta = json.loads((tmp_path / "store" / "egress-snap" / "meta.json").read_text())
    assert meta["egress"]["client_allow"] == f"127.0.0.1:{net['tls']}", meta
    for name, env, tls_ok in (("egress-fork", {}, True),
                              ("egress-fork-named", {"CELLVM_EGRESS_ALLOW":
                                                     f"127.0.0.1:{net['index']}"}, False)):
        b = Session("cellvm", name=name, env=dict(NOPROXY, **env),
                    extra_args=_egress_args(net) + ["--snapshot-dir", store,
                                                    "--from-snapshot", "egress-snap"])
        try:
            b.start(timeout=600)
            tls = b.output(_get(f"https://127.0.0.1:{net['tls']}/hello"))
            index = b.output(_get(f"http://127.0.0.1:{net['index']}/simple/"))
            assert tls.startswith("GOT 15 ") == tls_ok, (name, tls)
            assert index.startswith("GOT ") != tls_ok, (name, index)
            assert "CELLVM_EGRESS_ALLOW" in (index if tls_ok else tls), (name, tls, index)
        finally:
            b.close()


@pytest.mark.parametrize("args, env, words", [
    (["--egress-allow", "10.1.2.3/24"], {}, "host bits"),
    (["--egress-allow", "pypi.org:0"], {}, "pypi.org:0"),
    (["--egress-allow", "pypi.org", "--egress-deny", "a..b"], {}, "--egress-deny"),
    (["--egress-allow", "pypi.org"], {"CELLVM_EGRESS_ALLOW": "bad name!"},
     "CELLVM_EGRESS_ALLOW"),
    (["--egress-port", "80"], {}, "egress-port"),
])
def test_a_list_the_gateway_cannot_read_refuses_the_launch(tmp_path, args, env, words):
    from sessions import GATEWAY
    conn = tmp_path / "conn.json"
    ports = {f"{c}_port": 42000 + i for i, c in enumerate(("shell", "iopub", "stdin", "control",
                                                             "hb"))}
    conn.write_text(json.dumps(dict(ports, transport="tcp", ip="127.0.0.1", key="k",
                                    signature_scheme="hmac-sha256")))
    p = subprocess.run([str(GATEWAY), "--connection-file", str(conn), "--backend", "microvm"]
                       + args, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **env))
    assert p.returncode != 0, p.stderr
    assert words in p.stderr, p.stderr


MCP_TUNNEL = """
import socket
s = socket.create_connection(('127.0.0.1', 3128), timeout=30)
s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')
print(s.recv(300).split(b'\\r\\n')[0].decode())
"""


def test_cellvm_mcp_passes_its_egress_options_to_each_gateway(net):
    """cellvm-mcp --egress-allow: its sessions' cells reach that, and the rest is refused."""
    from test_mcp import Raw, _call, _text
    s = Raw("--egress-allow", f"127.0.0.1:{net['tls']}")
    try:
        s.initialize()
        ok = _call(s, 1, "run_python", {"code": MCP_TUNNEL.format(port=net["tls"])})
        assert ok["structuredContent"]["stdout"] == "HTTP/1.1 200 Connection established\n", ok
        no = _call(s, 2, "run_python", {"code": MCP_TUNNEL.format(port=net["index"])})
        assert "403 Forbidden - egress refused" in _text(no), no
    finally:
        s.close()
