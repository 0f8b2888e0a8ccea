"""The node's OCI image (scripts/oci-image.sh; docs/cluster.md, "The node image") under podman,
against the front's side of Enterprise Gateway's protocol (tests/cluster/egfront.py).

The image is built once per test process from this build tree, offline. Each container runs with
the kernel pod's environment (KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY, PORT_RANGE) on the host's
network, its ports on 127.0.0.1 only. The reply must decrypt to connection info, the kernel in
the container must answer kernel_info and run a cell, and the comm port's shutdown must end the
container with status 0. A bad PUBLIC_KEY exits 1 with one line. /dev/kvm, which this host cannot
use (no vmx/svm), is checked as far as it goes: the device and the group reach the kernel's uid,
and the gateway's probe says why it still chose TCG. The jail is checked both ways: podman's
seccomp profile lets it make a user namespace; a profile that refuses unshare, as containerd's
RuntimeDefault does, makes it say `vm.unjailed` and run the cell anyway.

Without podman or buildah this skips, except under CI=true (scripts/deps.sh installs them), where
it fails. Every container is removed by its id at the end.
"""
import json
import os
import pathlib
import random
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest
from jupyter_client import BlockingKernelClient

import sessions
from sessions import BUILD, IMAGE, READY_TIMEOUT, ROOT, TIMEOUT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cluster"))
from egfront import Front  # noqa: E402

pytestmark = pytest.mark.slow

NAME = os.environ.get("CELLVM_OCI_NAME", "localhost/cellvm-node")
FIELDS = {"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "ip", "key",
          "transport", "signature_scheme", "kernel_name", "kernel_id", "comm_port", "pid",
          "pgid"}
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "comm_port")
KVM_RDEV = os.makedev(10, 232)                   # the misc device every /dev/kvm is


def tools():
    missing = [t for t in ("podman", "buildah") if not shutil.which(t)]
    if not missing:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{', '.join(missing)} missing under CI=true: scripts/deps.sh installs them")
    pytest.skip(f"{', '.join(missing)} missing (scripts/deps.sh installs podman and buildah)")


def podman_opts():
    """What this host needs of `podman run`: podman asks for 1048576 open files by default, and
    root here may not raise a hard limit (no CAP_SYS_RESOURCE), so the limits are our own; crun
    refuses cgroups v1 beside a v2 hierarchy that holds a controller, so runc where it is."""
    opts = []
    runtime = os.environ.get("CELLVM_OCI_RUNTIME") or ("runc" if shutil.which("runc") else "")
    if runtime:
        opts += ["--runtime", runtime]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    nproc = 16384 if nproc == resource.RLIM_INFINITY else min(nproc, 16384)
    return opts + ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


@pytest.fixture(scope="session")
def node_image():
    tools()
    out = subprocess.run(["bash", str(ROOT / "scripts" / "oci-image.sh"), str(BUILD), str(IMAGE)],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return f"{NAME}:dev"


def podman(*args, timeout=60, check=True):
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    assert not check or out.returncode == 0, f"podman {' '.join(args)}: {out.stderr}"
    return out


def free_range(size=50):
    lo = random.randrange(20000, 60000 - size)
    return f"{lo}..{lo + size - 1}"


class Container:
    """One `podman run -d` of the image; remove() takes it away by id, logs kept."""

    def __init__(self, image, env, args=(), opts=()):
        self.logs = sessions.Logs(f"oci-{env.get('KERNEL_ID', 'container')}")
        self.log_path = self.logs.dir / "container.log"
        self.logs.gateway_log = self.log_path
        envs = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        self.t0 = time.monotonic()
        out = podman("run", "-d", "--network", "host", *podman_opts(), *opts, *envs, image,
                     *args)
        self.id = out.stdout.strip()
        self.removed = False
        assert len(self.id) == 64, out.stdout

    def text(self):
        out = podman("logs", self.id, check=False)
        return out.stdout + out.stderr

    def wait(self, timeout=60):
        """Its exit status, once it has exited."""
        return int(podman("wait", self.id, timeout=timeout).stdout.strip())

    def pid(self):
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.id).stdout)

    def wait_for(self, words, timeout=30):
        deadline = time.monotonic() + timeout
        while words not in (text := self.text()):
            assert time.monotonic() < deadline, f"no {words!r} within {timeout} s:\n{text[-3000:]}"
            time.sleep(0.2)
        return text

    def remove(self):
        if self.removed:
            return
        self.removed = True
        self.log_path.write_text(self.text())
        podman("rm", "-f", "-t", "0", self.id, check=False)
        self.logs.close()


