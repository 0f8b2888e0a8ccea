"""Named sessions that move between hosts through a shared store (docs/cluster.md, "Sessions
that move").

- SIGTERM (an eviction, a drain) suspends a named session into the store as session-<name> and
  the gateway exits 0; the next launch of that name, through a new connection file (new ports),
  resumes it: its variables, its /workspace, its random generators where they were, the guest
  clock right; the resume consumes the snapshot;
- a second launch while the session is held elsewhere is refused with words naming the holder,
  and the running session is untouched;
- an end (a client's shutdown) discards it: the next launch of the name starts fresh;
- a gateway killed without a SIGTERM leaves its lease, which blocks a launch until it expires.

"Hosts" are network namespaces with their own hostname (a UTS namespace) where that matters.
Every gateway is a sessions.Session, closed (killed by pid) at the end of its test; stores are
under pytest's tmp dir.
"""
import glob
import json
import os
import signal
import subprocess
import time

import pytest

from sessions import (READY_TIMEOUT, TIMEOUT, Session, open_session, qemu_children,
                      snapshot_list, wait_gone)

SUSPEND_TIMEOUT = 300               # the save of a 512 MiB guest under TCG, loaded machine

SETUP = ("import os, json, random\n"
         "x = 'kept in RAM'\n"
         "random.seed(7); random.random()\n"
         "state = random.getstate()\n"
         "open('/workspace/kept.txt', 'w').write('kept on disk')\n")
STATE = ("import json, random, time\n"
         "print(json.dumps([x, open('/workspace/kept.txt').read(), "
         "random.getstate() == state, time.time()]))")


def start(name, args=(), wait=True):
    return open_session("cellvm", name, args, wait)


def named(store, session_name, ttl=None):
    args = ["--snapshot-dir", store, "--session-name", session_name]
    return args + (["--lease-ttl", ttl] if ttl else [])


def lease_files(store, session_name):
    return {os.path.basename(p): json.loads(open(p).read())
            for p in glob.glob(f"{store}/.leases/{session_name}.*")}


def wait_exit(s, timeout):
    """The gateway's exit code, once it has exited."""
    try:
        return s.km.provisioner.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the gateway still runs {timeout} s later:\n"
                             f"{s.log_text()[-3000:]}")


def suspend(s):
    """SIGTERM to the gateway: it saves the session and exits 0; the VM is gone."""
    qemu = s.qemu_pid()
    os.kill(s.gateway_pid, signal.SIGTERM)
    rc = wait_exit(s, SUSPEND_TIMEOUT)
    assert rc == 0, f"exit {rc}:\n{s.log_text()[-3000:]}"
    assert wait_gone([qemu], TIMEOUT)
    assert "event=session.suspended" in s.log_text(), s.log_text()[-3000:]


def refused(store, session_name, label):
    """A launch of a held name: the gateway exits 1; its stderr."""
    s = start(label, named(store, session_name), wait=False)
    try:
        rc = wait_exit(s, READY_TIMEOUT)
        assert rc == 1, f"exit {rc}:\n{s.log_text()[-3000:]}"
        return s.log_text()
    finally:
        s.close()


@pytest.mark.slow
def test_sigterm_suspends_and_the_next_launch_resumes(tmp_path):
    store = tmp_path / "store"
    a = start("move-a", named(store, "conv-1"))
    try:
        r = a.run(SETUP)
        assert r.status == "ok", r.describe()
        suspend(a)
    finally:
        a.close()
    assert "session-conv-1" in snapshot_list(store)
    leases = lease_files(store, "conv-1")
    assert [v["released"] for v in leases.values()] == [True], leases
    b = start("move-b", named(store, "conv-1"))
    try:
        assert b.connection_info["shell_port"] != a.connection_info["shell_port"]
        out = json.loads(b.output(STATE, timeout=READY_TIMEOUT).strip().splitlines()[-1])
        assert out[:3] == ["kept in RAM", "kept on disk", True], out
        assert abs(out[3] - time.time()) < 5, f"guest clock off by {out[3] - time.time():.1f} s"
        assert "session-conv-1" not in snapshot_list(store), "the resume did not consume it"
        epochs = sorted(int(k.rsplit(".", 1)[1]) for k in lease_files(store, "conv-1"))
        assert epochs == [2], epochs
        assert b.output("print(1 + 1)").strip() == "2"
    finally:
        b.close()


@pytest.mark.slow
def test_a_second_launch_while_held_is_refused_and_the_first_runs_on(tmp_path):
    store = tmp_path / "store"
    a = start("held-a", named(store, "conv-2"))
    try:
        assert a.output("y = 41; print(y + 1)").strip() == "42"
        text = refused(store, "conv-2", "held-b")
        assert 'session "conv-2" is running on host' in text, text[-2000:]
        assert f"(pid {a.gateway_pid})" in text, text[-2000:]
        assert a.output("print(y)").strip() == "41"
        assert qemu_children(a.gateway_pid), "the running session lost its VM"
    finally:
        a.close()


@pytest.mark.slow
def test_an_end_discards_the_session(tmp_path):
    store = tmp_path / "store"
    a = start("end-a", named(store, "conv-3"))
    try:
        assert a.output("z = 5; print(z)").strip() == "5"
        a.km.shutdown_kernel(now=False)
        assert "event=session.suspended" not in a.log_text()
    finally:
        a.close()
    assert "session-conv-3" not in snapshot_list(store)
    b = start("end-b", named(store, "conv-3"))
    try:
        r = b.run("z")
        assert r.status == "error" and r.content["ename"] == "NameError", r.describe()
    finally:
        b.close()


@pytest.mark.slow
def test_a_killed_holder_blocks_until_its_lease_expires(tmp_path):
    store = tmp_path / "store"
    a = start("dead-a", named(store, "conv-4", ttl=6))
    try:
        assert a.output("print(3)").strip() == "3"
        gw, qemu = a.gateway_pid, a.qemu_pid()
        os.kill(gw, signal.SIGKILL)
        assert wait_gone([gw], 10)
        os.kill(qemu, signal.SIGKILL)
        died = time.time()
    finally:
        a.close()
    text = refused(store, "conv-4", "dead-b")
    assert "start again once the lease has expired" in text, text[-2000:]
    lease = next(iter(lease_files(store, "conv-4").values()))
    time.sleep(max(0.0, lease["expires"] + 5 + 1 - time.time()))
    assert time.time() - died < 60
    b = start("dead-c", named(store, "conv-4"))
    try:
        assert b.output("print(4)").strip() == "4"
        assert sorted(lease_files(store, "conv-4")) == ["conv-4.2"]
    finally:
        b.close()


def test_a_named_session_needs_the_microvm_backend(tmp_path):
    s = Session("cellvm-unsafe-local", name="named-local",
                extra_args=named(str(tmp_path / "store"), "conv-5"))
    try:
        s.start(wait=False)
        rc = wait_exit(s, READY_TIMEOUT)
        assert rc == 1
        assert "a named session needs the microvm backend" in s.log_text()
    finally:
        s.close()
