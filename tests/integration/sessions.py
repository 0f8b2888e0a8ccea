"""Sessions the way Jupyter clients start them, for every integration test: one factory, one set
of timeouts, one process tracker, one place for logs.

`Session(kernel, ...)` is one jupyter_client KernelManager (one cellvm-gateway, and with the
microvm backend one QEMU) plus its BlockingKernelClient. `kernel` is a kernelspec name
(`cellvm` = microvm, `cellvm-unsafe-local`, ...; KERNELS names them) or "fake": the gateway with
`--backend unsafe-local --kernel tests/integration/fake_kernel.py`. `extra_args` are appended to
the kernelspec's argv (a private copy of the spec is written), and `launcher` is put before it
(a program that execs the gateway). `start()` launches it and, unless
`wait=False`, waits READY_TIMEOUT for it to answer.

Every session
- records every pid it started (the gateway, its children, the QEMUs) as psutil handles, and
  `close()` shuts it down and then SIGKILLs, by pid, whatever is still there (never by name; a
  recycled pid is never hit);
- sends the gateway's stdout and stderr to a file of its own (`log_path`, `log_text()`);
- registers a `Logs` (that file, and the console.log of each of its VMs) in `LOGS`, which
  conftest.py reads to attach the logs of a failed test and to look for `event=reactor.slow`.

Nothing here skips: a missing build, kernelspec or guest image FAILS the test.

Also here: the process helpers (alive, wait_gone, qemu_children, qemu_run_dir, ...) and
`leftovers(gateway_pids)`, what those gateways left on the host (QEMU processes, run dirs, unix
sockets, qcow2 layers).
"""
import hashlib
import itertools
import json
import os
import pathlib
import queue
import re
import shutil
import subprocess
import tempfile
import time

import psutil
import pytest
import zmq
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

import firstuse

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()
IMAGE = pathlib.Path(os.environ.get("CELLVM_IMAGE", BUILD / "image")).resolve()
SPECS = BUILD / "share" / "jupyter" / "kernels"
GATEWAY = BUILD / "cellvm-gateway"
LAUNCH = BUILD / "cellvm-launch"               # what the kernelspecs run (docs/gateway.md)
FAKE_KERNEL = HERE / "fake_kernel.py"
HOST_PYTHON = "/usr/bin/python3"
IMAGE_FILES = ("vmlinux", "initrd.img", "rootfs.ext4")

# The timeouts, for every test. A cold microVM is ready in ~14 s under TCG, but several boot at
# once in some modules, on 2 busy cores: READY_TIMEOUT is for a session (or a VM) to answer at all.
# TIMEOUT is for anything else to happen: a cell to finish, a reply, a process to appear.
READY_TIMEOUT = 240
# How much slower than a plain build this one is: `make check` (ASan+UBSan) sets
# CELLVM_TIMING_SCALE; a test's bound on how fast something happens is multiplied by it.
TIMING_SCALE = float(os.environ.get("CELLVM_TIMING_SCALE", "1"))
TIMEOUT = 120

BACKENDS = {"unsafe-local": "cellvm-unsafe-local", "microvm": "cellvm"}

# The reactor watchdog (docs/gateway.md): every gateway the tests start logs each turn over
# CELLVM_WATCHDOG_MS (conftest sets 50) as event=reactor.slow, with where its time went. A turn
# fails its test on its own work on a CPU over WATCHDOG_MS, or on being blocked (a system call,
# a page fault from disk, a lock) over BLOCKED_MS. Blocked time under either bound is the host's:
# these 2-core machines run two tests, their VMs and the disk traffic of both.
WATCHDOG_MS = 50
BLOCKED_MS = 200
_TURN_FIELD = re.compile(r"\b(ms|cpu_ms|blocked_ms)=(\d+)")


def slow_turn_fault(line):
    """Why an event=reactor.slow line fails a test, in words; None when it is the host's."""
    f = {k: int(v) for k, v in _TURN_FIELD.findall(line)}
    if "cpu_ms" not in f:
        return f"a turn of {f.get('ms', '?')} ms (a gateway that does not say where it went)"
    if f["cpu_ms"] > WATCHDOG_MS:
        return f"{f['cpu_ms']} ms of the reactor's own work on a CPU, over {WATCHDOG_MS}"
    if f.get("blocked_ms", 0) > BLOCKED_MS:
        return f"the reactor blocked {f['blocked_ms']} ms, over {BLOCKED_MS}"
    return None
