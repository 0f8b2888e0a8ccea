"""Named sessions that move between hosts through a shared store (docs/cluster.md, "Sessions
that move").

"Hosts" are network namespaces with their own address and hostname (tests/cluster/hosts.py)
that share the filesystem, as NFS would: the store is a directory every host sees. A gateway
runs on a host through an argv prefix that enters its namespaces, its ports on the host's
address; the client stays in the root namespace, as a front would.

- a drain: SIGTERM suspends a named session into the store (session-<name>) and the gateway
  exits 0; a launch of the name on another host resumes it through new ports: its variables,
  its /workspace, its random generators where they were, the guest clock right after a pause;
  a launch on the first host meanwhile is refused, naming the holder;
- a resume on a host with another QEMU build or CPU model is refused in words naming the
  difference, the snapshot kept for a host that can;
- a host that dies (every process of its namespace killed) leaves its lease, which refuses a
  launch until it expires; then the session comes back on another host from its last
  checkpoint (--checkpoint-every);
- an end (a client's shutdown) discards the session: the next launch of the name is fresh;
- a client's restart (shutdown_request with restart: true) keeps /workspace in the store
  (workspace-<name>): the next launch of the name on another host has its files under a fresh
  interpreter and consumes it, and an end after that leaves nothing of the name; a restart
  whose store write fails says why and keeps /workspace on its host for the relaunch there.

Every gateway is a sessions.Session, closed (killed by pid) at the end of its test; stores are
under pytest's tmp dir.
"""
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions import (READY_TIMEOUT, TIMEOUT, identity_of, open_session, run_base,
                      snapshot_list, wait_gone)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from hosts import Hosts  # noqa: E402

SUSPEND_TIMEOUT = 300               # the save of a 512 MiB guest under TCG, loaded machine
CLOCK_PAUSE_S = 8                   # between a suspend and its resume: the clock must catch up

SETUP = ("import os, json, random\n"
         "x = 'kept in RAM'\n"
         "random.seed(7); random.random()\n"
         "state = random.getstate()\n"
         "open('/workspace/kept.txt', 'w').write('kept on disk')\n")
STATE = ("import json, random, time\n"
         "print(json.dumps([x, open('/workspace/kept.txt').read(), "
         "random.getstate() == state, time.time()]))")


@pytest.fixture
def hosts():
    with Hosts(("hosta", "hostb")) as h:
        yield h


def on(hosts, host, label, args, wait=True):
    """A session of the cellvm kernelspec on host, its ports on host's address."""
    return open_session("cellvm", label, args, wait, launcher=hosts.prefix(host),
                        ip=hosts.addr[host])


def named(store, session_name, *more):
    return ["--snapshot-dir", store, "--session-name", session_name, *more]


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


