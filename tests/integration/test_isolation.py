"""The isolation proof (issue 4): ten probes, each run from a cell in a microVM session.

Every probe asserts the negative in the guest AND shows that the very same probe code finds what it
looks for when it is there (run with the host's /usr/bin/python3, or against a control planted in
the guest itself, e.g. PID 1 for privileges), so none of them can pass vacuously.

Sessions are started the way clients start them: jupyter_client's KernelManager from a kernelspec.
Three are shared by the module (booted at once, to keep the runtime down):

- `a`: kernelspec `cellvm`, used for the read-only probes (1-4, 9) and as session A in 8;
- `b`: kernelspec `cellvm`, session B in 8 and the bystander in 5 and 10;
- `t` ("torture"): a copy of `cellvm` with `--disk-size 256M --memory 384 --cell-timeout 30`,
  for the destructive probes. They run in file order 5, 6, 7, 10 and each leaves a working
  kernel, except 10, which kills the VM and therefore comes last.

A fourth, `local` (kernelspec `cellvm-unsafe-local`, no isolation), runs the read-only probes'
cells through the same gateway path and must find everything the VM sessions must not.

A canary secret is put in this process's environment before the gateways start (they inherit it),
and canary files are written on the host before the VMs boot. Everything started here is killed by
pid at the end, and the module checks that its gateways left no QEMU, run dir, socket or disk.
"""
import json
import os
import pathlib
import re
import secrets
import signal
import socket
import subprocess
import threading
import time

import psutil
import pytest
import zmq

from sessions import (PROBE_MARK, READY_TIMEOUT, Session, alive, host_probe, kernel_spec,
                      qemu_run_dir, wait_no_leftovers)

T_DISK = 256 << 20          # the torture session's /workspace disk
T_MEMORY_MIB = 384
T_CELL_TIMEOUT = 30          # the torture session: bounds the fork bomb; the OOM cell must beat it
CANARY_ENV = "CELLVM_ISOLATION_CANARY"


def rev_hex(text):
    """How a secret travels inside cell code: reversed, hex. The literal never appears as is,
    so the code (in IPython's history, in /proc/self/cmdline on the host) cannot be a false hit."""
    data = text.encode() if isinstance(text, str) else text
    return data[::-1].hex()


# --------------------------------------------------------------------------
# Probe code. Each string defines one function and is run unchanged in the guest (as a cell)
# and on the host (python3 -c). The function prints PROBE_MARK + JSON.

P_HEAD = f"import os, json, errno, socket, stat, time\nMARK = {PROBE_MARK!r}\n"

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

