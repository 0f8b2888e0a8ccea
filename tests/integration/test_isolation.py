"""The isolation proof (docs/security.md): ten probes, each run from a cell in a microVM session.
This module has the read-only probes of one session (1-4, 9); test_isolation_more.py has the
probes that need two sessions or break one (5-8, 10). What both use (the file-system search, booting
the sessions) is in isohelpers.py.

Every probe asserts the negative in the guest AND shows that the very same probe code finds what it
looks for when it is there (run with the host's /usr/bin/python3, or against a control planted in
the guest itself, e.g. PID 1 for privileges), so none of them can pass vacuously.

Sessions are started the way clients start them: jupyter_client's KernelManager from a kernelspec.
Two are shared by the module (booted at once, to keep the runtime down):

- `a`: kernelspec `cellvm`, used for the read-only probes (1-4, 9);
- `local` (kernelspec `cellvm-unsafe-local`, no isolation) runs the read-only probes' cells
  through the same gateway path and must find everything the VM sessions must not.

A canary secret is put in this process's environment before the gateways start (they inherit it),
and canary files are written on the host before the VMs boot. Everything started here is killed by
pid at the end, and the module checks that its gateways left no QEMU, run dir, socket or disk.
"""
import os
import pathlib
import secrets
import socket
import threading
import time

import psutil
import pytest

from isohelpers import P_FIND, P_HEAD, booted, call, rev_hex
from sessions import host_probe, kernel_spec

# One scenario in steps over one session per backend: all on one worker, in order.
pytestmark = pytest.mark.xdist_group("isolation")

CANARY_ENV = "CELLVM_ISOLATION_CANARY"


# --------------------------------------------------------------------------
# Probe code (P_HEAD, P_FIND and call: isohelpers.py). Each string defines one function and is
# run unchanged in the guest (as a cell) and on the host (python3 -c). The function prints
# PROBE_MARK + JSON.

P_ENV = P_HEAD + r'''
def probe_env(name_hex, value_hex):
    name = bytes.fromhex(name_hex)[::-1].decode()
    value = bytes.fromhex(value_hex)[::-1]
    res = {"in_environ": [k for k, v in os.environ.items() if k == name or value.decode() in v],
           "proc_hits": [], "proc_readable": [], "proc_unreadable": 0, "other_hits": []}
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                data = f.read()
        except OSError:
            res["proc_unreadable"] += 1
            continue
        res["proc_readable"].append(int(pid))
        if value in data or name.encode() in data:
            res["proc_hits"].append(int(pid))
    for path in ("/proc/cmdline", "/proc/self/cmdline", "/proc/1/cmdline"):
        try:
            with open(path, "rb") as f:
                if value in f.read():
                    res["other_hits"].append(path)
        except OSError:
            pass
    print(MARK + json.dumps(res))
'''

P_NET = P_HEAD + r'''
def probe_net():
    res = {"sys_class_net": sorted(os.listdir("/sys/class/net")),
           "if_nameindex": sorted(n for _, n in socket.if_nameindex())}
    with open("/proc/net/dev") as f:
        res["proc_net_dev"] = sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
    with open("/proc/net/route") as f:
        res["routes"] = [l.split()[:3] for l in f.readlines()[1:]]
    print(MARK + json.dumps(res))
'''

P_CONNECT = P_HEAD + r"""
def probe_connect(targets, send_ports, udp_targets, timeout=3.0):
    out = []
    for host, port in targets:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        t = time.monotonic()
        try:
            s.connect((host, port))
            res = "connected"
            if port in send_ports:          # only our own listeners get bytes
                s.sendall(b"cellvm-isolation-probe\n")
        except socket.timeout:
            res = "timeout"
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e))
        finally:
            s.close()
        out.append([host, port, res, round(time.monotonic() - t, 3)])
    udp = []
    for host, port in udp_targets:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"cellvm-isolation-probe", (host, port))
            udp.append([host, port, "sent"])
        except OSError as e:
            udp.append([host, port, errno.errorcode.get(e.errno, str(e))])
        u.close()
    try:
        v = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        v.settimeout(timeout)
        v.connect((2, 1024))            # CID 2 = the host
        vsock = "connected"
    except OSError as e:
        vsock = errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__
    except AttributeError:
        vsock = "no AF_VSOCK"
    print(MARK + json.dumps({"tcp": out, "udp": udp, "vsock_host": vsock}))
"""