@pytest.fixture
def front():
    f = Front()
    yield f
    f.close()


@pytest.fixture
def run(node_image, front):
    started = []

    def start(env=None, args=(), opts=(), kernel_id=None):
        kid = kernel_id or f"oci-{os.getpid()}-{random.getrandbits(32):x}"
        pod = {"KERNEL_ID": kid, "RESPONSE_ADDRESS": front.address,
               "PUBLIC_KEY": front.public_key, "PORT_RANGE": free_range(),
               "CELLVM_REMOTE_IP": "127.0.0.1", "CELLVM_LOG_LEVEL": "info", **(env or {})}
        c = Container(node_image, pod, args, opts)
        c.kernel_id, c.range = kid, pod["PORT_RANGE"]
        started.append(c)
        return c
    yield start
    for c in started:
        c.remove()
    leftover = podman("ps", "-a", "-q", "--no-trunc", check=False).stdout.split()
    assert not {c.id for c in started} & set(leftover)


def check_info(info, c):
    assert set(info) == FIELDS, sorted(set(info) ^ FIELDS)
    lo, hi = (int(x) for x in c.range.split(".."))
    ports = [info[p] for p in PORTS]
    assert len(set(ports)) == 6 and all(lo <= p <= hi for p in ports), (ports, c.range)
    assert info["ip"] == "127.0.0.1" and info["transport"] == "tcp"
    assert info["signature_scheme"] == "hmac-sha256" and len(info["key"]) >= 32
    assert info["kernel_id"] == c.kernel_id
    assert info["pid"] == 1 and info["pgid"] == 1, "cellvm-remote is the container's PID 1"


def client(info):
    kc = BlockingKernelClient()
    kc.load_connection_info(dict(info, key=info["key"].encode()))
    kc.start_channels()
    return kc


def comm(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)


def status_of(pid):
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.split()
    return fields


def test_a_kernel_in_the_container_answers_and_shuts_down(run, front):
    c = run()
    info = front.receive(timeout=60)
    took = time.monotonic() - c.t0
    print(f"podman run .. reply received: {took:.3f} s")
    check_info(info, c)
    status = status_of(c.pid())
    assert status["Uid"][:2] == ["1000", "1000"] and status["Gid"][0] == "100", status
    assert status["CapEff"] == ["0000000000000000"], "uid 1000 holds no capability"
    kc = client(info)
    try:
        reply = kc.kernel_info(reply=True, timeout=READY_TIMEOUT)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert reply["content"]["language_info"]["name"] == "python"
        t_ready = time.monotonic() - c.t0
        print(f"podman run .. kernel_info_reply: {t_ready:.3f} s")
        cell = sessions.run_cell(kc, "1+1", timeout=TIMEOUT)
        assert cell.status == "ok" and cell.results() == ["2"], cell.describe()
    finally:
        kc.stop_channels()
    text = c.text()
    assert 'vm.accel choice=tcg reason="tcg: no /dev/kvm' in text, text[-3000:]
    # podman's seccomp profile allows unshare: the VM is jailed in a user namespace.
    assert "vm.jail kind=userns" in text and "vm.unjailed" not in text, text[-3000:]
    comm(info["comm_port"], b'{"shutdown": 1}')
    assert c.wait(timeout=60) == 0, c.text()[-3000:]
    assert "remote.gateway_exited status=0" in c.text()


def test_a_bad_public_key_exits_1_with_one_line(run):
    c = run(env={"PUBLIC_KEY": "not base64!"})
    assert c.wait(timeout=60) == 1
    lines = c.text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cellvm-remote: public key: not base64"), lines


