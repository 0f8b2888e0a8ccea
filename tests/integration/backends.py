"""The same acceptance tests against each backend: its kernelspec, and a kernel started from it.

BACKENDS maps a backend to the kernelspec `make` writes for it. `Kernel` is one KernelManager
(one cellvm-gateway, and with microvm one QEMU) plus a ready BlockingKernelClient. It records
every pid the gateway started, and `close()` shuts the kernel down and then SIGKILLs, by pid,
whatever is still there. Nothing here skips: a missing kernelspec or guest image FAILS the test.
"""
import json
import os
import pathlib
import queue
import signal
import time

import psutil
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

BACKENDS = {"unsafe-local": "cellvm-unsafe-local", "microvm": "cellvm"}
IMAGE_FILES = ("vmlinux", "initrd.img", "rootfs.ext4")
# A cold microVM is ready in ~14 s under TCG; CI's 2 cores may be busy with other work.
READY_TIMEOUT = 120
TIMEOUT = 60


# --------------------------------------------------------------------------
# Kernelspecs

def kernel_spec(name, kernel_dirs=None):
    """The kernelspec `name` (from JUPYTER_PATH, or kernel_dirs). Fails when it is missing, and
    for a microvm spec when the guest image it names is missing."""
    ksm = KernelSpecManager(kernel_dirs=[str(d) for d in kernel_dirs]) if kernel_dirs \
        else KernelSpecManager()
    try:
        spec = ksm.get_kernel_spec(name)
    except NoSuchKernel:
        pytest.fail(f"kernelspec {name!r} not found (JUPYTER_PATH={os.environ.get('JUPYTER_PATH')},"
                    f" kernel_dirs={kernel_dirs}): run `make`", pytrace=False)
    argv = spec.argv
    if not pathlib.Path(argv[0]).exists():
        pytest.fail(f"kernelspec {name!r}: {argv[0]} is missing: run `make`", pytrace=False)
    if backend_of(argv) == "microvm":
        image = pathlib.Path(argv[argv.index("--image") + 1]) if "--image" in argv \
            else pathlib.Path(argv[0]).parent / "image"
        for f in IMAGE_FILES:
            if not (image / f).exists():
                pytest.fail(f"kernelspec {name!r}: guest image file {image / f} is missing: "
                            f"run `make image`", pytrace=False)
    return spec


def backend_of(argv):
    return argv[argv.index("--backend") + 1] if "--backend" in argv else None


def write_spec(kernels_dir, name, backend, extra_args=()):
    """Kernelspec `name` in kernels_dir: the build's spec for `backend` with extra gateway
    arguments appended. Returns kernels_dir."""
    base = kernel_spec(BACKENDS[backend])
    d = pathlib.Path(kernels_dir) / name
    d.mkdir(parents=True, exist_ok=True)
    src = json.loads((pathlib.Path(base.resource_dir) / "kernel.json").read_text())
    src["argv"] = list(src["argv"]) + [str(a) for a in extra_args]
    src["display_name"] = f"{src['display_name']} ({name})"
    (d / "kernel.json").write_text(json.dumps(src, indent=1))
    return pathlib.Path(kernels_dir)


# --------------------------------------------------------------------------
# Processes

def descendants(pid):
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.02)
    return all(gone(p) for p in pids)


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_procs(procs):
    """SIGKILL psutil.Processes that still run (psutil checks the start time: a recycled pid
    is left alone)."""
    for p in procs:
        try:
            if p.is_running():
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def qemu_children(pid):
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    out = []
    for k in kids:
        try:
            if "qemu-system" in os.path.basename(k.cmdline()[0]):
                out.append(k.pid)
        except (psutil.NoSuchProcess, IndexError):
            pass
    return out


def qemu_run_dir(qemu_pid):
    """The session's run dir, from the QEMU argv (its serial console file lives there)."""
    try:
        argv = psutil.Process(qemu_pid).cmdline()
    except psutil.NoSuchProcess:
        return None
    for a in argv:
        if a.startswith("file:") and a.endswith("/console.log"):
            return pathlib.Path(a[len("file:"):]).parent
    return None


# --------------------------------------------------------------------------
# A kernel started the way Jupyter clients start one

class Kernel:
    def __init__(self, name, kernel_dirs=None, cwd=None):
        self.spec = kernel_spec(name, kernel_dirs)
        self.backend = backend_of(self.spec.argv)
        dirs = [str(d) for d in (kernel_dirs or [])]
        ksm = KernelSpecManager(kernel_dirs=dirs) if dirs else KernelSpecManager()
        self.km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
        self.procs = {}                 # pid -> psutil.Process: everything started, for close()
        self.kc = None
        self.cwd = cwd

    def start(self, timeout=READY_TIMEOUT):
        kw = {"cwd": str(self.cwd)} if self.cwd else {}
        self.km.start_kernel(**kw)
        self.track()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)
        self.track()
        return self

    @property
    def gateway_pid(self):
        return self.km.provisioner.pid if self.km.provisioner else None

    def track(self, pids=()):
        """Remember the gateway and everything below it (and pids), to be killed at close()."""
        pid = self.gateway_pid
        for p in ([pid] + descendants(pid) if pid else []) + list(pids):
            try:
                self.procs.setdefault(p, psutil.Process(p))
            except psutil.NoSuchProcess:
                pass

    def qemu_pid(self, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            q = qemu_children(self.gateway_pid)
            if q:
                self.track(q)
                return q[0]
            time.sleep(0.05)
        raise AssertionError(f"gateway {self.gateway_pid} has no qemu-system child")

    def alive(self):
        """The gateway runs and answers a cell."""
        if not self.km.has_kernel or self.gateway_pid is None or gone(self.gateway_pid):
            return False
        try:
            reply, _ = self.run("1 + 1", timeout=30)
        except Exception:
            return False
        return reply["content"]["status"] == "ok"

    def run(self, code, timeout=TIMEOUT, stdin_hook=None):
        """Execute code; (execute_reply, iopub messages of that request up to idle)."""
        msgs = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=msgs.append,
                                            stdin_hook=stdin_hook,
                                            allow_stdin=stdin_hook is not None)
        return reply, msgs

    def value(self, code, timeout=TIMEOUT):
        """The text/plain result of a cell that must succeed."""
        reply, msgs = self.run(code, timeout)
        assert reply["content"]["status"] == "ok", reply["content"]
        res = [m for m in msgs if m["msg_type"] == "execute_result"]
        assert len(res) == 1, msgs
        return res[0]["content"]["data"]["text/plain"]

    def control(self, msg_type, content=None, buffers=None, timeout=TIMEOUT):
        """Send a control request (with buffers) and return its reply."""
        msg = self.kc.session.msg(msg_type, content or {})
        self.kc.session.send(self.kc.control_channel.socket, msg, buffers=buffers or [])
        deadline = time.monotonic() + timeout
        while True:
            try:
                rep = self.kc.get_control_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no reply to {msg_type} within {timeout} s") from None
            if rep["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return rep

    def close(self):
        self.track()
        if self.kc is not None:
            self.kc.stop_channels()
        try:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=False)
        finally:
            kill_procs(self.procs.values())
            wait_gone([p.pid for p in self.procs.values() if p.is_running()], 5)
            try:
                self.km.cleanup_resources()
            except Exception:
                pass