P_PRIV = P_HEAD + r'''
def probe_priv():
    def status(pid):
        out = {}
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd",
                             "CapAmb", "NoNewPrivs", "Seccomp"):
                        out[k] = v.split()
        except OSError as e:
            out["error"] = str(e)
        return out
    res = {"self": status("self"), "pid1": status(1), "getuid": os.getuid(),
           "geteuid": os.geteuid(), "groups": os.getgroups()}
    try:
        os.setuid(0)
        res["setuid0"] = "ok"
    except OSError as e:
        res["setuid0"] = errno.errorcode.get(e.errno, str(e))
    port = "/dev/virtio-ports/cellvm.init"
    res["init_port_exists"] = os.path.exists(port)
    try:
        os.close(os.open(port, os.O_RDWR | os.O_NONBLOCK))
        res["init_port_open"] = "ok"
    except OSError as e:
        res["init_port_open"] = errno.errorcode.get(e.errno, str(e))
    print(MARK + json.dumps(res))
'''


# --------------------------------------------------------------------------
# Fixtures

class Listener:
    """A TCP listener on the host that counts connections and what they sent."""

    def __init__(self, host):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted, self.received = [], b""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                c, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted.append(addr)
            c.settimeout(0.5)
            try:
                self.received += c.recv(4096)
            except OSError:
                pass
            c.close()

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def canary():
    """A secret in the environment the gateways inherit, and files on the host."""
    kernel_spec("cellvm")                       # fails (never skips) without build or image
    value = "cvm-secret-" + secrets.token_hex(16)
    old = os.environ.get(CANARY_ENV)
    os.environ[CANARY_ENV] = value
    tag = secrets.token_hex(8)
    files = {}
    for where in {pathlib.Path("/tmp"), pathlib.Path.cwd()}:
        p = where / f"cellvm-canary-{tag}-{secrets.token_hex(4)}.txt"
        p.write_text("cvm-canary-content-" + secrets.token_hex(16) + "\n")
        files[p] = p.read_text().strip()
    try:
        yield {"env_name": CANARY_ENV, "env_value": value, "files": files}
    finally:
        if old is None:
            os.environ.pop(CANARY_ENV, None)
        else:
            os.environ[CANARY_ENV] = old
        for p in files:
            p.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def vms(canary, tmp_path_factory):
    """Sessions a and local, booted at once; closed (by pid) and checked for leftovers at the
    end."""
    yield from booted(tmp_path_factory, {
        "a": ("cellvm", ()),
        # No isolation: the same cells through the same gateway find what they look for.
        "local": ("cellvm-unsafe-local", ())})


# --------------------------------------------------------------------------
# 1. Environment

def test_01_gateway_env_canary_absent_from_guest(vms, canary):
    a = vms["a"]
    value, name = canary["env_value"], canary["env_name"]
    # The gateway really holds the secret in its environment.
    with open(f"/proc/{a.gateway_pid}/environ", "rb") as f:
        assert f"{name}={value}".encode() in f.read().split(b"\0")

    code = call(P_ENV, "probe_env", rev_hex(name), rev_hex(value))
    guest = a.probe(code)
    assert guest["in_environ"] == [], guest
    assert guest["proc_hits"] == [], guest
    assert guest["other_hits"] == [], guest
    # The scan did read environments in the guest (at least the kernel's own).
    assert guest["proc_readable"], guest

    host = host_probe(code, env=dict(os.environ))
    assert name in host["in_environ"], host
    assert a.gateway_pid in host["proc_hits"], host
    assert len(host["proc_hits"]) >= 2, host                 # itself and the gateway
    local = vms["local"].probe(code)
    assert name in local["in_environ"], local
    assert vms["local"].gateway_pid in local["proc_hits"], local


# --------------------------------------------------------------------------
# 2. Host files

