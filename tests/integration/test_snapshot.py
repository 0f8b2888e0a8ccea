"""Snapshot templates and restored sessions (docs/snapshots.md).

- two restored clones never share random values (os.urandom, random,
  numpy.random, uuid4) and their clock is the host's;
- a corrupt template is detected, logged and deleted, the session cold-boots
  and works, and the template is rebuilt in the background;
- (pool) a clone handed out by the pool daemon works, and the daemon dying
  does not take down a running session.

Needs the guest image (CELLVM_IMAGE, default build/image). Under TCG a
template build takes about a minute; it is cached under the default
template dir, outside the work tree.
"""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, ROOT

IMAGE = pathlib.Path(os.environ.get("CELLVM_IMAGE", ROOT / "build" / "image")).resolve()
GATEWAY = BUILD / "cellvm-gateway"
LAUNCH = BUILD / "cellvm-launch"               # what kernelspecs run (docs/gateway.md)
TEMPLATES = pathlib.Path(os.environ.get("CELLVM_TEMPLATE_DIR",
                                        f"/var/tmp/cellvm-{os.getuid()}/templates"))

@pytest.fixture(autouse=True)
def _image_required():
    if not (IMAGE / "vmlinux").exists():
        pytest.fail(f"no guest image in {IMAGE}: run `make image`")

PROBE = ("import os, random, uuid, time, json, numpy\n"
         "print(json.dumps({'urandom': os.urandom(16).hex(), 'random': random.random(),"
         " 'numpy': float(numpy.random.random()), 'uuid': str(uuid.uuid4()),"
         " 'time': time.time()}))\n")


def build_template(template_dir, timeout=600):
    """Build (or wait for) the template for the default options."""
    deadline = time.time() + timeout
    while True:
        p = subprocess.run([str(GATEWAY), "--build-template", "--image", str(IMAGE),
                            "--template-dir", str(template_dir)],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0:
            return
        assert p.returncode == 3, p.stderr[-2000:]     # 3: another process builds it
        assert time.time() < deadline, "template build by another process never finished"
        time.sleep(5)


def our_template(template_dir):
    """The template of this image with default options, or None."""
    want = json.loads((IMAGE / "image.json").read_text())["image_hash"]
    for d in pathlib.Path(template_dir).glob("*"):
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, ValueError):
            continue
        inputs = meta.get("inputs", {})
        if inputs.get("image_hash") == want and inputs.get("mem_mib") == 512 \
                and inputs.get("vcpus") == 1 and not d.name.endswith(".tmp"):
            return d
    return None


def has_template(template_dir):
    return our_template(template_dir) is not None


@pytest.fixture(scope="module")
def template():
    if not has_template(TEMPLATES):
        build_template(TEMPLATES)
    return TEMPLATES