P_FIND = P_HEAD + r'''
def probe_find(names_hex, contents_hex, walk_roots, grep_roots, grep_depth=None, plant=None):
    """Walk walk_roots for files/dirs named like a canary; grep grep_roots for canary bytes.
    plant: [dir, name_hex, content_hex] planted first, as an in-place positive control."""
    names = {bytes.fromhex(h)[::-1].decode() for h in names_hex}
    contents = [bytes.fromhex(h)[::-1] for h in contents_hex]
    planted = None
    if plant:
        d, n, c = plant
        planted = os.path.join(d, bytes.fromhex(n)[::-1].decode())
        names.add(os.path.basename(planted))
        contents.append(bytes.fromhex(c)[::-1])
        with open(planted, "wb") as f:
            f.write(bytes.fromhex(c)[::-1])
    skip = {"/proc", "/sys"}
    res = {"name_hits": [], "content_hits": [], "entries": 0, "grepped": 0, "walk_errors": 0,
           "planted": planted, "mounts": []}
    def err(e):
        res["walk_errors"] += 1
    for root in walk_roots:
        for dirpath, dirnames, filenames in os.walk(root, onerror=err):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
            for n in dirnames + filenames:
                res["entries"] += 1
                if n in names:
                    res["name_hits"].append(os.path.join(dirpath, n))
    for root in grep_roots:
        base = root.rstrip("/").count("/")
        for dirpath, dirnames, filenames in os.walk(root, onerror=err):
            if grep_depth is not None and dirpath.rstrip("/").count("/") - base >= grep_depth:
                dirnames[:] = []
            for n in filenames:
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                    if not stat.S_ISREG(st.st_mode) or st.st_size > (4 << 20):
                        continue
                    with open(p, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                res["grepped"] += 1
                for i, c in enumerate(contents):
                    if c in data:
                        res["content_hits"].append([p, i])
    for path in ("/proc/cmdline", "/proc/self/environ", "/proc/self/cmdline"):
        try:
            with open(path, "rb") as f:
                data = f.read()
            for i, c in enumerate(contents):
                if c in data:
                    res["content_hits"].append([path, i])
        except OSError:
            pass
    with open("/proc/mounts") as f:
        res["mounts"] = [line.split()[:3] for line in f]
    if planted:
        os.unlink(planted)
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


def call(src, fn, *args, **kw):
    """Cell code: the probe's source, then one call. Arguments are str/int/None/lists of them."""
    return f"{src}\n{fn}(*{list(args)!r}, **{kw!r})\n"


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
    """Sessions a, b and t, booted at once; closed (by pid) and checked for leftovers at the end."""
    d = tmp_path_factory.mktemp("isolation")
    torture = ["--disk-size", "256M", "--memory", str(T_MEMORY_MIB),
               "--cell-timeout", str(T_CELL_TIMEOUT)]
    env = {"XDG_DATA_HOME": str(d / "data")}       # artifacts land here, not in ~/.local
    sessions = {"a": Session("cellvm", name="a", env=env),
                "b": Session("cellvm", name="b", env=env),
                "t": Session("cellvm", name="t", extra_args=torture, env=env),
                # No isolation: the same cells through the same gateway find what they look for.
                "local": Session("cellvm-unsafe-local", name="local", env=env)}
    try:
        for s in sessions.values():
            s.start(wait=False)
        for name, s in sessions.items():
            s.wait_ready()
            if name != "local":
                s.qemu_pid()
        yield sessions
    finally:
        pids = [s.gateway_pid for s in sessions.values() if s.gateway_pid]
        for s in sessions.values():
            s.close()
        left = wait_no_leftovers(pids, timeout=10)
        assert not left, f"the isolation sessions left things behind: {left}"


def ready(session, timeout=READY_TIMEOUT):
    """The session runs a trivial cell (waiting out a restart if one is under way)."""
    r = session.run("6 * 7", timeout=timeout)
    assert r.status == "ok", f"session {session.name} does not run a trivial cell: {r.describe()}"
    return r


def heartbeat(session, timeout=2.0):
    """Seconds the session's heartbeat took to echo, or None."""
    ctx = zmq.Context.instance()
    ci = session.connection_info
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(f"tcp://{ci['ip']}:{ci['hb_port']}")
        t = time.monotonic()
        s.send(b"cellvm-ping")
        if not s.poll(int(timeout * 1000)):
            return None
        assert s.recv() == b"cellvm-ping"
        return time.monotonic() - t
    finally:
        s.close()


def kernel_info(session, timeout=10):
    rep = session.control("kernel_info_request", timeout=timeout)
    assert rep["content"]["status"] == "ok", rep["content"]
    return rep


def du_bytes(path):
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


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
# 5. Fork bomb

FORK_BOMB = r'''
import os, signal, time, json, subprocess
signal.signal(signal.SIGINT, signal.SIG_IGN)       # hostile: an interrupt does not stop it
cg = "/sys/fs/cgroup" + open("/proc/self/cgroup").read().strip().split("::")[1]
subprocess.Popen(["/bin/bash", "-c", ":(){ :|:& };:"], stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak = 0
while True:
    try:
        peak = max(peak, int(open(cg + "/pids.current").read()))
        with open("/workspace/bomb.json.tmp", "w") as f:
            json.dump({"peak": peak, "max": open(cg + "/pids.max").read().strip()}, f)
        os.replace("/workspace/bomb.json.tmp", "/workspace/bomb.json")
        time.sleep(0.2)
    except BaseException:
        pass
'''


def test_05_fork_bomb_is_contained(vms):
    t, others = vms["t"], [vms["a"], vms["b"]]
    ready(t)
    mark = secrets.token_hex(8)
    r = t.run(f"open('/workspace/before-bomb.txt', 'w').write({mark!r})")
    assert r.status == "ok", r.describe()
    qemu_before = t.qemu_pid()

    msg_id, sent = t.send(FORK_BOMB)
    time.sleep(6)                                  # let it reach the limit
    during = []
    while time.monotonic() - sent < T_CELL_TIMEOUT - 2:
        hb = heartbeat(t)
        assert hb is not None and hb < 1.0, f"the bombed session's heartbeat: {hb}"
        kernel_info(t)                             # its kernel's control thread still answers
        for o in others:
            t0 = time.monotonic()
            kernel_info(o)
            r = o.run("sum(range(1000))", timeout=30)
            assert r.status == "ok", r.describe()
            during.append(time.monotonic() - t0)
        time.sleep(1)
    assert during, "nothing was checked while the bomb ran"
    print(f"other sessions answered in {max(during):.2f} s at worst during the bomb")

    r = t.collect(msg_id, timeout=T_CELL_TIMEOUT + 60, t_sent=sent)
    took = time.monotonic() - sent
    assert r.status == "error", r.describe()
    assert r.content["ename"] == "KernelDied", r.describe()
    assert f"{T_CELL_TIMEOUT} s time limit" in r.content["evalue"], r.describe()
    assert took < T_CELL_TIMEOUT + 30, f"the bomb was bounded only after {took:.1f} s"

    after = t.run("import json, os\n"
                  "cg = '/sys/fs/cgroup' + open('/proc/self/cgroup').read().strip().split('::')[1]\n"
                  "print(json.dumps({'kept': open('/workspace/before-bomb.txt').read(),\n"
                  "  'bomb': json.load(open('/workspace/bomb.json')),\n"
                  "  'pids_now': int(open(cg + '/pids.current').read())}))",
                  timeout=READY_TIMEOUT)                   # the kernel restarts first
    assert after.status == "ok", after.describe()
    res = json.loads(after.stdout)
    assert res["kept"] == mark                      # /workspace survived the kernel restart
    peak, limit = res["bomb"]["peak"], int(res["bomb"]["max"])
    assert peak >= limit // 2, f"the bomb only reached {peak} processes: not a real bomb"
    assert peak <= limit, f"{peak} processes, over the limit {limit}"
    assert res["pids_now"] < 50, f"the bomb's processes survived the restart: {res['pids_now']}"
    assert t.qemu_pid() == qemu_before, "the VM was replaced, not just the kernel"
    for o in others:
        ready(o, timeout=60)


# --------------------------------------------------------------------------
# 6. Memory bomb

def test_06_memory_bomb_explained_then_working_kernel(vms):
    t = vms["t"]
    ready(t)
    mark = secrets.token_hex(8)
    r = t.run(f"open('/workspace/before-oom.txt', 'w').write({mark!r}); survivor = 1")
    assert r.status == "ok", r.describe()
    t0 = time.monotonic()
    r = t.run("chunks = []\nwhile True:\n    chunks.append(bytearray(b'\\x01') * (16 << 20))\n",
              timeout=240)
    took = time.monotonic() - t0
    assert r.status == "error", r.describe()
    assert r.content["ename"] == "KernelDied", r.describe()
    errs = r.errors
    assert len(errs) == 1, [e["content"] for e in errs]
    text = errs[0]["content"]["evalue"] + "\n".join(errs[0]["content"]["traceback"])
    assert re.search(r"\d+ MiB", text), text
    assert "memory" in text, text
    assert "chunks" in text or "sample" in text, f"no advice on what to do: {text}"
    assert "re-run" in text, text
    print(f"OOM explained after {took:.1f} s: {errs[0]['content']['evalue']}")

    r = t.run("print(open('/workspace/before-oom.txt').read())\n"
              "try:\n    survivor\nexcept NameError:\n    print('fresh namespace')\n",
              timeout=READY_TIMEOUT)                       # the kernel restarts first
    assert r.status == "ok", r.describe()
    assert r.stdout.split() == [mark, "fresh", "namespace"], r.stdout


# --------------------------------------------------------------------------
# 7. Disk

P_FILL = P_HEAD + r'''
def probe_fill(path):
    chunk = os.urandom(1 << 20) * 4
    n, err = 0, None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            n += os.write(fd, chunk)
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e))
    try:
        os.fsync(fd)
    except OSError:
        pass
    os.close(fd)
    st = os.statvfs(os.path.dirname(path))
    print(MARK + json.dumps({"written": n, "error": err, "free": st.f_bavail * st.f_frsize}))
