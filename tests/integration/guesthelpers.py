"""What test_hostile_guest.py and test_frozen_guest.py share: a session whose "VM" is
tests/integration/hostile_qemu.py (a fake QEMU that plays a guest and misbehaves on request),
and waiting for things with generous bounds.

The fake QEMU is a Python script, so these gateways run with `--jail off` (the jail's minimal
root has no Python) and `--no-templates` (it cannot restore a snapshot): every VM is a cold boot
of the fake, and a kernel restart happens inside it.
"""
import os
import pathlib
import time

import psutil

import sessions
from sessions import HERE, Session

HOSTILE_QEMU = HERE / "hostile_qemu.py"
STALL_MS = 3000                 # CELLVM_STALL_MS for these gateways (default 30 s)
CONSOLE_MAX = 256 * 1024        # CELLVM_CONSOLE_MAX (default 16 MiB)
DETECT_S = 60                   # generous bound for "detected within": STALL_MS plus slack


def fake_vm_session(name=None, env=None, extra=()):
    """A started, ready Session whose VMs are hostile_qemu.py (closed by the caller)."""
    os.chmod(HOSTILE_QEMU, 0o755)
    e = {"CELLVM_STALL_MS": str(STALL_MS), "CELLVM_CONSOLE_MAX": str(CONSOLE_MAX)}
    e.update(env or {})
    s = Session("cellvm", name=name, env=e,
                extra_args=("--qemu", str(HOSTILE_QEMU), "--jail", "off", "--no-templates")
                + tuple(extra))
    s.env["HOSTILE_QEMU_LOG"] = str(s.dir / "hostile-qemu.log")
    try:
        s.start()
    except BaseException:
        s.close()
        raise
    return s


def fake_qemu_pid(s, timeout=DETECT_S, other_than=None):
    """The pid of the session's fake QEMU (a child of the gateway), other than other_than."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = psutil.Process(s.gateway_pid).children()
        except psutil.NoSuchProcess:
            kids = []
        for k in kids:
            try:
                if any("hostile_qemu" in a for a in k.cmdline()) and k.pid != other_than:
                    s.track([k.pid])
                    return k.pid
            except psutil.Error:
                pass
        time.sleep(0.05)
    raise AssertionError(f"gateway {s.gateway_pid} has no fake QEMU child (other than {other_than})")


def run_dir_of(pid):
    for a in psutil.Process(pid).cmdline():
        if a.startswith("file:") and a.endswith("/console.log"):
            return pathlib.Path(a[len("file:"):]).parent
    return None


# A cold boot runs `qemu-img create` on the reactor (gw_vm_start), which takes over 50 ms on a
# loaded host: the tests with fake VMs allow that turn (allow_slow_reactor) and check every other
# turn themselves with this.
SLOW_AT_BOOT = "a cold boot's qemu-img create runs on the reactor (--no-templates)"


def slow_turns(log):
    """event=reactor.slow lines that fail a test (sessions.slow_turn_fault) other than the one
    right after a cold boot's vm.booting."""
    lines = log.splitlines()
    return [ln for i, ln in enumerate(lines) if "event=reactor.slow" in ln
            and sessions.slow_turn_fault(ln)
            and not (i > 0 and "event=vm.booting" in lines[i - 1])]


def wait_log(s, text, timeout=DETECT_S):
    """Wait until the gateway's log holds text; the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = s.log_text()
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the gateway's log within {timeout} s")
