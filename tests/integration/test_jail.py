"""The jailer around every QEMU (docs/security.md), on the microvm backend.

Each probe first runs against a control gateway started with `--jail off` and shows that it
finds what it looks for there (QEMU is root, shares the gateway's namespaces, sees the host's
files, has no cgroup of its own); then the same probe runs against a jailed gateway (the default,
`--jail auto`, as root) and must not find it:

- QEMU's uid, gid, supplementary groups and capabilities (/proc/<qemu>/status);
- its mount, pid, net, ipc and uts namespaces (/proc/<qemu>/ns/*) against the gateway's;
- a root-only canary file, read through /proc/<qemu>/root, and what that root holds at all;
- its cgroup's limits (memory, pids, cpu shares, the --cpus quota);
- a cell, /workspace, a restart over the same disk, template restore and the pool under the jail;
- a VM killed by its cgroup's OOM killer is explained in words;
- a gateway run as an unprivileged user jails through a user namespace (or says in one log line
  why it cannot) and its cell still runs.

Everything started here is killed by pid at the end.
"""
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import tempfile
import time

import psutil
import pytest

from sessions import (GATEWAY, IMAGE, LAUNCH, TIMEOUT, Logs, Session, alive, require_image,
                      start_session, wait_gone)

MIB = 1024 * 1024
TEMPLATES = pathlib.Path(os.environ.get("CELLVM_TEMPLATE_DIR",
                                        f"/var/tmp/cellvm-{os.getuid()}/templates"))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the jail's root path needs root")


@pytest.fixture(autouse=True)
def _image_required():
    require_image(IMAGE)


@pytest.fixture(scope="module")
def pair():
    """A jailed session (default options, plus --cpus and disk I/O limits) and a control with
    --jail off."""
    jailed = Session("cellvm", extra_args=["--cpus", "0.9", "--disk-bps", "50M",
                                           "--disk-iops", "2000"], name="jailed")
    control = Session("cellvm", extra_args=["--jail", "off"], name="unjailed")
    try:
        for s in (jailed, control):
            s.start(wait=False)
        for s in (jailed, control):
            s.wait_ready()
        yield jailed, control
    finally:
        for s in (jailed, control):
            s.close()


def status(pid):
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return fields


def ns(pid, name):
    return os.readlink(f"/proc/{pid}/ns/{name}")


def cgroup_dir(pid, controller):
    """The v1 controller's (or the v2) cgroup dir of pid on the host."""
    for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctls, path = line.split(":", 2)
        if controller in ctls.split(",") or (not ctls and controller == ""):
            base = pathlib.Path("/sys/fs/cgroup") / (controller if ctls else "")
            return base / path.lstrip("/")
    return None


def whole_disk(path):
    """MAJ:MIN of the whole disk under path's filesystem (a partition's parent), or None."""
    st = os.stat(path)
    sys_dir = pathlib.Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not sys_dir.exists():
        return None
    if (sys_dir / "partition").exists():
        return (sys_dir.resolve().parent / "dev").read_text().strip()
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def v2():
    return subprocess.run(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], capture_output=True,
                          text=True).stdout.strip() == "cgroup2fs"


# --------------------------------------------------------------------------
# Identity, capabilities, namespaces


def test_qemu_runs_as_its_own_unprivileged_uid_without_capabilities(pair):
    jailed, control = pair
    c = status(control.qemu_pid())
    assert c["Uid"].split()[0] == "0" and int(c["CapEff"], 16) != 0, c   # the control: root
    j = status(jailed.qemu_pid())
    uids, gids = j["Uid"].split(), j["Gid"].split()
    assert len(set(uids)) == 1 and uids[0] != "0", j["Uid"]
    assert len(set(gids)) == 1 and gids[0] != "0", j["Gid"]
    assert j["Groups"] == ""
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(j[cap], 16) == 0, (cap, j[cap])
    assert j["NoNewPrivs"] == "1"
    assert j["Seccomp"] == "2"                  # QEMU's own -sandbox is still there
    assert f"jail=root uid={uids[0]}" in jailed.log_text()


def test_qemu_has_namespaces_of_its_own(pair):
    jailed, control = pair
    names = ("mnt", "pid", "net", "ipc", "uts")
    cq = control.qemu_pid()
    assert all(ns(cq, n) == ns(control.gateway_pid, n) for n in names)
    q = jailed.qemu_pid()
    for n in names:
        assert ns(q, n) != ns(jailed.gateway_pid, n), n
    # QEMU is pid 1 of its pid namespace, and the gateway's own child (the pid it kills).
    assert status(q)["NSpid"].split()[-1] == "1"
    assert psutil.Process(q).ppid() == jailed.gateway_pid
    # No network interface but a down loopback in its network namespace.
    devs = pathlib.Path(f"/proc/{q}/net/dev").read_text().splitlines()[2:]
    assert [d.split(":")[0].strip() for d in devs] == ["lo"]


# --------------------------------------------------------------------------
# The root it sees


