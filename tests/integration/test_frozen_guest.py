"""A frozen or runaway guest is detected in bounded time, explained, and the session goes on with
a new kernel or VM (docs/security.md, "Hostile and frozen guests").

- QEMU stopped with SIGSTOP (the fake VM of hostile_qemu.py, and a real microVM): the gateway's
  pings of init go unanswered for CELLVM_STALL_MS, it stops the VM, the running cell's error
  says why, and a new VM runs the next cell.
- A kernel that stops reading its port (the fake's kernel, and a real kernel stopped with
  SIGSTOP from its own cell): what the gateway sends it waits in the gateway's queue; after
  CELLVM_STALL_MS the kernel is stopped and restarted inside the same VM.
- A guest that floods its console: console.log is cut back past CELLVM_CONSOLE_MAX (its tail
  kept in console.log.1), and more than four times that in a minute stops the VM.

Each test first shows that its probe produced the state it looks for (QEMU really stopped,
bytes really waiting, the console really growing), then the gateway's reaction. Bounds are
generous (DETECT_S); CELLVM_STALL_MS is 3 s for the fake VMs and 10 s for the real one.
"""
import os
import signal
import time

import psutil
import pytest

from guesthelpers import (CONSOLE_MAX, DETECT_S, SLOW_AT_BOOT, fake_qemu_pid, fake_vm_session,
                          run_dir_of, slow_turns)
from sessions import collect, require_image, start_session, wait_gone


def _state(pid):
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"