KERNELS = dict(BACKENDS, fake="fake")
PROBE_MARK = "@@CELLVM-PROBE@@"

# Where sessions keep their logs; conftest points it into pytest's basetemp.
LOG_ROOT = None


def log_root():
    global LOG_ROOT
    if LOG_ROOT is None:
        LOG_ROOT = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-test-logs-"))
    LOG_ROOT = pathlib.Path(LOG_ROOT)
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    return LOG_ROOT


# --------------------------------------------------------------------------
# Logs of everything started: gateway logs and VM consoles

LOGS = []                 # every Logs ever registered, in order
_SESSIONS = []            # every Session made, for close_all()


def _safe(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120] or "x"


class Logs:
    """What one started thing writes: a gateway's log file and the console logs of its VMs.

    Console logs live in run dirs that go away with their VM, so `close()` (and `save()`) keep a
    copy. `new_lines()` hands out each complete line of the gateway log once (conftest scans them
    for `event=reactor.slow`)."""

    def __init__(self, name, gateway_log=None, consoles=(), refresh=None):
        self.index = len(LOGS)
        self.name = name
        self.dir = log_root() / f"{self.index:03d}-{_safe(name)}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.gateway_log = pathlib.Path(gateway_log) if gateway_log else None
        self.console_paths = []
        self.saved = {}
        self.closed = False
        self.refresh = refresh       # called before reading: finds consoles that appeared
        self._scanned = 0
        self._done = False           # closed, and every line handed out
        for c in consoles:
            self.add_console(c)
        LOGS.append(self)

    def add_console(self, path):
        path = pathlib.Path(path)
        if path not in self.console_paths:
            self.console_paths.append(path)

    def update(self):
        if self.refresh and not self.closed:
            try:
                self.refresh()
            except Exception:       # a session half torn down: keep what we know
                pass

    def save(self):
        """Copy every console log that still exists next to the gateway log."""
        for i, p in enumerate(self.console_paths):
            try:
                if p.exists():
                    dst = self.dir / f"console-{i}-{_safe(p.parent.name)}.log"
                    shutil.copyfile(p, dst)
                    self.saved[p] = dst
            except OSError:
                pass

    def consoles(self):
        """The console logs: live where the VM still runs, else the copy kept."""
        out = []
        for p in self.console_paths:
            if p.exists():
                out.append(p)
            elif p in self.saved:
                out.append(self.saved[p])
        return out

    def files(self):
        gw = [self.gateway_log] if self.gateway_log and self.gateway_log.exists() else []
        return gw + self.consoles()

    def new_lines(self):
        """Complete lines of the gateway log not handed out before (the last partial line too
        once closed)."""
        if not self.gateway_log or self._done:
            return []
        closed = self.closed
        try:
            with open(self.gateway_log, "rb") as f:
                f.seek(self._scanned)
                data = f.read()
        except OSError:
            return []
        if closed:
            self._done = True
        else:
            data = data[:data.rfind(b"\n") + 1]
        self._scanned += len(data)
        return data.decode("utf-8", "replace").splitlines()

    def close(self):
        self.update()
        self.save()
        self.closed = True


def close_all():
    """Close (and kill by pid) every session still open: the suite's last safety net."""
    for s in list(_SESSIONS):
        if not s.closed:
            try:
                s.close()
            except Exception:
                pass


# --------------------------------------------------------------------------
# Processes

def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pid):
    return not alive(pid)