'''


def test_07_filling_workspace_fails_and_host_use_is_bounded(vms):
    t = vms["t"]
    ready(t)
    run_dir = t.run_dir()
    assert run_dir and run_dir.is_dir(), run_dir
    base = du_bytes(run_dir)
    bound = T_DISK + T_DISK // 64 + (16 << 20)      # docs/vm.md: disk + metadata + logs
    rounds = []
    for i in range(2):                              # fill, delete, fill again: no creeping growth
        res = t.probe(call(P_FILL, "probe_fill", "/workspace/fill.bin"), timeout=240)
        used = du_bytes(run_dir)
        rounds.append((res, used))
        assert res["error"] in ("ENOSPC", "EDQUOT"), res
        assert res["written"] > T_DISK // 2, f"stopped early, not at the disk's size: {res}"
        assert res["written"] < T_DISK, res
        assert used <= bound, f"run dir uses {used} bytes on the host, bound {bound}"
        assert used - base >= res["written"] * 0.9, \
            f"the writes did not land in the run dir ({base} -> {used}): the measure is wrong"
        r = t.run("import os; os.unlink('/workspace/fill.bin'); os.sync()")
        assert r.status == "ok", r.describe()
    print(f"run dir {base} -> {[u for _, u in rounds]} bytes; bound {bound}")
    ready(t)


# --------------------------------------------------------------------------
# 8. Sessions are apart

def test_08_sessions_cannot_see_each_other(vms):
    a, b = vms["a"], vms["b"]
    secret_name = f"xsession-{secrets.token_hex(6)}"
    secret = "xsession-content-" + secrets.token_hex(16)
    shown = "xsession-output-" + secrets.token_hex(8)
    b.drain_iopub()
    r = a.run(f"import os\nsecret = bytes.fromhex({rev_hex(secret)!r})[::-1]\n"
              f"name = bytes.fromhex({rev_hex(secret_name)!r})[::-1].decode()\n"
              "open('/workspace/' + name, 'wb').write(secret)\n"
              "os.makedirs('/workspace/out', exist_ok=True)\n"
              "open('/workspace/out/' + name, 'wb').write(secret)\n"
              f"print(bytes.fromhex({rev_hex(shown)!r})[::-1].decode())")
    assert r.status == "ok", r.describe()
    assert shown in r.stdout
    files = r.content.get("output_files", [])
    art = [f for f in files if f["path"].endswith(secret_name)]
    assert art and art[0].get("host_path"), files
    host_path = art[0]["host_path"]
    assert pathlib.Path(host_path).read_text() == secret    # control: the artifact is on the host

    # Nothing of A's cell reached B's client.
    b_iopub = b.drain_iopub()
    assert not any(shown in json.dumps(m["content"]) for m in b_iopub)

    names = [rev_hex(secret_name)]
    contents = [rev_hex(secret)]
    likely = ["/workspace", "/tmp", "/home", "/var", "/run", "/dev/shm", "/mnt"]
    in_a = a.probe(call(P_FIND, "probe_find", names, contents, ["/workspace", "/tmp"], likely),
                   timeout=300)
    assert len(in_a["name_hits"]) == 2, in_a             # control: A sees its own files
    assert any(p == f"/workspace/{secret_name}" for p, _ in in_a["content_hits"]), in_a

    in_b = b.probe(call(P_FIND, "probe_find", names, contents, ["/"], likely), timeout=300)
    assert in_b["entries"] > 10000, in_b["entries"]
    assert in_b["name_hits"] == [], in_b["name_hits"]
    assert in_b["content_hits"] == [], in_b["content_hits"]
    r = b.run(f"import os\nprint(os.path.exists({host_path!r}), "
              f"os.path.exists(os.path.dirname({host_path!r})))")
    assert r.status == "ok" and r.stdout.split() == ["False", "False"], r.describe()

    # Through the gateways' own file transfer: A gets its file, B does not have it.
    ga = a.control("cellvm_get_request", {"path": f"out/{secret_name}"})
    assert ga["content"]["status"] == "ok", ga["content"]
    assert bytes(ga["buffers"][0]) == secret.encode()
    gb = b.control("cellvm_get_request", {"path": f"out/{secret_name}"})
    assert gb["content"]["status"] == "error", gb["content"]
    gb2 = b.control("cellvm_get_request", {"path": host_path})
    assert gb2["content"]["status"] == "error", gb2["content"]

    # Not one guest kernel: a marker in A's /tmp (not /workspace) is not in B's.
    # (boot_id cannot tell: every clone of a snapshot template shares it.)
    marker = "/tmp/cellvm-marker-" + secrets.token_hex(8)
    look = f"import os; print(os.path.exists({marker!r}))"
    a.run(f"open({marker!r}, 'w').write('x')")
    ra, rb = a.run(look), b.run(look)
    assert ra.stdout.strip() == "True", ra.stdout
    assert rb.stdout.strip() == "False", "both sessions run in the same kernel"
    assert vms["a"].qemu_pid() != vms["b"].qemu_pid()


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


# --------------------------------------------------------------------------
# 10. The VM killed from outside (last: the torture session loses its VM)

def test_10_qemu_sigkill_mid_cell_is_explained(vms):
    t, b, a = vms["t"], vms["b"], vms["a"]
    ready(t)
    qemu = t.qemu_pid()
    old_dir = qemu_run_dir(qemu)
    b_qemu, a_qemu = b.qemu_pid(), a.qemu_pid()

    msg_id, sent = t.send("import time; time.sleep(60)")
    b_id, b_sent = b.send("import time; time.sleep(4); print('b still here')")
    # Wait until the cell is running, then kill the VM from outside.
    deadline = time.monotonic() + 60
    while True:
        m = t.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
            break
    time.sleep(0.5)
    killed = time.monotonic()
    os.kill(qemu, signal.SIGKILL)
    r = t.collect(msg_id, timeout=30, t_sent=sent)
    errs = r.errors
    assert len(errs) == 1, [m["msg_type"] for m in r.msgs]
    err_after = errs[0]["t_recv"] - killed
    reply_after = r.reply["t_recv"] - killed
    assert err_after < 1.0, f"the error came {err_after:.2f} s after the kill"
    assert reply_after < 1.0, f"the execute_reply came {reply_after:.2f} s after the kill"
    assert r.status == "error" and r.content["ename"] == "KernelDied", r.describe()
    text = errs[0]["content"]["evalue"]
    assert "virtual machine" in text or " VM" in text, text
    assert "re-run" in text.lower() or "starting" in text.lower(), text
    print(f"error {err_after * 1000:.0f} ms after the kill; execute_reply at "
          f"{reply_after * 1000:.0f} ms: {text}")

    # The bystanders were not touched.
    rb = b.collect(b_id, timeout=60, t_sent=b_sent)
    assert rb.status == "ok" and "b still here" in rb.stdout, rb.describe()
    assert b.qemu_pid() == b_qemu and a.qemu_pid() == a_qemu and alive(b_qemu)
    ready(a, timeout=60)

    # The session comes back in a new VM (or says it is dead).
    back = t.run("import os; print(sorted(os.listdir('/workspace')))", timeout=READY_TIMEOUT)
    if back.status == "ok":
        new_qemu = t.qemu_pid()
        assert new_qemu != qemu
        assert qemu_run_dir(new_qemu) != old_dir
        assert not old_dir.exists(), f"the dead VM's run dir is still there: {old_dir}"
    else:
        states = [m["content"].get("execution_state") for m in t.drain_iopub()
                  if m["msg_type"] == "status"]
        assert "dead" in states, f"neither back nor dead: {back.describe()} {states}"