def test_02_host_canary_files_invisible_in_guest(vms, canary):
    a = vms["a"]
    # One canary sits in the gateway's own working directory.
    assert psutil.Process(a.gateway_pid).cwd() in {str(p.parent) for p in canary["files"]}
    names = [rev_hex(p.name) for p in canary["files"]]
    contents = [rev_hex(c) for c in canary["files"].values()]
    key = a.connection_info["key"]
    key = key.decode() if isinstance(key, bytes) else key
    contents.append(rev_hex(key))                            # the client's HMAC key, too
    conn_file = pathlib.Path(a.km.connection_file)
    names.append(rev_hex(conn_file.name))

    likely = ["/tmp", "/workspace", "/home", "/root", "/etc", "/var", "/run", "/mnt", "/media",
              "/srv", "/opt", "/dev/shm", "/usr/local"]
    plant = ["/tmp", rev_hex("guest-control-" + secrets.token_hex(6)),
             rev_hex("guest-control-content-" + secrets.token_hex(12))]
    t0 = time.monotonic()
    guest = a.probe(call(P_FIND, "probe_find", names, contents, ["/"], likely, None, plant),
                    timeout=300)
    print(f"guest walk: {guest['entries']} entries, {guest['grepped']} files grepped, "
          f"{time.monotonic() - t0:.1f} s")
    # The in-guest control was found by both halves, and nothing else was.
    assert guest["name_hits"] == [guest["planted"]], guest["name_hits"]
    assert [h for h in guest["content_hits"] if h[1] != len(contents)] == [], guest["content_hits"]
    assert [guest["planted"], len(contents)] in guest["content_hits"], guest["content_hits"]
    assert guest["entries"] > 10000, "the walk did not cover the guest's file system"
    assert guest["grepped"] > 100, guest["grepped"]
    # No host file system is shared into the guest at all.
    shared = [m for m in guest["mounts"] if m[2] in ("9p", "virtiofs", "nfs", "nfs4", "cifs",
                                                     "smb3", "fuse", "sshfs")]
    assert shared == [], shared

    # The same probe on the host finds every canary, the connection file and the key.
    roots = sorted({str(p.parent) for p in canary["files"]} | {str(conn_file.parent)})
    host = host_probe(call(P_FIND, "probe_find", names, contents, roots, roots, 0))
    found = {os.path.basename(h) for h in host["name_hits"]}
    assert {p.name for p in canary["files"]} | {conn_file.name} <= found, host["name_hits"]
    hit_idx = {i for _, i in host["content_hits"]}
    assert set(range(len(contents))) <= hit_idx, host["content_hits"]
    canary_roots = sorted({str(p.parent) for p in canary["files"]})
    local = vms["local"].probe(call(P_FIND, "probe_find", names[:-1], contents[:-1], canary_roots,
                                    canary_roots, 0))
    assert {p.name for p in canary["files"]} <= {os.path.basename(h)
                                                 for h in local["name_hits"]}, local
    assert set(range(len(contents) - 1)) <= {i for _, i in local["content_hits"]}, local


# --------------------------------------------------------------------------
# 3. Network interfaces

def test_03_only_loopback_interface(vms):
    guest = vms["a"].probe(call(P_NET, "probe_net"))
    assert guest["sys_class_net"] == ["lo"], guest
    assert guest["if_nameindex"] == ["lo"], guest
    assert guest["proc_net_dev"] == ["lo"], guest
    assert guest["routes"] == [], guest                      # no IPv4 route at all
    host = host_probe(call(P_NET, "probe_net"))
    assert set(host["if_nameindex"]) - {"lo"}, f"the host probe sees no other interface: {host}"
    assert set(host["sys_class_net"]) == set(host["if_nameindex"]), host
    local = vms["local"].probe(call(P_NET, "probe_net"))
    assert local["if_nameindex"] == host["if_nameindex"], local


# --------------------------------------------------------------------------
# 4. Connections out