def wait_log(s, text, count=1, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while s.log_text().count(text) < count:
        assert time.monotonic() < deadline, f"no {count}x {text}:\n{s.log_text()[-3000:]}"
        time.sleep(0.2)


def suspend(s):
    """SIGTERM to the gateway: it saves the session and exits 0; the VM is gone."""
    qemu = s.qemu_pid()
    os.kill(s.gateway_pid, signal.SIGTERM)
    rc = wait_exit(s, SUSPEND_TIMEOUT)
    assert rc == 0, f"exit {rc}:\n{s.log_text()[-3000:]}"
    assert wait_gone([qemu], TIMEOUT)
    assert "event=session.suspended" in s.log_text(), s.log_text()[-3000:]


def refused(start):
    """A launch that must be refused: the gateway exits 1; its log (stderr included)."""
    s = start(wait=False)
    try:
        rc = wait_exit(s, READY_TIMEOUT)
        assert rc == 1, f"exit {rc}:\n{s.log_text()[-3000:]}"
        return s.log_text()
    finally:
        s.close()


def state_of(s):
    out = json.loads(s.output(STATE, timeout=READY_TIMEOUT).strip().splitlines()[-1])
    skew = out[3] - time.time()
    assert abs(skew) < 3, f"the guest clock is off by {skew:.1f} s after the resume"
    return out[:3]


@pytest.mark.slow
def test_a_drained_host_s_session_resumes_on_another_with_its_state(tmp_path, hosts):
    store = tmp_path / "store"
    a = on(hosts, "hosta", "drain-a", named(store, "conv-1"))
    try:
        r = a.run(SETUP)
        assert r.status == "ok", r.describe()
        suspend(a)
    finally:
        a.close()
    assert "session-conv-1" in snapshot_list(store)
    assert [v["released"] for v in lease_files(store, "conv-1").values()] == [True]
    time.sleep(CLOCK_PAUSE_S)
    b = on(hosts, "hostb", "drain-b", named(store, "conv-1"))
    try:
        assert b.connection_info["ip"] == hosts.addr["hostb"]
        assert state_of(b) == ["kept in RAM", "kept on disk", True]
        assert "session-conv-1" not in snapshot_list(store), "the resume did not consume it"
        held = lease_files(store, "conv-1")
        assert [(v["epoch"], v["host"], v["released"]) for v in held.values()] == \
            [(2, "hostb", False)], held
        text = refused(lambda wait: on(hosts, "hosta", "drain-again", named(store, "conv-1"),
                                       wait))
        assert 'session "conv-1" is running on host hostb' in text, text[-2000:]
        assert f"(pid {b.gateway_pid})" in text, text[-2000:]
        assert b.output("print(x)").strip() == "kept in RAM"
    finally:
        b.close()


@pytest.mark.slow
@pytest.mark.parametrize("field,value,words", [
    ("qemu_version", "9.9.9 Other 1:9.9", 'was taken with QEMU "9.9.9 Other 1:9.9"'),
    ("cpu", "host", 'was taken with CPU model "host"'),
])
def test_a_resume_on_another_build_or_cpu_model_is_refused(tmp_path, hosts, field, value,
                                                            words):
    store = tmp_path / "store"
    a = on(hosts, "hosta", "compat-a", named(store, "conv-2"))
    try:
        assert a.run(SETUP).status == "ok"
        suspend(a)
    finally:
        a.close()
    # The snapshot as another host's build would have written it.
    meta_path = store / "session-conv-2" / "meta.json"
    meta = json.loads(meta_path.read_text())
    real = meta[field]
    meta[field] = value
    meta_path.write_text(json.dumps(meta))
    text = refused(lambda wait: on(hosts, "hostb", "compat-b", named(store, "conv-2"), wait))
    assert words in text and "this gateway runs" in text, text[-2000:]
    assert "session-conv-2" in snapshot_list(store), "a refused resume lost the session"
    meta[field] = real
    meta_path.write_text(json.dumps(meta))
    c = on(hosts, "hostb", "compat-c", named(store, "conv-2"))
    try:
        assert state_of(c) == ["kept in RAM", "kept on disk", True]
    finally:
        c.close()


@pytest.mark.slow
def test_a_dead_host_s_session_comes_back_from_its_last_checkpoint(tmp_path, hosts):
    store = tmp_path / "store"
    args = named(store, "conv-3", "--checkpoint-every", 2, "--lease-ttl", 6)
    a = on(hosts, "hosta", "dead-a", args)
    try:
        assert a.output("a = 1; print(a)").strip() == "1"
        wait_log(a, "event=session.checkpoint ", 1)
        assert a.output("b = 2; print(b)").strip() == "2"
        wait_log(a, "event=session.checkpoint ", 2)
        deadline = time.monotonic() + 10        # the first one is pruned
        while len([n for n in snapshot_list(store) if n.startswith("ckpt-conv-3-")]) != 1:
            assert time.monotonic() < deadline, snapshot_list(store)
            time.sleep(0.2)
        gw, qemu = a.gateway_pid, a.qemu_pid()
        hosts.kill("hosta")                     # the host dies: no SIGTERM, no suspend
        os.kill(qemu, signal.SIGKILL)           # QEMU is in the jail's namespaces
        assert wait_gone([gw, qemu], 10)
        died = time.time()
    finally:
        a.close()
    text = refused(lambda wait: on(hosts, "hostb", "dead-b", args, wait))
    assert "start again once the lease has expired" in text, text[-2000:]
    lease = next(iter(lease_files(store, "conv-3").values()))
    time.sleep(max(0.0, lease["expires"] + 5 + 1 - time.time()))
    assert time.time() - died < 30
    c = on(hosts, "hostb", "dead-c", args)
    try:
        assert "from=ckpt-conv-3-" in c.log_text(), c.log_text()[-2000:]
        assert c.output("print(a + b)", timeout=READY_TIMEOUT).strip() == "3"
        skew = float(c.output("import time; print(time.time())").strip()) - time.time()
        assert abs(skew) < 3, f"the guest clock is off by {skew:.1f} s"
    finally:
        c.close()
    assert not [n for n in snapshot_list(store) if "conv-3" in n], snapshot_list(store)


@pytest.mark.slow
def test_an_end_discards_the_session(tmp_path):
    store = tmp_path / "store"
    a = open_session("cellvm", "end-a", named(store, "conv-4", "--checkpoint-every", 1))
    try:
        assert a.output("z = 5; print(z)").strip() == "5"
        wait_log(a, "event=session.checkpoint ", 1)
        a.km.shutdown_kernel(now=False)
        assert "event=session.suspended" not in a.log_text()
    finally:
        a.close()
    assert not [n for n in snapshot_list(store) if "conv-4" in n], snapshot_list(store)
    b = open_session("cellvm", "end-b", named(store, "conv-4"))
    try:
        r = b.run("z")
        assert r.status == "error" and r.content["ename"] == "NameError", r.describe()
    finally:
        b.close()


def test_a_named_session_needs_the_microvm_backend(tmp_path):
    text = refused(lambda wait: open_session("cellvm-unsafe-local", "named-local",
                                             named(tmp_path / "store", "conv-5"), wait))
    assert "a named session needs the microvm backend" in text


RESTART_SETUP = ("y = 'only in RAM'\n"
                 "open('/workspace/restart.txt', 'w').write('kept across the restart')\n")
READ_KEPT = "print(open('/workspace/restart.txt').read())"


def restart_request(s):
    """The client's restart as jupyter_client and Enterprise Gateway send it: shutdown_request
    with restart: true on control. The gateway keeps /workspace and exits 0; the VM is gone."""
    qemu = s.qemu_pid()
    rep = s.control("shutdown_request", {"restart": True})
    assert rep["content"]["status"] == "ok" and rep["content"]["restart"] is True, rep
    rc = wait_exit(s, SUSPEND_TIMEOUT)
    assert rc == 0, f"exit {rc}:\n{s.log_text()[-3000:]}"
    assert wait_gone([qemu], TIMEOUT)


def with_setup(hosts, label, store, session_name):
    """A session of the name on hosta that has run RESTART_SETUP (a variable and a file)."""
    s = on(hosts, "hosta", label, named(store, session_name))
    r = s.run(RESTART_SETUP)
    if r.status != "ok":
        s.close()
        raise AssertionError(r.describe())
    return s


def fresh_interpreter(s, name):
    r = s.run(name, timeout=READY_TIMEOUT)
    assert r.status == "error" and r.content["ename"] == "NameError", r.describe()


def leftovers_of(store, session_name):
    """What the store holds of the name: entries, and staging or trash dirs of a write."""
    return sorted(p.name for p in store.iterdir() if session_name in p.name)


@pytest.mark.slow
def test_a_restart_keeps_workspace_in_the_store_for_a_launch_on_another_host(tmp_path, hosts):
    store = tmp_path / "store"
    a = with_setup(hosts, "restart-a", store, "conv-6")
    try:
        restart_request(a)
        log = a.log_text()
        assert "event=session.workspace_kept name=conv-6 rc=0" in log, log[-3000:]
        assert not (run_base() / "kept" / identity_of(a)).exists(), "kept on the host too"
    finally:
        a.close()
    assert leftovers_of(store, "conv-6") == ["workspace-conv-6"], leftovers_of(store, "conv-6")
    meta = snapshot_list(store)["workspace-conv-6"]["meta"]
    assert (meta["kind"], meta["reason"], meta["session"]) == ("workspace", "restart", "conv-6")
    assert [v["released"] for v in lease_files(store, "conv-6").values()] == [True]
    b = on(hosts, "hostb", "restart-b", named(store, "conv-6", "--checkpoint-every", 1))
    try:
        assert b.output(READ_KEPT, timeout=READY_TIMEOUT).strip() == "kept across the restart"
        fresh_interpreter(b, "y")
        assert "from=workspace-conv-6" in b.log_text(), b.log_text()[-3000:]
        deadline = time.monotonic() + TIMEOUT
        while "workspace-conv-6" in snapshot_list(store):
            assert time.monotonic() < deadline, "the launch did not consume the kept workspace"
            time.sleep(0.2)
        held = lease_files(store, "conv-6")
        assert [(v["epoch"], v["host"]) for v in held.values()] == [(2, "hostb")], held
        assert b.output("z = 1; print(z)").strip() == "1"
        wait_log(b, "event=session.checkpoint ", 1)
        b.km.shutdown_kernel(now=False)             # an end
        assert "event=session.suspended" not in b.log_text()
    finally:
        b.close()
    assert leftovers_of(store, "conv-6") == [], leftovers_of(store, "conv-6")
    c = on(hosts, "hosta", "restart-c", named(store, "conv-6"))
    try:
        r = c.run("import os; print(os.path.exists('/workspace/restart.txt'))",
                  timeout=READY_TIMEOUT)
        assert r.status == "ok" and r.stdout.strip() == "False", r.describe()
    finally:
        c.close()


@pytest.mark.slow
def test_a_restart_whose_store_write_fails_keeps_workspace_on_its_host(tmp_path, hosts):
    store = tmp_path / "store"
    a = with_setup(hosts, "restart-fail", store, "conv-7")
    try:
        # An older entry of the name that a reader holds open: the restart cannot replace it.
        (store / "workspace-conv-7").mkdir()
        fd = os.open(store / "workspace-conv-7", os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            restart_request(a)
        finally:
            os.close(fd)
        log = a.log_text()
        failed = [ln for ln in log.splitlines() if "event=session.workspace_store_failed" in ln]
        assert failed and "workspace-conv-7" in failed[-1] and "is in use" in failed[-1] \
            and "kept on this host only" in failed[-1], log[-3000:]
        assert (run_base() / "kept" / identity_of(a)).is_dir(), log[-3000:]
        (store / "workspace-conv-7").rmdir()
        # The relaunch with the same connection file on the same host adopts it. jupyter_client
        # launches only on local addresses: the gateway binds every address of its host, as at
        # its first start (sessions.Session), and the client keeps the host's. The gateway has
        # exited already, so this is the restart of a kernel that is gone (now=True, as Jupyter
        # Server's restarter does it): now=False would send a shutdown_request that waits in
        # the client's control socket, and reaches the new gateway if it binds within the
        # socket's linger.
        a.km.ip = "0.0.0.0"
        a.km.restart_kernel(now=True)
        a.km.ip = hosts.addr["hosta"]
        a.kc.wait_for_ready(timeout=READY_TIMEOUT)
        a.track()
        assert a.output(READ_KEPT, timeout=READY_TIMEOUT).strip() == "kept across the restart"
        fresh_interpreter(a, "y")
    finally:
        a.close()


@pytest.mark.slow
def test_a_newer_suspend_wins_over_a_kept_workspace_and_an_end_discards_one(tmp_path, hosts):
    """Both a suspend and a restart's kept /workspace in the store: the newer is the session
    (here the suspend, with its variables) and the older goes. A kept /workspace still there
    at an end goes with the rest."""
    store, aside = tmp_path / "store", tmp_path / "aside"
    a = with_setup(hosts, "both-a", store, "conv-8")
    try:
        restart_request(a)
    finally:
        a.close()
    shutil.copytree(store / "workspace-conv-8", aside)         # an older kept /workspace
    b = on(hosts, "hostb", "both-b", named(store, "conv-8"))
    try:
        assert b.output(READ_KEPT, timeout=READY_TIMEOUT).strip() == "kept across the restart"
        assert b.output("y = 'in RAM'; print(y)").strip() == "in RAM"
        suspend(b)
    finally:
        b.close()
    assert "workspace-conv-8" not in snapshot_list(store)
    shutil.copytree(aside, store / "workspace-conv-8")
    c = on(hosts, "hosta", "both-c", named(store, "conv-8"))
    try:
        assert c.output("print(y)", timeout=READY_TIMEOUT).strip() == "in RAM"
        log = c.log_text()
        assert "event=session.superseded name=workspace-conv-8" in log, log[-3000:]
        assert "workspace-conv-8" not in snapshot_list(store)
        shutil.copytree(aside, store / "workspace-conv-8")     # one the session never took
        c.km.shutdown_kernel(now=False)                         # an end
    finally:
        c.close()
    assert leftovers_of(store, "conv-8") == [], leftovers_of(store, "conv-8")
