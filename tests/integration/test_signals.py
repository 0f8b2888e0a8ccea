"""Interrupts work whatever signal state the launcher left (docs/kernel.md "Interrupts").

A kernel started as a background job of a non-interactive shell, or with `nohup ... &`, inherits
SIGINT ignored, and ignored dispositions and the blocked mask survive exec. careless_launcher.py
starts a program that way, and worse (SIGCHLD and SIGUSR1 ignored, every signal blocked):
- cellvm-kernel run directly: an interrupt still raises KeyboardInterrupt in a running cell;
  the cell runs with nothing blocked, SIGINT's handler Python's own, and a child's exit status
  is seen (an ignored SIGCHLD would reap it first);
- cellvm-gateway with the unsafe-local backend: its kernel starts from default dispositions
  (bar the two the kernel and CPython ignore themselves) and an empty mask, an interrupt raises
  KeyboardInterrupt, and the gateway still reads a dead kernel's exit status.
"""
import json
import os
import signal
import time

import pytest

from kernel_driver import assert_bracketed, assert_execute_ok, new_kernel  # noqa: F401
from sessions import start_session

LAUNCHER = ("/usr/bin/python3", os.path.join(os.path.dirname(__file__), "careless_launcher.py"))
# What the cell sees of its own process: /proc/self/status is the main thread's, where cells run.
PROBE = r'''
import json, signal, subprocess
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
sigs = lambda mask: [s for s in range(1, 65) if int(mask, 16) >> (s - 1) & 1]
print(json.dumps({"ignored": sigs(st["SigIgn"]), "blocked": sigs(st["SigBlk"]),
                  "sigint_raises": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                  "child_status": subprocess.run(["sh", "-c", "exit 3"]).returncode}))
'''
# The kernel ignores SIGPIPE (a closed pipe is an error, not death); CPython ignores SIGXFSZ.
OWN_IGNORED = sorted([signal.SIGPIPE, signal.SIGXFSZ])


def test_launcher_leaves_sigint_ignored_and_blocked():
    """The premise: what the launcher hands on is what the tests below must survive."""
    import subprocess
    out = subprocess.run(list(LAUNCHER) + ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"],
                         capture_output=True, text=True, check=True).stdout
    st = dict(line.split(":\t") for line in out.splitlines())
    assert int(st["SigIgn"], 16) >> (signal.SIGINT - 1) & 1, out
    assert int(st["SigBlk"], 16) >> (signal.SIGINT - 1) & 1, out
    assert int(st["SigIgn"], 16) >> (32 - 1) & 3 == 3, out  # glibc's own 32 and 33


def test_kernel_run_by_a_careless_launcher(new_kernel):
    k = new_kernel(launcher=LAUNCHER)
    r = k.execute(PROBE)
    assert_execute_ok(r)
    state = json.loads(r.stream_text())
    assert state["blocked"] == [], state
    assert signal.SIGINT not in state["ignored"] and signal.SIGCHLD not in state["ignored"], state
    assert state["sigint_raises"] is True, state
    assert state["child_status"] == 3, state
    mid = k.send_execute("import time\ntime.sleep(100)", stop_on_error=False)
    k.wait_for(lambda m: m.parent_id == mid and m.msg_type == "execute_input",
               what="execute_input")
    time.sleep(0.5)
    t0 = time.monotonic()
    assert assert_bracketed(k.roundtrip("control", "interrupt_request", {},
                                        timeout=10)).content["status"] == "ok"
    res = k.collect(mid, timeout=10)
    assert res.reply.content.get("ename") == "KeyboardInterrupt", res
    assert res.reply.t - t0 < 1.0, f"cell stopped {res.reply.t - t0:.2f}s after the interrupt"
    assert_execute_ok(k.execute("1"))


@pytest.fixture
def careless_local():
    s = start_session("cellvm-unsafe-local", launcher=LAUNCHER)
    yield s
    s.close()


def test_local_backend_run_by_a_careless_launcher(careless_local):
    s = careless_local
    state = json.loads(s.output(PROBE))
    assert state == {"ignored": OWN_IGNORED, "blocked": [], "sigint_raises": True,
                     "child_status": 3}, state
    msg_id, _ = s.send("import time; time.sleep(100)")
    time.sleep(1.0)                                 # into the sleep (a cell's round trip is ms)
    t0 = time.monotonic()
    s.km.interrupt_kernel()
    r = s.collect(msg_id, timeout=15)
    assert r.content.get("ename") == "KeyboardInterrupt", r.describe()
    assert time.monotonic() - t0 < 5.0
    # The gateway itself reaps its kernel: an inherited SIG_IGN for SIGCHLD would have the
    # system reap it unasked, and its exit status would be lost.
    r = s.run("import os; os._exit(3)")
    assert r.content["ename"] == "KernelDied" and "status 3" in r.content["evalue"], r.content
    assert s.value("6 * 7") == "42"


@pytest.mark.slow
def test_qemu_outlives_a_signal_to_the_whole_process_tree():
    """Slurm's proctrack at a requeue, systemd stopping a control group and a hang-up signal
    every process of the tree, QEMU too, and QEMU quits on SIGTERM, SIGINT and SIGHUP. The
    gateway answers for the session (a named one is suspended first, which needs its QEMU),
    so QEMU holds those three blocked: the VM, and its variables, are still there."""
    from sessions import open_session
    s = open_session("cellvm")
    try:
        assert s.output("x = 5; print(x)").strip() == "5"
        qemu = s.qemu_pid()
        status = dict(line.split(":\t", 1) for line in open(f"/proc/{qemu}/status")
                      .read().splitlines() if ":\t" in line)
        blocked = int(status["SigBlk"], 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            assert blocked >> (sig - 1) & 1, (sig, status["SigBlk"])
            os.kill(qemu, sig)
        time.sleep(2)
        assert os.path.exists(f"/proc/{qemu}"), "QEMU quit on a signal meant for the tree"
        assert s.output("print(x + 1)").strip() == "6"
    finally:
        s.close()