def wait_gone(pids, timeout):
    """True once every pid is gone (or a zombie) within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.02)
    return all(gone(p) for p in pids)


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


def running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_procs(procs):
    """SIGKILL psutil.Processes that still run."""
    for p in procs:
        try:
            if p.is_running():
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def wait_procs_gone(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p) for p in procs):
        time.sleep(0.02)
    return not any(running(p) for p in procs)


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


def run_base():
    """Where the microvm backend puts its run dirs by default (docs/vm.md)."""
    return pathlib.Path(f"/var/tmp/cellvm-{os.getuid()}")


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


def probe_result(text, missing):
    """The JSON after PROBE_MARK on the first line of text that starts with it;
    AssertionError(missing) when no line does."""
    for line in text.splitlines():
        if line.startswith(PROBE_MARK):
            return json.loads(line[len(PROBE_MARK):])
    raise AssertionError(missing)


def host_probe(code, env=None, timeout=300, cwd=None):
    """Run a probe's code with the host's Python; return its JSON result."""
    p = subprocess.run([HOST_PYTHON, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=cwd)
    return probe_result(p.stdout, f"host probe printed no result (rc={p.returncode}): "
                                  f"{p.stdout[-1000:]} {p.stderr[-2000:]}")


# --------------------------------------------------------------------------
# Kernelspecs

def backend_of(argv):
    return argv[argv.index("--backend") + 1] if "--backend" in argv else None


def kernel_spec(name, kernel_dirs=None):
    """The kernelspec `name`, from kernel_dirs or the build's. Fails (never skips) when it is
    missing, when its program is, and for a microvm spec when the guest image it names is."""
    dirs = [str(d) for d in (kernel_dirs or [])] + [str(SPECS)]
    try:
        spec = KernelSpecManager(kernel_dirs=dirs).get_kernel_spec(name)
    except NoSuchKernel:
        pytest.fail(f"kernelspec {name!r} not found in {dirs}: run `make`", pytrace=False)
    argv = spec.argv
    if os.path.isabs(argv[0]) and not pathlib.Path(argv[0]).exists():
        pytest.fail(f"kernelspec {name!r}: {argv[0]} is missing: run `make`", pytrace=False)
    if backend_of(argv) == "microvm":
        image = pathlib.Path(argv[argv.index("--image") + 1]) if "--image" in argv \
            else pathlib.Path(argv[0]).parent / "image"
        for f in IMAGE_FILES:
            if not (image / f).exists():
                pytest.fail(f"kernelspec {name!r}: guest image file {image / f} is missing: "
                            f"run `make image`", pytrace=False)
    return spec


def require_image(image=IMAGE):
    for f in IMAGE_FILES:
        if not (pathlib.Path(image) / f).exists():
            pytest.fail(f"guest image file {pathlib.Path(image) / f} is missing: run `make image`",
                        pytrace=False)


# --------------------------------------------------------------------------
# Cells

class CellResult:
    """One execute_request: its reply and its iopub messages up to idle (each with t_recv)."""

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
    def streams(self):
        """All stream text (stdout and stderr), in arrival order."""
        return "".join(m["content"]["text"] for m in self.msgs if m["msg_type"] == "stream")

    @property
    def errors(self):
        return [m for m in self.msgs if m["msg_type"] == "error"]

    def of_type(self, msg_type):
        return [m for m in self.msgs if m["msg_type"] == msg_type]

    def results(self):
        """text/plain of each execute_result."""
        return [m["content"]["data"]["text/plain"] for m in self.of_type("execute_result")]

    def probe(self):
        """The JSON a probe cell printed after PROBE_MARK."""
        return probe_result(self.stdout, f"the cell printed no probe result: status={self.status} "
                                         f"content={self.content} stdout={self.stdout[-2000:]!r}")

    def describe(self):
        return (f"status={self.status} ename={self.content.get('ename')} "
                f"evalue={self.content.get('evalue')!r} stdout={self.stdout[-1500:]!r}")


def collect(kc, msg_id, timeout=TIMEOUT, t_sent=None, stdin_hook=None):
    """iopub messages for msg_id up to its idle, and its execute_reply. stdin_hook(msg) is
    called with each input_request of that cell."""
    deadline = time.monotonic() + timeout
    msgs, reply = [], None
    idle = False
    while not idle:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no idle for {msg_id} within {timeout} s; got "
                                 f"{[m['msg_type'] for m in msgs]}")
        if stdin_hook is not None:
            try:
                req = kc.get_stdin_msg(timeout=0)
            except queue.Empty:
                pass
            else:
                if req["parent_header"].get("msg_id") == msg_id:
                    stdin_hook(req)
        try:
            msg = kc.get_iopub_msg(timeout=min(left, 0.05 if stdin_hook else 1))
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
            msg = kc.get_shell_msg(timeout=min(left, 1))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            msg["t_recv"] = time.monotonic()
            reply = msg
    return CellResult(msg_id, reply, msgs, t_sent)


def run_cell(kc, code, timeout=TIMEOUT, stdin_hook=None):
    """Execute code on any client; a CellResult. stdin is allowed only with a stdin_hook."""
    t = time.monotonic()
    msg_id = kc.execute(code, allow_stdin=stdin_hook is not None)
    return collect(kc, msg_id, timeout, t, stdin_hook)


# --------------------------------------------------------------------------
# Sessions

_serial = itertools.count(1)


class Session:
    """One gateway and its kernel client, started with KernelManager from a kernelspec."""

    def __init__(self, kernel="cellvm", *, extra_args=(), image=None, env=None, cwd=None,
                 key=None, name=None, log_path=None, launcher=(), ip=None):
        self.kernel = kernel
        self.name = name or f"{kernel}-{next(_serial)}"
        self.env = env                  # extra environment for the gateway, on top of ours
        self.cwd = cwd
        self.procs = {}                 # pid -> psutil.Process: everything started, for close()
        self.logs = Logs(self.name, refresh=self._find_consoles)
        self.dir = self.logs.dir
        self.log_path = pathlib.Path(log_path) if log_path else self.dir / "gateway.log"
        self.logs.gateway_log = self.log_path
        self.fake_log = self.dir / "fake-kernel.log" if kernel == "fake" else None
        dirs = []
        try:
            if kernel == "fake" or extra_args or image or launcher:
                spec_name = self._write_spec(kernel, extra_args, image, launcher)
                dirs = [self.dir / "kernels"]
            else:
                spec_name = kernel
            self.spec = kernel_spec(spec_name, dirs)
        except BaseException:
            self.logs.close()           # nothing was started
            raise
        self.backend = backend_of(self.spec.argv)
        self.kind = "fake" if kernel == "fake" else (self.backend or kernel)
        ksm = KernelSpecManager(kernel_dirs=[str(d) for d in dirs] + [str(SPECS)])
        self.km = KernelManager(kernel_name=spec_name, kernel_spec_manager=ksm)
        if key is not None:
            self.km.session.key = key
        # ip: a test host's address (tests/cluster/hosts.py). jupyter_client launches only on
        # local addresses, so the gateway binds every address of its host (0.0.0.0 in the
        # host's namespace) and the client connects to the host's.
        self.client_ip = ip
        if ip is not None:
            self.km.ip = "0.0.0.0"
        self.kc = None
        self.ready_s = None
        self.closed = False
        self._log = None
        self._ctx = None
        _SESSIONS.append(self)

    def _write_spec(self, kernel, extra_args, image, launcher=()):
        if kernel == "fake":
            if not GATEWAY.exists():
                pytest.fail(f"{GATEWAY} is missing: run `make`", pytrace=False)
            spec = {"argv": [str(GATEWAY), "--connection-file", "{connection_file}",
                             "--backend", "unsafe-local", "--kernel", str(FAKE_KERNEL)],
                    "display_name": "fake", "language": "python", "interrupt_mode": "message"}
        else:
            base = kernel_spec(kernel)
            spec = json.loads((pathlib.Path(base.resource_dir) / "kernel.json").read_text())
        argv = list(spec["argv"])
        if image:
            if "--image" in argv:
                argv[argv.index("--image") + 1] = str(image)
            else:
                argv += ["--image", str(image)]
        # launcher: a program that execs the gateway (careless_launcher.py), so the same pid
        spec["argv"] = [str(a) for a in launcher] + argv + [str(a) for a in extra_args]
        spec["display_name"] = f"{spec['display_name']} ({self.name})"
        name = f"cellvm-test-{_safe(self.name).lower()}"
        d = self.dir / "kernels" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "kernel.json").write_text(json.dumps(spec, indent=1))
        return name

    # --- lifecycle ------------------------------------------------------
    def start(self, wait=True, timeout=READY_TIMEOUT):
        """Launch the gateway (its output to log_path) and connect a client; with wait, also
        wait until it answers. Returns self."""
        env = dict(os.environ, **(self.env or {}))
        if self.fake_log:
            env.setdefault("FAKE_KERNEL_LOG", str(self.fake_log))
        elif self.backend == "unsafe-local":
            firstuse.ensure(env)    # the kernel runs on the host, with this HOME
        self._log = open(self.log_path, "ab")
        kw = {"env": env, "stdout": self._log, "stderr": subprocess.STDOUT}
        if self.cwd:
            kw["cwd"] = str(self.cwd)
        self._t0 = time.monotonic()
        self.km.start_kernel(**kw)
        self.track()
        if self.client_ip:              # and the manager's own control socket (shutdown)
            self.km.ip = self.client_ip
            self.km._close_control_socket()
            self.km._connect_control_socket()
        self.kc = self.km.client()
        self.kc.start_channels()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=READY_TIMEOUT):
        """Wait until the kernel answers; the seconds this took."""
        t0 = time.monotonic()
        self.kc.wait_for_ready(timeout=timeout)
        self.track()
        self.ready_s = time.monotonic() - self._t0
        return time.monotonic() - t0

    @property
    def gateway_pid(self):
        return self.km.provisioner.pid if self.km.provisioner else None

    @property
    def proc(self):
        """The gateway's Popen (the client launched it)."""
        return self.km.provisioner.process if self.km.provisioner else None

    @property
    def connection_info(self):
        return self.km.get_connection_info()

    @property
    def key(self):
        return self.km.session.key

    def track(self, pids=()):
        """Remember the gateway, everything below it, and pids: close() kills them."""
        pid = self.gateway_pid
        for p in ([pid] + descendants(pid) if pid else []) + list(pids):
            if p not in self.procs or not self.procs[p].is_running():
                h = proc(p)
                if h:
                    self.procs[p] = h
        self._find_consoles()

    def _find_consoles(self):
        for p in list(self.procs.values()):
            try:
                if running(p) and is_qemu(p.pid):
                    d = qemu_run_dir(p.pid)
                    if d:
                        self.logs.add_console(d / "console.log")
            except psutil.Error:
                pass
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return
        for m in re.finditer(r"event=vm\.(?:spawned|from_pool)\b.*?\b(?:run_dir|dir)=(\S+)", text):
            self.logs.add_console(pathlib.Path(m.group(1).strip('"')) / "console.log")

    def qemu_pid(self, timeout=TIMEOUT):
        """The session's QEMU (a child of the gateway)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            q = qemu_children(self.gateway_pid)
            if q:
                self.track(q)
                return q[0]
            time.sleep(0.05)
        raise AssertionError(f"gateway {self.gateway_pid} has no qemu-system child")

    def kernel_pid(self, timeout=TIMEOUT):
        """The kernel process of an unsafe-local gateway (the fake kernel or the real one)."""
        assert self.backend == "unsafe-local", f"{self.name} has no kernel process on the host"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                kids = psutil.Process(self.gateway_pid).children()
            except psutil.NoSuchProcess:
                kids = []
            if kids:
                self.track([kids[0].pid])
                return kids[0].pid
            time.sleep(0.02)
        raise AssertionError(f"gateway {self.gateway_pid} has no kernel child")

    def run_dir(self):
        return qemu_run_dir(self.qemu_pid())

    def alive(self):
        """The gateway runs and answers a cell."""
        if not self.km.has_kernel or self.gateway_pid is None or gone(self.gateway_pid):
            return False
        try:
            r = self.run("1 + 1")
        except Exception:
            return False
        return r.status == "ok"

    # --- cells ----------------------------------------------------------
    def send(self, code, **kw):
        """Send an execute_request; (msg_id, monotonic time sent)."""
        return self.kc.execute(code, **kw), time.monotonic()

    def collect(self, msg_id, timeout=TIMEOUT, t_sent=None, stdin_hook=None):
        return collect(self.kc, msg_id, timeout, t_sent, stdin_hook)

    def run(self, code, timeout=TIMEOUT, stdin_hook=None):
        """Execute code; a CellResult (the reply, the iopub messages up to idle)."""
        return run_cell(self.kc, code, timeout, stdin_hook)

    def value(self, code, timeout=TIMEOUT):
        """The text/plain result of a cell that must succeed."""
        r = self.run(code, timeout)
        assert r.status == "ok", r.content
        res = r.results()
        assert len(res) == 1, r.msgs
        return res[0]

    def output(self, code, timeout=TIMEOUT):
        """The stream output (stdout and stderr) of a cell that must succeed."""
        r = self.run(code, timeout)
        assert r.status == "ok", r.describe()
        return r.streams

    def probe(self, code, timeout=TIMEOUT):
        r = self.run(code, timeout)
        assert r.status == "ok", f"probe cell failed: {r.describe()}"
        return r.probe()

    def control(self, msg_type, content=None, buffers=None, timeout=TIMEOUT):
        """Send a control request (with buffers); its reply."""
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

    # --- raw access -----------------------------------------------------
    def endpoint(self, channel):
        ci = self.connection_info
        return f"{ci['transport']}://{ci['ip']}:{ci[channel + '_port']}"

    @property
    def ctx(self):
        if self._ctx is None:
            self._ctx = zmq.Context()
        return self._ctx

    def dealer(self, channel="shell"):
        """A raw DEALER on one of the session's ROUTER channels (closed with the session)."""
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IDENTITY, os.urandom(16).hex().encode())
        s.connect(self.endpoint(channel))
        return s

    def log_text(self):
        if self._log and not self._log.closed:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kernel_requests(self):
        """fake kernel: one "channel msg_type msg_id" line per message it received."""
        if not self.fake_log or not self.fake_log.exists():
            return []
        return self.fake_log.read_text().split("\n")

    # --- teardown -------------------------------------------------------
    def close(self):
        """Shut down as a client does, then SIGKILL by pid whatever is still there."""
        if self.closed:
            return
        self.closed = True
        try:
            self.track()
        except Exception:
            pass
        self.logs.save()                # consoles go with their run dirs
        if self.kc is not None:
            try:
                stop_channels(self.kc)
            except Exception:
                pass
            # jupyter_client gives each client a zmq context of its own (two threads, five
            # fds) and frees it only in __del__, which a kept Session never reaches.
            if getattr(self.kc, "_created_context", False) and not self.kc.context.closed:
                self.kc.context.destroy(linger=0)
        try:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=False)
        except Exception:
            pass
        kill_procs(self.procs.values())
        wait_procs_gone(list(self.procs.values()), 5)
        try:
            self.km.cleanup_resources()
        except Exception:
            pass
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
        if self._log:
            self._log.close()
        self.logs.close()


