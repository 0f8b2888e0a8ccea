"""No VM, socket or disk layer outlives its session: a host that runs sessions for months must
not fill up with what they left.

Sessions are started through KernelManager with the `cellvm` kernelspec. What a gateway could
leave on the host: a qemu-system process, its run dir `BASE/vm-<gateway pid>-*` (docs/vm.md), the
unix sockets QEMU listened on, and the qcow2 layer of /workspace. `sessions.leftovers` looks for
all four, and only for the gateways a test started, so tests running concurrently (with their own
gateways) do not disturb the checks. Each test first shows that the check sees a live session's
QEMU, dir, sockets and disk, so an empty answer afterwards means something.
"""
import os
import pathlib
import shutil
import signal
import tempfile
import time

from sessions import (Session, alive, kernel_spec, leftovers, qemu_run_dir, wait_gone,
                      wait_no_leftovers)


def kinds(found):
    return {line.split()[0] for line in found}


def _start(tmp_path, n, run_base=None):
    kernel_spec("cellvm")                       # fails (never skips) without build or image
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}    # artifacts land here, not in ~/.local
    extra = ["--run-dir", run_base] if run_base else []
    sessions = [Session("cellvm", env=env, extra_args=extra) for _ in range(n)]
    for s in sessions:
        s.start(wait=False)
    return sessions


def _close(sessions):
    for s in sessions:
        s.close()


def test_shutdown_and_sigterm_leave_nothing(tmp_path):
    sessions = _start(tmp_path, 2)
    try:
        for s in sessions:
            s.wait_ready()
            r = s.run("import os\nos.makedirs('/workspace/out', exist_ok=True)\n"
                      "open('/workspace/data.bin', 'wb').write(os.urandom(1 << 20))\n"
                      "open('/workspace/out/result.txt', 'w').write('x')")
            assert r.status == "ok", r.describe()
        gws = [s.gateway_pid for s in sessions]
        qemus = [s.qemu_pid() for s in sessions]
        dirs = [qemu_run_dir(q) for q in qemus]
        live = leftovers(gws)
        assert kinds(live) == {"qemu", "run", "unix", "qcow2"}, live   # the check sees them

        a, b = sessions
        a.km.shutdown_kernel(now=False)              # the client's shutdown_request
        os.kill(b.gateway_pid, signal.SIGTERM)       # what a frontend's SIGTERM does
        assert wait_gone(gws + qemus, 10), [p for p in gws + qemus if alive(p)]
        left = wait_no_leftovers(gws, timeout=10)
        assert left == [], left
        assert not any(d.exists() for d in dirs), dirs
    finally:
        _close(sessions)


def test_shutdown_during_boot_leaves_nothing(tmp_path):
    (s,) = _start(tmp_path, 1)
    try:
        qemu = s.qemu_pid()                          # spawned; the guest is still booting
        run_dir = qemu_run_dir(qemu)
        assert run_dir and run_dir.exists()
        time.sleep(1)
        t0 = time.monotonic()
        s.km.shutdown_kernel(now=False)
        took = time.monotonic() - t0
        assert wait_gone([s.gateway_pid, qemu], 10)
        left = wait_no_leftovers([s.gateway_pid], timeout=10)
        assert left == [], left
        assert took < 5, f"shutdown during boot took {took:.1f} s"
    finally:
        _close([s])


def test_sigkilled_gateway_is_swept_by_the_next(tmp_path):
    # A run base of its own: any gateway that starts on the default one sweeps a dead gateway's
    # run dir, and the tests run side by side. Short, for the unix sockets' path limit.
    base = tempfile.mkdtemp(prefix="cellvm-sweep-", dir="/tmp")
    (s,) = _start(tmp_path, 1, run_base=base)
    later = []
    try:
        s.wait_ready()
        gw, qemu = s.gateway_pid, s.qemu_pid()
        run_dir = qemu_run_dir(qemu)
        assert run_dir.parent == pathlib.Path(base), run_dir
        assert kinds(leftovers([gw], base=base)) == {"qemu", "run", "unix", "qcow2"}

        os.kill(gw, signal.SIGKILL)
        # QEMU dies with its gateway (PR_SET_PDEATHSIG), at once.
        assert wait_gone([gw, qemu], 5), f"qemu {qemu} outlived its SIGKILLed gateway {gw}"
        left = wait_no_leftovers([gw], timeout=3, base=base)
        # Nothing could delete the run dir (disk included): that is the sweeper's job.
        assert run_dir.exists() and "qemu" not in kinds(left) and "unix" not in kinds(left), left

        # The client notices its kernel is gone (and so reaps it, as jupyter_client's
        # restarter does); a zombie still looks like a live owner to the sweeper.
        assert not s.km.is_alive()
        later = _start(tmp_path, 1, run_base=base)   # a new gateway sweeps at start
        later[0].wait_ready()
        left = wait_no_leftovers([gw], timeout=10, base=base)
        assert left == [], f"the next gateway did not sweep: {left}"
        assert not run_dir.exists()

        g2 = later[0].gateway_pid
        later[0].km.shutdown_kernel(now=False)
        assert wait_no_leftovers([g2], timeout=10, base=base) == []
    finally:
        _close([s] + later)
        shutil.rmtree(base, ignore_errors=True)