def test_04_metadata_and_host_ports_unreachable(vms):
    a = vms["a"]
    lo, anyaddr = Listener("127.0.0.1"), Listener("0.0.0.0")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    udp.settimeout(0.2)
    udp_port = udp.getsockname()[1]
    try:
        ci = a.connection_info
        zmq_ports = [ci[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port",
                                     "hb_port")]
        host_ips = sorted({a_.address for addrs in psutil.net_if_addrs().values() for a_ in addrs
                           if a_.family == socket.AF_INET and not a_.address.startswith("127.")})
        assert host_ips, "the host has no non-loopback IPv4 address to probe"
        targets = ([["169.254.169.254", 80], ["127.0.0.1", lo.port]]
                   + [["127.0.0.1", p] for p in zmq_ports]
                   + [[ip, anyaddr.port] for ip in host_ips])
        udp_targets = [[ip, udp_port] for ip in host_ips]
        send = [lo.port, anyaddr.port]
        # Guest only: QEMU's user-mode-network host alias, had a NIC slipped in.
        extra = [["10.0.2.2", anyaddr.port], ["10.0.2.2", lo.port]]
        guest = a.probe(call(P_CONNECT, "probe_connect", targets + extra, send,
                             udp_targets + [["169.254.169.254", 53]]), timeout=120)
        results = {(h, p): r for h, p, r, _ in guest["tcp"]}
        assert all(r != "connected" for r in results.values()), guest
        for (h, p), r in results.items():
            expect = "ECONNREFUSED" if h.startswith("127.") else "ENETUNREACH"
            assert r == expect, f"{h}:{p} from the guest: {r}, expected {expect}"
        assert all(r == "ENETUNREACH" for _, _, r in guest["udp"]), guest["udp"]
        assert guest["vsock_host"] != "connected", guest
        assert lo.accepted == [] and anyaddr.accepted == [], (lo.accepted, anyaddr.accepted)

        code = call(P_CONNECT, "probe_connect", targets, send, udp_targets)
        for host in (host_probe(code), vms["local"].probe(code)):
            hres = {(h, p): r for h, p, r, _ in host["tcp"]}
            for h, p in map(tuple, targets):
                if h == "169.254.169.254":
                    # No metadata service needs to exist here; the host must have a route.
                    assert hres[(h, p)] != "ENETUNREACH", host
                else:
                    assert hres[(h, p)] == "connected", f"host could not reach {h}:{p}: {host}"
            assert all(r == "sent" for _, _, r in host["udp"]), host["udp"]
        got = 0
        try:
            while got < 2 * len(host_ips):
                udp.recvfrom(100)
                got += 1
        except socket.timeout:
            pass
        assert got == 2 * len(host_ips), f"{got} datagrams of {2 * len(host_ips)} arrived"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (len(lo.accepted) < 2
                                               or len(anyaddr.accepted) < 2 * len(host_ips)):
            time.sleep(0.05)
        assert len(lo.accepted) == 2, lo.accepted
        assert len(anyaddr.accepted) == 2 * len(host_ips), anyaddr.accepted
        assert b"cellvm-isolation-probe" in lo.received
    finally:
        lo.close()
        anyaddr.close()
        udp.close()


# --------------------------------------------------------------------------
# 9. Privileges

def test_09_kernel_runs_unprivileged(vms):
    guest = vms["a"].probe(call(P_PRIV, "probe_priv"))
    me = guest["self"]
    assert guest["getuid"] != 0 and guest["geteuid"] != 0, guest
    assert all(int(x) != 0 for x in me["Uid"] + me["Gid"]), me
    assert "Groups" not in me or all(int(g) != 0 for g in me["Groups"]), me
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(me[cap][0], 16) == 0, f"{cap} = {me[cap][0]}"
    assert me["NoNewPrivs"] == ["1"], me
    assert guest["setuid0"] == "EPERM", guest
    assert guest["init_port_exists"] and guest["init_port_open"] == "EACCES", guest
    # Control in the same guest: the probe does see root and capabilities where they are.
    pid1 = guest["pid1"]
    assert pid1["Uid"][0] == "0" and int(pid1["CapEff"][0], 16) != 0, pid1

    for host in (host_probe(call(P_PRIV, "probe_priv")),
                 vms["local"].probe(call(P_PRIV, "probe_priv"))):
        assert int(host["self"]["Uid"][0]) == os.getuid() == host["getuid"], host
        if os.getuid() == 0:
            assert int(host["self"]["CapEff"][0], 16) != 0 and host["setuid0"] == "ok", host