def stop_channels(kc):
    """kc.stop_channels(), once its heartbeat thread is under way. jupyter_client's HBChannel sets
    _running only after its first socket: a stop before that is undone, and the thread then makes
    sockets without pause until its context has no more (EMFILE in a thread, late in a run)."""
    hb = kc._hb_channel
    deadline = time.monotonic() + 2
    while hb is not None and hb.is_alive() and not hb._running and time.monotonic() < deadline:
        time.sleep(0.005)
    kc.stop_channels()


def start_session(kernel="cellvm", **kw):
    """Session(kernel, **kw), started and ready; closed again (killed by pid) if it never was."""
    s = Session(kernel, **kw)
    try:
        return s.start()
    except BaseException:
        s.close()
        raise


# --------------------------------------------------------------------------
# Sessions that outlive a process (docs/sessions.md): identities, the `cellvm` CLI, snapshots.
# Only used by test_sessions_*.py; nothing above depends on them.

CELLVM = BUILD / "cellvm"
# A cell's prelude that names the session's workspace in WS on either backend: /workspace in a
# VM, a private directory of the gateway's with unsafe-local (the parent of CELLVM_OUTDIR).
WS = "import os\nWS = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"


def session_identity(connection_file, key):
    """The session's identity as the gateway computes it (gw_keep.h): the first 24 hex characters
    of SHA-256 over realpath(connection_file) "\\n" key."""
    import hashlib
    if isinstance(key, bytes):
        key = key.decode()
    text = os.path.realpath(connection_file) + "\n" + key
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def open_session(kernel="cellvm", name=None, args=(), wait=True, **kw):
    """A started Session of kernel with args (made text) appended to its argv; closed (killed
    by pid) when its start fails."""
    s = Session(kernel, name=name, extra_args=[str(a) for a in args], **kw)
    try:
        s.start(wait=wait)
    except BaseException:
        s.close()
        raise
    return s