class Session:
    """A kernel launched through a kernelspec of our own, its log captured."""

    def __init__(self, spec_root, name, extra):
        from jupyter_client import KernelManager
        d = pathlib.Path(spec_root) / "kernels" / name
        d.mkdir(parents=True, exist_ok=True)
        argv = [str(LAUNCH), "--connection-file", "{connection_file}", "--backend", "microvm",
                "--image", str(IMAGE)] + extra
        (d / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": name,
                                                   "language": "python",
                                                   "interrupt_mode": "message"}))
        os.environ["JUPYTER_PATH"] = f"{spec_root}:{BUILD / 'share' / 'jupyter'}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="gw-", suffix=".log")
        self.km = KernelManager(kernel_name=name)
        t0 = time.perf_counter()
        self.km.start_kernel(stderr=self.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=180)
        self.ready_s = time.perf_counter() - t0

    def run(self, code, timeout=120):
        out = []
        reply = self.kc.execute_interactive(
            code, timeout=timeout,
            output_hook=lambda m: out.append(m["content"].get("text", ""))
            if m["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    def assert_first_cell_is_clean(self):
        """Warm-ups (the pool holder's, the kernel's after an idle reseed) left
        nothing: this is In[1], and nothing was stored or output before it."""
        out = []
        reply = self.kc.execute_interactive(
            "print(len(In), len(Out))", timeout=120,
            output_hook=lambda m: out.append(m["content"].get("text", ""))
            if m["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert reply["content"]["execution_count"] == 1, reply["content"]
        assert "".join(out).strip() == "2 0", out

    def text(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text()

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self.log.close()


@pytest.fixture
def spec_root(tmp_path):
    yield tmp_path / "jupyter"


def test_restored_clones_never_share_random_values(template, spec_root):
    seen = []
    for i in range(2):
        s = Session(spec_root, f"snap{i}", ["--template-dir", str(template)])
        try:
            if i == 0:                  # idle first: the kernel reseeds and warms up alone
                time.sleep(1.5)
                s.assert_first_cell_is_clean()
            got = json.loads(s.run(PROBE).strip().splitlines()[-1])
            host = time.time()
            assert "event=vm.restored" in s.text(), s.text()[-3000:]
            assert "event=vm.reseeded" in s.text()
            assert abs(got["time"] - host) < 5, (got["time"], host)   # the host's clock
            seen.append(got)
        finally:
            s.close()
    a, b = seen
    for k in ("urandom", "random", "numpy", "uuid"):
        assert a[k] != b[k], f"two clones share {k}: {a[k]}"


def kill_builders(tdir):
    """Stop the background template build a test caused (by pid: its command
    line names the test's own template dir; its QEMU dies with it)."""
    for p in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--build-template" in cmd and str(tdir).encode() in cmd:
            try:
                os.kill(int(p.name), 9)
            except ProcessLookupError:
                pass


def corrupt_copy(template, dest, how):
    """A copy of the good template under dest, damaged as asked."""
    src = our_template(template)
    dst = dest / src.name
    dst.mkdir(parents=True)
    for f in ("ram", "workspace.qcow2"):
        os.link(src / f, dst / f)               # read-only use: a hard link is enough
    shutil.copy(src / "meta.json", dst / "meta.json")
    state = (src / "state").read_bytes()
    if how == "truncated":
        state = state[: len(state) // 2]
    elif how == "flipped":
        state = state[:100] + bytes([state[100] ^ 0xFF]) + state[101:]
    (dst / "state").write_bytes(state)
    return dst


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_corrupt_template_is_detected_and_the_session_cold_boots(template, spec_root, tmp_path,
                                                                 how):
    tdir = tmp_path / "templates"
    bad = corrupt_copy(template, tdir, how)
    s = Session(spec_root, "snapbad", ["--template-dir", str(tdir)])
    try:
        assert s.run("print(6 * 7)").strip() == "42"
        log = s.text()
        assert "event=template.corrupt" in log, log[-3000:]
        assert "event=vm.cold_boot" in log
        assert "event=vm.restored" not in log
        assert "event=template.build_requested" in log
        assert not bad.exists(), "the corrupt template was not deleted"
    finally:
        s.close()
    if how == "flipped":
        kill_builders(tdir)
        return
    # The rebuild runs in the background; once it is there, sessions restore again.
    deadline = time.time() + 400
    while not has_template(tdir) and time.time() < deadline:
        time.sleep(3)
    assert has_template(tdir), (tdir / "build.log").read_text()[-3000:]
    s = Session(spec_root, "snapgood", ["--template-dir", str(tdir)])
    try:
        assert s.run("print(6 * 7)").strip() == "42"
        assert "event=vm.restored" in s.text()
    finally:
        s.close()


def test_mismatched_template_is_never_used(template, spec_root, tmp_path):
    """A template whose meta names another key (changed image, QEMU, ...)."""
    tdir = tmp_path / "templates"
    bad = corrupt_copy(template, tdir, "intact")
    meta = json.loads((bad / "meta.json").read_text())
    meta["key"] = "0" * len(meta["key"])
    (bad / "meta.json").write_text(json.dumps(meta))
    s = Session(spec_root, "snapmis", ["--template-dir", str(tdir)])
    try:
        assert s.run("print(6 * 7)").strip() == "42"
        assert "event=template.corrupt" in s.text()
        assert "event=vm.restored" not in s.text()
    finally:
        s.close()
        kill_builders(tdir)


# ---------------------------------------------------------------------------
# The warm pool.

class Pool:
    """A pool daemon this test starts, and stops or kills by pid."""

    def __init__(self, template_dir, size):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="pool-", suffix=".log")
        self.proc = subprocess.Popen([str(GATEWAY), "--pool-daemon", "--pool", str(size),
                                      "--image", str(IMAGE), "--template-dir", str(template_dir)],
                                     stdout=self.log, stderr=self.log)
        self.size = size

    def text(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text()

    def wait_full(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            sizes = [ln for ln in self.text().splitlines() if "event=pool.size" in ln]
            if sizes and f"ready={self.size} " in sizes[-1]:
                return
            assert self.proc.poll() is None, self.text()[-3000:]
            time.sleep(0.1)
        raise AssertionError("the pool never filled: " + self.text()[-3000:])

    def ready_qemus(self):
        return [int(ln.split("qemu=")[1].split()[0]) for ln in self.text().splitlines()
                if "event=pool.clone_ready" in ln]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(15)
            self.proc.wait(timeout=15)
        self.log.close()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_pool_hands_out_a_working_clone_and_stops_cleanly(template, spec_root):
    pool = Pool(template, 1)
    try:
        pool.wait_full()
        s = Session(spec_root, "snappool", ["--template-dir", str(template), "--pool", "1"])
        try:
            assert "event=vm.from_pool" in s.text(), s.text()[-3000:]
            assert "prebound=yes" in s.text()
            s.assert_first_cell_is_clean()      # the holder's warm-up left nothing
            got = json.loads(s.run(PROBE).strip().splitlines()[-1])
            assert abs(got["time"] - time.time()) < 5
            assert "handed_out=1" in pool.text()
            pool.wait_full()                        # refilled in the background
        finally:
            s.close()
        left = pool.ready_qemus()
        pool.proc.send_signal(15)                   # a clean stop takes its clones along
        pool.proc.wait(timeout=15)
        assert "event=pool.stopped" in pool.text()
        assert wait_dead(left) == [], "a pool clone outlived its daemon"
    finally:
        pool.stop()


def test_pool_daemon_death_does_not_take_down_running_sessions(template, spec_root):
    pool = Pool(template, 2)
    try:
        pool.wait_full()
        s = Session(spec_root, "snappool2", ["--template-dir", str(template), "--pool", "2"])
        try:
            assert "event=vm.from_pool" in s.text()
            s.run("x = 41")
            mine = int(s.text().split("event=vm.from_pool pid=")[1].split()[0])
            pool.proc.kill()                        # SIGKILL: no clean-up at all
            pool.proc.wait()
            waiting = [q for q in pool.ready_qemus() if q != mine]
            assert wait_dead(waiting) == [], "clones not handed out outlived the daemon"
            assert alive(mine)
            assert s.run("print(x + 1)").strip() == "42"
        finally:
            s.close()
        assert wait_dead([mine]) == [], "the session's clone outlived its gateway"
    finally:
        pool.stop()
