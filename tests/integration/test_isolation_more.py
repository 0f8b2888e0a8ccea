"""The isolation proof, continued from test_isolation.py (whose docstring says what
every probe shows): the probes that need two sessions or break one, 5-8 and 10.

Three sessions are shared by the module (booted at once, to keep the runtime down):

- `a`: kernelspec `cellvm`, session A in 8, and a bystander in 5 and 10;
- `b`: kernelspec `cellvm`, session B in 8 and the bystander in 5 and 10;
- `t` ("torture"): a copy of `cellvm` with `--disk-size 256M --memory 384 --cell-timeout 30`,
  for the destructive probes. They run in file order 5, 6, 7, 10 and each leaves a working
  kernel, except 10, which kills the VM and therefore comes last.

Everything started here is killed by pid at the end, and the module checks that its gateways left
no QEMU, run dir, socket or disk.
"""
import json
import psutil
import os
import pathlib
import re
import secrets
import signal
import subprocess
import time

import pytest
import zmq

from isohelpers import P_FIND, P_HEAD, booted, call, rev_hex
from sessions import READY_TIMEOUT, TIMING_SCALE, alive, qemu_run_dir

# One scenario in steps over one session per backend: all on one worker, in order.
pytestmark = pytest.mark.xdist_group("isolation_more")

T_DISK = 256 << 20          # the torture session's /workspace disk
T_MEMORY_MIB = 384
T_CELL_TIMEOUT = 30          # the torture session: bounds the fork bomb; the OOM cell must beat it


# --------------------------------------------------------------------------
# Fixtures

@pytest.fixture(scope="module")
def vms(tmp_path_factory):
    """Sessions a, b and t, booted at once; closed (by pid) and checked for leftovers at the end."""
    torture = ["--disk-size", "256M", "--memory", str(T_MEMORY_MIB),
               "--cell-timeout", str(T_CELL_TIMEOUT)]
    yield from booted(tmp_path_factory, {"a": ("cellvm", ()), "b": ("cellvm", ()),
                                         "t": ("cellvm", torture)})


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
    rep = session.control("kernel_info_request", timeout=timeout * TIMING_SCALE)
    assert rep["content"]["status"] == "ok", rep["content"]
    return rep


def du_bytes(path):
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


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


@pytest.mark.slow
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
    # The new kernel runs in a VM restored over the same disk (docs/sessions.md), or in the
    # same VM when there is no template for this configuration yet: either way, the old one
    # with the bomb in it is gone or emptied (pids_now above).
    if t.qemu_pid() != qemu_before:
        assert not psutil.pid_exists(qemu_before) or \
            psutil.Process(qemu_before).status() == psutil.STATUS_ZOMBIE, "the bombed VM lives on"
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