def identity_of(s):
    """The identity of a Session's gateway."""
    return session_identity(s.km.connection_file, s.key)


def sha_file(path):
    """SHA-256 (hex) of a file, read a MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ram_digest(path):
    """A snapshot RAM file's digest as meta.json's ram_digest (gateway/snap/gw_snapram.h):
    SHA-256 over each 64 KiB chunk that is not all zero, after its offset (8 bytes, big
    endian)."""
    h, zero, off = hashlib.sha256(), bytes(64 << 10), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(64 << 10), b""):
            if chunk != zero[:len(chunk)]:
                h.update(off.to_bytes(8, "big") + chunk)
            off += len(chunk)
    return h.hexdigest()


def cellvm_cli(*args, timeout=TIMEOUT):
    """Run build/cellvm; its CompletedProcess (text)."""
    if not CELLVM.exists():
        pytest.fail(f"{CELLVM} is missing: run `make`", pytrace=False)
    return subprocess.run([str(CELLVM), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def snapshot_list(store):
    """{name: item} of `cellvm snapshot ls --json --snapshot-dir store`."""
    r = cellvm_cli("snapshot", "ls", "--json", "--snapshot-dir", store)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return {item["name"]: item for item in json.loads(r.stdout)}


def session_status(gateway_pid, base=None):
    """The entry of `cellvm ls --json` for this gateway pid, or None."""
    args = ["ls", "--json"] + (["--run-base", base] if base else [])
    r = cellvm_cli(*args)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    found = [x for x in json.loads(r.stdout) if x.get("pid") == gateway_pid]
    return found[0] if found else None


def snapshot_request(s, name=None, content=None, timeout=600):
    """cellvm_snapshot_request on the session's control channel; the reply message. content
    overrides the request's content ({"name": name} or {})."""
    if content is None:
        content = {} if name is None else {"name": name}
    msg = s.kc.session.msg("cellvm_snapshot_request", content)
    s.kc.session.send(s.kc.control_channel.socket, msg)
    deadline = time.monotonic() + timeout
    while True:
        if s.proc is not None and s.proc.poll() is not None:
            raise AssertionError(f"the gateway exited (status {s.proc.returncode}) before "
                                 f"answering cellvm_snapshot_request:\n{s.log_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no reply to cellvm_snapshot_request within {timeout} s")
        try:
            rep = s.kc.get_control_msg(timeout=1)
        except queue.Empty:
            continue
        if rep["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return rep


def store_tree(store):
    """{relative path: (size, mtime_ns, mode)} of everything under store (symlinks not
    followed): what a test compares to show the store was not touched."""
    out = {}
    store = pathlib.Path(store)
    if not store.exists():
        return out
    for p in sorted(store.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(store))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _kernel_info_ok(s, timeout):
    """A kernel_info round trip answered with status ok (False: an error, or no answer)."""
    try:
        r = s.kc.kernel_info(reply=True, timeout=timeout)
    except (TimeoutError, queue.Empty):
        return False
    return r["content"].get("status") == "ok"


def wait_ready_or_exit(s, timeout=READY_TIMEOUT):
    """Wait until the session answers (True) or its gateway exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.proc is not None and s.proc.poll() is not None:
            return False
        try:
            s.kc.wait_for_ready(timeout=min(5, max(1, deadline - time.monotonic())))
        except RuntimeError:
            if s.proc is not None and s.proc.poll() is not None:
                return False
            continue
        # jupyter_client's wait_for_ready takes any kernel_info_reply, and a gateway that gives
        # up answers the pending one with status error (KernelStartFailed), then exits.
        if not _kernel_info_ok(s, timeout=min(10, max(1, deadline - time.monotonic()))):
            if s.proc is not None:
                try:
                    s.proc.wait(timeout=max(1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            continue
        s.track()
        return True
    raise AssertionError(f"{s.name}: neither ready nor exited within {timeout} s")
