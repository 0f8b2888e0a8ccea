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
import re
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from sessions import (GATEWAY, IMAGE, TIMEOUT, Logs, alive, require_image, start_session,
                      wait_gone)

TEMPLATES = pathlib.Path(os.environ.get("CELLVM_TEMPLATE_DIR",
                                        f"/var/tmp/cellvm-{os.getuid()}/templates"))


@pytest.fixture(autouse=True)
def _image_required():
    require_image(IMAGE)


PROBE = ("import os, random, uuid, time, json, numpy\n"
         "print(json.dumps({'urandom': os.urandom(16).hex(), 'random': random.random(),"
         " 'numpy': float(numpy.random.random()), 'uuid': str(uuid.uuid4()),"
         " 'time': time.time()}))\n")


def build_template(template_dir, timeout=600):
    """Build (or wait for) the template for the default options; its path (the gateway's key
    names it: the dir may hold others of this image, for another CPU or QEMU)."""
    deadline = time.time() + timeout
    while True:
        p = subprocess.run([str(GATEWAY), "--build-template", "--image", str(IMAGE),
                            "--template-dir", str(template_dir)],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0:
            m = re.search(r"^template (\S+) (built|is up to date)$", p.stdout, re.M)
            assert m, p.stdout
            return pathlib.Path(m.group(1))
        assert p.returncode == 3, p.stderr[-2000:]     # 3: another process builds it
        assert time.time() < deadline, "template build by another process never finished"
        time.sleep(5)


def our_template(template_dir):
    """A template of this image with default memory and vCPUs, or None: for a dir that holds at
    most one (build_template names the one in a shared dir)."""
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
    build_template(TEMPLATES)                   # at once when it is up to date
    return TEMPLATES


def start(name, extra):
    """A ready session of the `cellvm` kernelspec (through cellvm-launch) on IMAGE, with extra
    gateway arguments; its log captured."""
    return start_session("cellvm", name=name, image=IMAGE, extra_args=extra)


def assert_first_cell_is_clean(s):
    """Warm-ups (the pool holder's, the kernel's after an idle reseed) left
    nothing: this is In[1], and nothing was stored or output before it."""
    r = s.run("print(len(In), len(Out))")
    assert r.status == "ok", r.content
    assert r.content["execution_count"] == 1, r.content
    assert r.streams.strip() == "2 0", r.streams


def test_restored_clones_never_share_random_values(template):
    seen = []
    for i in range(2):
        s = start(f"snap{i}", ["--template-dir", str(template)])
        try:
            if i == 0:                  # idle first: the kernel reseeds and warms up alone
                time.sleep(1.5)
                assert_first_cell_is_clean(s)
            got = json.loads(s.output(PROBE).strip().splitlines()[-1])
            host = time.time()
            assert "event=vm.restored" in s.log_text(), s.log_text()[-3000:]
            assert "event=vm.reseeded" in s.log_text()
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
    src = build_template(template)
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
@pytest.mark.slow
def test_corrupt_template_is_detected_and_the_session_cold_boots(template, tmp_path, how):
    tdir = tmp_path / "templates"
    bad = corrupt_copy(template, tdir, how)
    s = start("snapbad", ["--template-dir", str(tdir)])
    try:
        assert s.output("print(6 * 7)").strip() == "42"
        log = s.log_text()
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
    s = start("snapgood", ["--template-dir", str(tdir)])
    try:
        assert s.output("print(6 * 7)").strip() == "42"
        assert "event=vm.restored" in s.log_text()
    finally:
        s.close()


@pytest.mark.slow
def test_mismatched_template_is_never_used(template, tmp_path):
    """A template whose meta names another key (changed image, QEMU, ...)."""
    tdir = tmp_path / "templates"
    bad = corrupt_copy(template, tdir, "intact")
    meta = json.loads((bad / "meta.json").read_text())
    meta["key"] = "0" * len(meta["key"])
    (bad / "meta.json").write_text(json.dumps(meta))
    s = start("snapmis", ["--template-dir", str(tdir)])
    try:
        assert s.output("print(6 * 7)").strip() == "42"
        assert "event=template.corrupt" in s.log_text()
        assert "event=vm.restored" not in s.log_text()
    finally:
        s.close()
        kill_builders(tdir)


# ---------------------------------------------------------------------------
# The warm pool.

class Pool:
    """A pool daemon this test starts, and stops or kills by pid. Its log is registered with the
    session logs (attached when the test fails, scanned for slow reactor turns)."""

    def __init__(self, template_dir, size):
        self.logs = Logs(f"pool-{size}")
        self.path = self.logs.gateway_log = self.logs.dir / "pool.log"
        self.log = open(self.path, "wb")
        self.proc = subprocess.Popen([str(GATEWAY), "--pool-daemon", "--pool", str(size),
                                      "--image", str(IMAGE), "--template-dir", str(template_dir)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.size = size

    def text(self):
        self.log.flush()
        return self.path.read_text(errors="replace")

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
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(15)
                self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:           # by pid, never by name
                self.proc.kill()
                self.proc.wait(timeout=TIMEOUT)
            self.log.close()
            self.logs.close()


def still_alive(pids, timeout=10):
    """The pids still running after waiting up to timeout for all of them to go."""
    wait_gone(pids, timeout)
    return [p for p in pids if alive(p)]


def test_pool_hands_out_a_working_clone_and_stops_cleanly(template):
    pool = Pool(template, 1)
    try:
        pool.wait_full()
        s = start("snappool", ["--template-dir", str(template), "--pool", "1"])
        try:
            assert "event=vm.from_pool" in s.log_text(), s.log_text()[-3000:]
            assert "prebound=yes" in s.log_text()
            assert_first_cell_is_clean(s)       # the holder's warm-up left nothing
            got = json.loads(s.output(PROBE).strip().splitlines()[-1])
            assert abs(got["time"] - time.time()) < 5
            assert "handed_out=1" in pool.text()
            pool.wait_full()                        # refilled in the background
        finally:
            s.close()
        left = pool.ready_qemus()
        pool.proc.send_signal(15)                   # a clean stop takes its clones along
        pool.proc.wait(timeout=15)
        assert "event=pool.stopped" in pool.text()
        assert still_alive(left) == [], "a pool clone outlived its daemon"
    finally:
        pool.stop()


def test_pool_daemon_death_does_not_take_down_running_sessions(template):
    pool = Pool(template, 2)
    try:
        pool.wait_full()
        s = start("snappool2", ["--template-dir", str(template), "--pool", "2"])
        try:
            assert "event=vm.from_pool" in s.log_text()
            s.output("x = 41")
            mine = int(s.log_text().split("event=vm.from_pool pid=")[1].split()[0])
            pool.proc.kill()                        # SIGKILL: no clean-up at all
            pool.proc.wait()
            waiting = [q for q in pool.ready_qemus() if q != mine]
            assert still_alive(waiting) == [], "clones not handed out outlived the daemon"
            assert alive(mine)
            assert s.output("print(x + 1)").strip() == "42"
        finally:
            s.close()
        assert still_alive([mine]) == [], "the session's clone outlived its gateway"
    finally:
        pool.stop()