def kvm_node(tmp, gid):
    """A /dev/kvm of our own for podman --device: the same device, mode 0660, group gid (the
    host's is 0600 root here, and a node's kvm group has whatever gid its distribution gave)."""
    path = pathlib.Path(tmp) / f"kvm-{gid}"
    os.mknod(path, 0o660 | stat.S_IFCHR, KVM_RDEV)
    os.chown(path, 0, gid)
    os.chmod(path, 0o660)
    return str(path)


def image_kvm_gid(image):
    mnt = podman("image", "mount", image).stdout.strip()
    try:
        group = pathlib.Path(mnt, "etc", "group").read_text()
    finally:
        podman("image", "unmount", image, check=False)
    return int(next(l for l in group.splitlines() if l.startswith("kvm:")).split(":")[2])


def accel_line(c):
    text = c.wait_for("event=vm.accel")
    return next(l for l in text.splitlines() if "event=vm.accel" in l)


@pytest.mark.skipif(not os.path.exists("/dev/kvm"), reason="no kvm module here: no /dev/kvm")
def test_dev_kvm_reaches_the_kernel_uid_through_its_group(run, node_image, front):
    """--device /dev/kvm whose group is the image's kvm group: it opens as uid 1000 with no
    --group-add; another gid needs --group-add; without the group it does not open. The accel
    stays TCG here because the CPU has no vmx/svm, and the gateway says that is why."""
    usable = ("tcg: /dev/kvm present but cpu has no vmx/svm", "kvm: /dev/kvm usable")
    with tempfile.TemporaryDirectory(prefix="cellvm-oci-kvm-") as tmp:
        kvm_gid = image_kvm_gid(node_image)
        other = 4242 if kvm_gid != 4242 else 4243
        cases = [
            ([f"--device={kvm_node(tmp, kvm_gid)}:/dev/kvm"], kvm_gid, usable),
            ([f"--device={kvm_node(tmp, other)}:/dev/kvm", f"--group-add={other}"], other,
             usable),
            ([f"--device={kvm_node(tmp, other + 1)}:/dev/kvm"], None,
             ("tcg: /dev/kvm cannot be opened read-write (Permission denied)",)),
        ]
        for opts, gid, words in cases:
            c = run(opts=opts)
            line = accel_line(c)
            assert any(w in line for w in words), (opts, line)
            pid = c.pid()
            st = os.stat(f"/proc/{pid}/root/dev/kvm")
            assert stat.S_ISCHR(st.st_mode) and st.st_rdev == KVM_RDEV
            if gid is not None:
                assert str(gid) in status_of(pid)["Groups"], (opts, status_of(pid)["Groups"])
            front.receive(timeout=60)                # the reply of each launch, drained
            c.remove()


def refusing_unshare_profile(tmp):
    """podman's own seccomp profile with unshare refused (EPERM), as containerd's and Docker's
    RuntimeDefault refuse it to a process without CAP_SYS_ADMIN."""
    host = json.loads(podman("info", "--format", "json").stdout)["host"]
    src = host["security"].get("seccompProfilePath") or "/usr/share/containers/seccomp.json"
    profile = json.loads(pathlib.Path(src).read_text())
    for rule in profile["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW":
            rule["names"] = [n for n in rule["names"] if n != "unshare"]
    profile["syscalls"].append({"names": ["unshare"], "action": "SCMP_ACT_ERRNO",
                                "errnoRet": 1})
    path = pathlib.Path(tmp) / "seccomp-no-unshare.json"
    path.write_text(json.dumps(profile))
    return str(path)


def test_without_user_namespaces_the_vm_runs_unjailed_and_says_so(run, front):
    with tempfile.TemporaryDirectory(prefix="cellvm-oci-seccomp-") as tmp:
        c = run(opts=[f"--security-opt=seccomp={refusing_unshare_profile(tmp)}"])
        info = front.receive(timeout=60)
        kc = client(info)
        try:
            kc.kernel_info(reply=True, timeout=READY_TIMEOUT)
            cell = sessions.run_cell(kc, "6*7", timeout=TIMEOUT)
            assert cell.results() == ["42"], cell.describe()
        finally:
            kc.stop_channels()
        text = c.text()
        assert "vm.unjailed" in text and "vm.jail kind=" not in text, text[-3000:]
        comm(info["comm_port"], b'{"shutdown": 1}')
        assert c.wait(timeout=60) == 0, c.text()[-3000:]