@pytest.fixture
def canaries():
    """Root-only files with a secret: under /root and under /tmp."""
    secret = secrets.token_hex(16)
    paths = [pathlib.Path("/root") / f"cellvm-jail-canary-{secret[:8]}",
             pathlib.Path("/tmp") / f"cellvm-jail-canary-{secret[:8]}"]
    for p in paths:
        p.write_text(secret)
        p.chmod(0o600)
    yield paths, secret
    for p in paths:
        p.unlink(missing_ok=True)


def test_host_files_are_not_visible_from_qemu(pair, canaries):
    jailed, control = pair
    paths, secret = canaries
    cq, q = control.qemu_pid(), jailed.qemu_pid()
    for p in paths:
        assert pathlib.Path(f"/proc/{cq}/root{p}").read_text() == secret   # the control reads it
        with pytest.raises(FileNotFoundError):
            pathlib.Path(f"/proc/{q}/root{p}").read_text()
    root = pathlib.Path(f"/proc/{q}/root")
    assert not (root / "etc").exists() and not (root / "proc").exists()
    assert not (root / "home").exists() and not (root / "root").exists()
    assert sorted(d.name for d in (root / "dev").iterdir()) == ["null", "urandom"]
    # What it does see: the image, read-only, and its run dir.
    run_dir = jailed.run_dir()
    assert (root / str(run_dir).lstrip("/") / "console.log").exists()
    with pytest.raises(OSError):
        open(root / str(IMAGE).lstrip("/") / "vmlinux", "ab").close()
    mounts = pathlib.Path(f"/proc/{q}/mounts").read_text().splitlines()
    rw = [m.split()[1] for m in mounts if "rw" in m.split()[3].split(",")]
    assert str(run_dir) in rw
    assert not any(p.startswith(str(IMAGE)) for p in rw), rw


# --------------------------------------------------------------------------
# The host cgroup


