"""Helpers for tests that drive microVM sessions through jupyter_client, the way clients do.

A `Session` is one KernelManager (one cellvm-gateway, one QEMU) plus its BlockingKernelClient.
It records the gateway's pid at start, finds the session's QEMU (a child of the gateway whose
command line is qemu-system-*) and its run directory, runs cells and collects their messages by
msg_id, and on `close` shuts the kernel down and then SIGKILLs, by pid, everything it started that
is still there. Nothing here skips: a missing build, kernelspec or image fails the test.

`leftovers(gateway_pids)` lists what those gateways left on the host: QEMU processes, run dirs
under the run base, unix sockets and qcow2 layers.
"""
import json
import os
import pathlib
import queue
import subprocess
import time

import psutil
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()
SPECS = BUILD / "share" / "jupyter" / "kernels"
HOST_PYTHON = "/usr/bin/python3"
READY_TIMEOUT = 240          # a cold VM is ready in ~14 s on TCG; several boot at once in CI
PROBE_MARK = "@@CELLVM-PROBE@@"


def run_base():
    """Where the microvm backend puts its run dirs by default (docs/vm.md)."""
    return pathlib.Path(f"/var/tmp/cellvm-{os.getuid()}")


def require_build(spec="cellvm"):
    """Fail (never skip) when the gateway, the kernelspec or the guest image is missing."""
    for p in (BUILD / "cellvm-gateway", SPECS / spec / "kernel.json"):
        if not p.exists():
            pytest.fail(f"{p} is missing: run `make` first")
    spec_json = json.loads((SPECS / spec / "kernel.json").read_text())
    if "microvm" in spec_json["argv"]:
        image = pathlib.Path(spec_json["argv"][spec_json["argv"].index("--image") + 1]) \
            if "--image" in spec_json["argv"] else BUILD / "image"
        for name in ("vmlinux", "initrd.img", "rootfs.ext4"):
            if not (image / name).exists():
                pytest.fail(f"{image / name} is missing: run `make image` first")
    return spec_json


def write_spec(kernels_dir, name, base="cellvm", extra_argv=()):
    """A kernelspec `name` in kernels_dir: build's `base` spec with extra gateway arguments."""
    spec = require_build(base)
    spec = dict(spec, argv=list(spec["argv"]) + [str(a) for a in extra_argv],
                display_name=f"{spec['display_name']} ({name})")
    d = pathlib.Path(kernels_dir) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.json").write_text(json.dumps(spec, indent=1))
    return pathlib.Path(kernels_dir)


# --------------------------------------------------------------------------
# Processes