def _stop(pid):
    """SIGSTOP pid and wait until it is stopped (a multi-threaded QEMU takes a moment)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while _state(pid) != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.02)
    return _state(pid)


@pytest.fixture
def vm():
    s = fake_vm_session()
    yield s
    try:
        assert not slow_turns(s.log_text()), slow_turns(s.log_text())
    finally:
        s.close()


@pytest.mark.allow_slow_reactor(reason=SLOW_AT_BOOT)
def test_a_stopped_qemu_is_detected_and_replaced(vm):
    qemu = fake_qemu_pid(vm)
    msg_id, t0 = vm.send("import time; time.sleep(600)")
    time.sleep(0.5)
    assert _stop(qemu) == psutil.STATUS_STOPPED             # the probe: QEMU is frozen
    r = collect(vm.kc, msg_id, timeout=DETECT_S)
    assert time.monotonic() - t0 < DETECT_S
    assert r.status == "error" and r.content["ename"] == "KernelDied", r.describe()
    assert "has not answered a status request" in r.content["evalue"], r.content["evalue"]
    assert "stopped by the gateway" in r.content["evalue"]
    assert wait_gone([qemu], 10)
    assert "event=vm.stopped" in vm.log_text()
    vm.wait_ready()
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) != qemu


def _big_cells(s, n=3, size=1 << 20):
    """n execute_requests of size bytes each, sent without waiting."""
    return [s.send("x = '" + "y" * size + "'")[0] for _ in range(n)]


@pytest.mark.allow_slow_reactor(reason=SLOW_AT_BOOT)
def test_a_kernel_that_stops_reading_its_port_is_stopped(vm):
    qemu = fake_qemu_pid(vm)
    msg_id, t0 = vm.send("%hostile kernel_deaf")
    time.sleep(0.5)
    _big_cells(vm)
    r = collect(vm.kc, msg_id, timeout=DETECT_S)
    assert r.status == "error" and r.content["ename"] == "KernelDied", r.describe()
    assert "stopped reading its channel" in r.content["evalue"], r.content["evalue"]
    log = vm.log_text()
    assert "event=kernel.stalled" in log
    waited = int(log.split("event=kernel.stalled")[1].split(": ")[1].split(" bytes")[0])
    assert waited > 0                                   # the probe: bytes really waited
    vm.wait_ready()
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) == qemu                    # restarted inside the same VM


@pytest.mark.allow_slow_reactor(reason=SLOW_AT_BOOT)
def test_a_console_flood_is_capped_and_stops_the_vm(vm):
    qemu = fake_qemu_pid(vm)
    console = run_dir_of(qemu) / "console.log"
    msg_id, _ = vm.send("%hostile console_flood")
    biggest, rotated = 0, False
    deadline = time.monotonic() + DETECT_S
    while time.monotonic() < deadline and _state(qemu) not in ("gone", psutil.STATUS_ZOMBIE):
        try:
            biggest = max(biggest, console.stat().st_size)
            rotated |= (console.parent / "console.log.1").exists()
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    r = collect(vm.kc, msg_id, timeout=DETECT_S)
    assert r.status == "error", r.describe()
    assert "to its console" in r.content["evalue"] and "a flood" in r.content["evalue"], r.content
    log = vm.log_text()
    assert "event=vm.console_rotated" in log and rotated  # the probe: it did grow past the cap
    assert "event=vm.console_uncapped" not in log
    # The flood writes ~1.3 MB/s and the gateway looks every 250 ms: the file never gets far
    # past the cap (without the cap it grows until the VM's 1 GiB file size limit).
    assert CONSOLE_MAX / 2 < biggest < CONSOLE_MAX + (1 << 20), biggest
    vm.wait_ready()
    assert vm.run("1 + 1").results() == ["2"]


# --------------------------------------------------------------------------
# The real microVM (a jailed QEMU restored from the template).

@pytest.fixture
def real():
    require_image()
    s = start_session("cellvm", env={"CELLVM_STALL_MS": "10000", "CELLVM_CONSOLE_MAX": "65536"})
    yield s
    s.close()


@pytest.mark.slow
def test_a_stopped_real_microvm_is_detected_and_replaced(real):
    assert real.run("1 + 1").results() == ["2"]
    qemu = real.qemu_pid()
    msg_id, t0 = real.send("import time; time.sleep(600)")
    time.sleep(1)
    assert _stop(qemu) == psutil.STATUS_STOPPED
    r = collect(real.kc, msg_id, timeout=DETECT_S)
    assert time.monotonic() - t0 < DETECT_S
    assert r.status == "error" and r.content["ename"] == "KernelDied", r.describe()
    assert "has not answered a status request" in r.content["evalue"], r.content["evalue"]
    assert wait_gone([qemu], 10)
    real.wait_ready()
    assert real.run("1 + 1").results() == ["2"]


@pytest.mark.slow
def test_a_real_kernel_that_stops_reading_is_stopped_and_restarted(real):
    real.qemu_pid()                                     # tracked, for close()
    msg_id, _ = real.send("import os, signal; os.kill(os.getpid(), signal.SIGSTOP)")
    time.sleep(2)
    _big_cells(real, n=4)
    r = collect(real.kc, msg_id, timeout=DETECT_S + 30)
    assert r.status == "error" and r.content["ename"] == "KernelDied", r.describe()
    assert "stopped reading its channel" in r.content["evalue"], r.content["evalue"]
    log = real.log_text()
    waited = int(log.split("event=kernel.stalled")[1].split(": ")[1].split(" bytes")[0])
    assert waited > 0                                   # the probe: bytes really waited
    real.wait_ready()
    assert real.run("1 + 1").results() == ["2"]


def test_a_real_console_flood_is_capped_and_stops_the_vm(real):
    qemu = real.qemu_pid()
    console = real.run_dir() / "console.log"
    # The kernel keeps its original stdout/stderr (the serial console) open: fd 3 here.
    assert "/dev/console" in real.value("import os; os.readlink('/proc/self/fd/3')")
    msg_id, _ = real.send("import os\nwhile True:\n    os.write(3, b'flood ' * 4096)")
    biggest, rotated = 0, False
    deadline = time.monotonic() + DETECT_S
    while time.monotonic() < deadline and _state(qemu) not in ("gone", psutil.STATUS_ZOMBIE):
        try:
            biggest = max(biggest, console.stat().st_size)
            rotated |= (console.parent / "console.log.1").exists()
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    r = collect(real.kc, msg_id, timeout=DETECT_S)
    assert r.status == "error" and "to its console" in r.content["evalue"], r.describe()
    assert rotated and "event=vm.console_rotated" in real.log_text()
    assert biggest < 65536 + (1 << 20), biggest
    real.wait_ready()
    assert real.run("1 + 1").results() == ["2"]