def test_qemu_has_a_cgroup_with_limits(pair):
    jailed, control = pair
    cq, q = control.qemu_pid(), jailed.qemu_pid()
    if v2():
        d = cgroup_dir(q, "")
        assert cgroup_dir(cq, "") != d
        mem, pids = int((d / "memory.max").read_text()), (d / "pids.max").read_text().strip()
        assert (d / "cpu.max").read_text().split() == ["90000", "100000"]
    else:
        assert cgroup_dir(cq, "memory") == cgroup_dir(control.gateway_pid, "memory")
        d = cgroup_dir(q, "memory")
        assert d != cgroup_dir(jailed.gateway_pid, "memory") and d.name.startswith("cellvm-vm-")
        mem = int((d / "memory.limit_in_bytes").read_text())
        pids = (cgroup_dir(q, "pids") / "pids.max").read_text().strip()
        cpu = cgroup_dir(q, "cpu")
        assert (cpu / "cpu.shares").read_text().strip() == "1024"
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "90000"
    disk = whole_disk(jailed.run_dir())
    if disk is None:                                # the run dir is on no block device
        assert "event=vm.no_io_limit" in jailed.log_text()
    elif v2():
        assert f"{disk} rbps=52428800 wbps=52428800 riops=2000 wiops=2000" in \
            (cgroup_dir(q, "") / "io.max").read_text()
    else:
        blkio, control_blkio = cgroup_dir(q, "blkio"), cgroup_dir(cq, "blkio")
        for f, v in (("read_bps", 52428800), ("write_bps", 52428800), ("read_iops", 2000),
                     ("write_iops", 2000)):
            name = f"blkio.throttle.{f}_device"
            assert (blkio / name).read_text().split() == [disk, str(v)]
            assert (control_blkio / name).read_text().strip() == ""
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    tcg = "accel=tcg" in jailed.log_text()
    want = (512 + 256) * MIB + (min(1024 * MIB, host // 8) if tcg else 0)
    assert mem == want, (mem, want)
    assert pids == "256"


# --------------------------------------------------------------------------
# It still works


def test_cells_and_workspace_work_in_the_jail(pair):
    jailed, _ = pair
    assert "event=vm.restored" in jailed.log_text()          # restored from the template
    out = jailed.output("import os\nopen('/workspace/j.txt', 'w').write('kept')\n"
                        "print(open('/workspace/j.txt').read(), os.getuid())")
    assert out.split() == ["kept", "1000"]
    old = jailed.qemu_pid()
    # A client restart: a new gateway adopts this /workspace's layer chain, in a new jail.
    jailed.km.restart_kernel(now=False)
    jailed.kc.wait_for_ready(timeout=TIMEOUT)
    jailed.track()
    assert jailed.output("print(open('/workspace/j.txt').read())").strip() == "kept"
    new = jailed.qemu_pid()
    assert new != old and status(new)["Uid"].split()[0] != "0"


def test_a_vm_over_its_host_memory_limit_is_explained(pair):
    """The cgroup's limit lowered under the running VM, then guest memory touched: the host's
    OOM killer ends QEMU, and the client is told so in words."""
    jailed, _ = pair
    q = jailed.qemu_pid()
    if v2():
        d = cgroup_dir(q, "")
        usage, limit = int((d / "memory.current").read_text()), d / "memory.max"
    else:
        d = cgroup_dir(q, "memory")
        usage, limit = int((d / "memory.usage_in_bytes").read_text()), d / "memory.limit_in_bytes"
    limit.write_text(str(usage + 64 * MIB))
    r = jailed.run("x = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1",
                   timeout=TIMEOUT)
    text = " ".join(str(e.get("evalue", "")) + str(e.get("ename", "")) for e in r.errors) \
        + str(r.content)
    assert r.status == "error", r.describe()
    assert "went over its host memory limit" in text, text
    assert "event=vm.host_oom" in jailed.log_text()
    wait_gone([q], 10)
    jailed.kc.wait_for_ready(timeout=TIMEOUT)                 # a new VM, in a new jail
    assert jailed.output("print(6 * 7)").strip() == "42"


# --------------------------------------------------------------------------
# The pool


def test_pool_clones_are_jailed(tmp_path):
    if not any(TEMPLATES.glob("*/meta.json")):
        pytest.skip("no template yet (make template)")
    logs = Logs("jail-pool")
    path = logs.gateway_log = logs.dir / "pool.log"
    log = open(path, "wb")
    proc = subprocess.Popen([str(GATEWAY), "--pool-daemon", "--pool", "1", "--image", str(IMAGE),
                             "--template-dir", str(TEMPLATES)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and "event=pool.clone_ready" not in path.read_text():
            assert proc.poll() is None, path.read_text()[-3000:]
            time.sleep(0.2)
        text = path.read_text()
        qemus = [int(m) for m in re.findall(r"event=pool\.clone_ready .*?qemu=(\d+)", text)]
        assert qemus, text[-3000:]
        st = status(qemus[0])
        assert st["Uid"].split()[0] != "0" and int(st["CapEff"], 16) == 0
        assert ns(qemus[0], "mnt") != ns(proc.pid, "mnt")
        s = start_session("cellvm", extra_args=["--template-dir", str(TEMPLATES), "--pool", "1"],
                          name="jail-pool-session")
        try:
            assert s.output("print(6 * 7)").strip() == "42"
        finally:
            s.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(15)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()                      # by pid, never by name
                proc.wait(timeout=TIMEOUT)
        log.close()
        logs.close()


# --------------------------------------------------------------------------
# Not root


class UserSession(Session):
    """A session whose gateway runs as `nobody`: the connection file is copied where that user
    can read it, then the launcher is exec'd through setpriv."""

    def _write_spec(self, kernel, extra_args, image, launcher=()):
        name = super()._write_spec(kernel, extra_args, image, launcher)
        spec_path = self.dir / "kernels" / name / "kernel.json"
        import json
        spec = json.loads(spec_path.read_text())
        argv = spec["argv"]
        i = argv.index("{connection_file}")
        # Somewhere that user can reach (pytest's own tmp dirs are 0700 root).
        self.home = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-nobody-"))
        self.home.chmod(0o711)
        copy = str(self.home / "connection.json")
        rest = argv[1:i] + ['"$2"'] + argv[i + 1:]
        script = (f'cp "$1" "$2" && chown nobody "$2" && chmod 0600 "$2" && '
                  f'exec setpriv --reuid=nobody --regid=nogroup --clear-groups '
                  f'env HOME={self.home} {argv[0]} ' + " ".join(rest))
        spec["argv"] = ["/bin/sh", "-c", script, "sh", "{connection_file}", copy]
        spec_path.write_text(json.dumps(spec))
        return name


@pytest.mark.allow_slow_reactor(reason="--no-templates: the cold boot copies the disk seed on "
                                "the reactor thread (disk_ms 10-60 under load); known, to move "
                                "off the reactor")
@pytest.mark.slow
def test_a_gateway_that_is_not_root_jails_in_a_user_namespace_or_says_why():
    s = UserSession("cellvm", extra_args=["--no-templates"], name="nobody")
    try:
        s.start(timeout=300)
        q = s.qemu_pid()
        assert s.output("print(6 * 7)").strip() == "42"
        log = s.log_text()
        print("\n".join(ln for ln in log.splitlines() if "jail" in ln))
        st = status(q)
        assert st["Uid"].split()[0] == str(pwd_uid("nobody"))
        if "event=vm.jail kind=userns" in log:
            assert ns(q, "user") != ns(os.getpid(), "user")
            assert ns(q, "mnt") != ns(s.gateway_pid, "mnt")
            assert int(st["CapEff"], 16) == 0 and st["NoNewPrivs"] == "1"
            assert not pathlib.Path(f"/proc/{q}/root/etc/passwd").exists()
        else:
            lines = [ln for ln in log.splitlines() if "event=vm.unjailed" in ln]
            assert len(lines) == 1 and "reason=" in lines[0], log[-3000:]
    finally:
        s.close()
        shutil.rmtree(s.home, ignore_errors=True)
        shutil.rmtree("/var/tmp/cellvm-%d" % pwd_uid("nobody"), ignore_errors=True)


def pwd_uid(name):
    import pwd
    return pwd.getpwnam(name).pw_uid