def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(pid):
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def proc(pid):
    """A psutil handle, which remembers the start time: killing through it never hits a
    process that later reused the pid."""
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_procs(procs):
    for p in procs:
        try:
            if p.is_running():
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def wait_dead(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    return not any(alive(p) for p in pids)


def cmdline(pid):
    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return []


def is_qemu(pid):
    argv = cmdline(pid)
    return bool(argv) and "qemu-system" in os.path.basename(argv[0])


def qemu_children(gateway_pid):
    try:
        kids = psutil.Process(gateway_pid).children()
    except psutil.NoSuchProcess:
        return []
    return [k.pid for k in kids if is_qemu(k.pid)]


def qemu_run_dir(qemu_pid):
    """The run dir named in a QEMU's argv (-serial file:R/console.log)."""
    for arg in cmdline(qemu_pid):
        if arg.startswith("file:") and arg.endswith("/console.log"):
            return pathlib.Path(arg[len("file:"):]).parent
    return None


# --------------------------------------------------------------------------
# What gateways leave behind

def leftovers(gateway_pids, base=None):
    """Everything on the host that belongs to these gateways' VMs. Empty when clean."""
    base = pathlib.Path(base) if base else run_base()
    prefixes = [str(base / f"vm-{pid}-") for pid in gateway_pids]
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info["cmdline"] or []
        if argv and "qemu-system" in os.path.basename(argv[0]):
            text = " ".join(argv)
            if any(pre in text for pre in prefixes):
                found.append(f"qemu pid {p.info['pid']}: {text[:200]}")
    if base.exists():
        for d in base.iterdir():
            if any(str(d).startswith(pre) for pre in prefixes):
                found.append(f"run dir {d}: {sorted(x.name for x in d.iterdir()) if d.is_dir() else '?'}")
    try:
        with open("/proc/net/unix") as f:
            for line in f.read().splitlines()[1:]:
                parts = line.split()
                if len(parts) >= 8 and any(parts[7].startswith(pre) for pre in prefixes):
                    found.append(f"unix socket {parts[7]}")
    except OSError:
        pass
    for pre in prefixes:
        for q in pathlib.Path(pre).parent.glob(pathlib.Path(pre).name + "*/**/*.qcow2"):
            found.append(f"qcow2 {q}")
    return found


def wait_no_leftovers(gateway_pids, timeout=10, base=None):
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(gateway_pids, base)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# --------------------------------------------------------------------------
# Sessions

class CellResult:
    def __init__(self, msg_id, reply, msgs, t_sent):
        self.msg_id, self.reply, self.msgs, self.t_sent = msg_id, reply, msgs, t_sent

    @property
    def content(self):
        return self.reply["content"] if self.reply else {}

    @property
    def status(self):
        return self.content.get("status")

    @property
    def stdout(self):
        return "".join(m["content"]["text"] for m in self.msgs
                       if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")

    @property
    def errors(self):
        return [m for m in self.msgs if m["msg_type"] == "error"]

    def probe(self):
        """The JSON a probe cell printed after PROBE_MARK."""
        for line in self.stdout.splitlines():
            if line.startswith(PROBE_MARK):
                return json.loads(line[len(PROBE_MARK):])
        raise AssertionError(f"the cell printed no probe result: status={self.status} "
                             f"content={self.content} stdout={self.stdout[-2000:]!r}")

    def describe(self):
        return (f"status={self.status} ename={self.content.get('ename')} "
                f"evalue={self.content.get('evalue')!r} stdout={self.stdout[-1500:]!r}")


class Session:
    """One gateway + kernel client, started with KernelManager from a kernelspec."""

    def __init__(self, kernel_name="cellvm", kernel_dirs=None, log_path=None, env=None):
        require_build(kernel_name if kernel_dirs is None else "cellvm")
        # Our kernelspecs explicitly (not whatever JUPYTER_PATH holds), extra dirs first.
        dirs = [str(d) for d in (kernel_dirs or [])] + [str(SPECS)]
        self.name = kernel_name
        self.km = KernelManager(kernel_name=kernel_name,
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=dirs))
        self.kc = None
        self.env = env                  # extra environment for the gateway, on top of ours
        self.log_path = pathlib.Path(log_path) if log_path else None
        self._log = None
        self.gateway_pid = None
        self.procs = {}                 # pid -> psutil.Process: everything started, for close()

    def start(self):
        kw = {"env": dict(os.environ, **(self.env or {}))}
        if self.log_path:
            self._log = open(self.log_path, "ab")
            kw.update(stdout=self._log, stderr=subprocess.STDOUT)
        self.km.start_kernel(**kw)
        self.gateway_pid = self.km.provisioner.pid
        self._remember([self.gateway_pid])
        self.kc = self.km.client()
        self.kc.start_channels()
        return self

    def wait_ready(self, timeout=READY_TIMEOUT):
        t0 = time.monotonic()
        self.kc.wait_for_ready(timeout=timeout)
        self.track()
        return time.monotonic() - t0

    def _remember(self, pids):
        for pid in pids:
            if pid not in self.procs or not self.procs[pid].is_running():
                p = proc(pid)
                if p:
                    self.procs[pid] = p

    def track(self):
        if self.gateway_pid:
            self._remember(descendants(self.gateway_pid))

    def log_text(self):
        if not self.log_path:
            return ""
        if self._log and not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    @property
    def connection_info(self):
        return self.km.get_connection_info()

    def qemu_pid(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            q = qemu_children(self.gateway_pid)
            if q:
                self._remember(q)
                return q[0]
            time.sleep(0.05)
        raise AssertionError(f"gateway {self.gateway_pid} has no qemu-system child")

    def run_dir(self):
        return qemu_run_dir(self.qemu_pid())

    # --- cells ----------------------------------------------------------
    def send(self, code, **kw):
        return self.kc.execute(code, **kw), time.monotonic()

    def collect(self, msg_id, timeout, t_sent=None):
        """iopub messages for msg_id up to its idle, and its execute_reply."""
        deadline = time.monotonic() + timeout
        msgs, reply = [], None
        idle = False
        while not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no idle for {msg_id} within {timeout} s; got "
                                     f"{[m['msg_type'] for m in msgs]}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 1))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            msg["t_recv"] = time.monotonic()
            msgs.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        while reply is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no execute_reply for {msg_id} within {timeout} s")
            try:
                msg = self.kc.get_shell_msg(timeout=min(left, 1))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                msg["t_recv"] = time.monotonic()
                reply = msg
        return CellResult(msg_id, reply, msgs, t_sent)

    def run(self, code, timeout=120):
        msg_id, t = self.send(code)
        return self.collect(msg_id, timeout, t)

    def probe(self, code, timeout=120):
        r = self.run(code, timeout)
        assert r.status == "ok", f"probe cell failed: {r.describe()}"
        return r.probe()

    def control(self, msg_type, content=None, buffers=None, timeout=30):
        msg = self.kc.session.msg(msg_type, content or {})
        self.kc.session.send(self.kc.control_channel.socket, msg, buffers=buffers or [])
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no control reply to {msg_type} within {timeout} s")
            try:
                rep = self.kc.get_control_msg(timeout=min(left, 1))
            except queue.Empty:
                continue
            if rep["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return rep

    def drain_iopub(self):
        out = []
        while True:
            try:
                out.append(self.kc.get_iopub_msg(timeout=0.2))
            except queue.Empty:
                return out

    # --- teardown -------------------------------------------------------
    def close(self):
        self.track()
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:
                pass
        try:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=False)
        except Exception:
            pass
        self.track()
        kill_procs(self.procs.values())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_running(p) for p in self.procs.values()):
            time.sleep(0.02)
        try:
            self.km.cleanup_resources()
        except Exception:
            pass
        if self._log:
            self._log.close()


def host_probe(code, env=None, timeout=300, cwd=None):
    """Run a probe's code with the host's Python; return its JSON result."""
    p = subprocess.run([HOST_PYTHON, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=cwd)
    for line in p.stdout.splitlines():
        if line.startswith(PROBE_MARK):
            return json.loads(line[len(PROBE_MARK):])
    raise AssertionError(f"host probe printed no result (rc={p.returncode}): "
                         f"{p.stdout[-1000:]} {p.stderr[-2000:]}")
