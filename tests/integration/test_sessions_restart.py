"""Restarts keep /workspace (docs/sessions.md, "Restarts keep /workspace"), on both backends.

- a client restart (jupyter_client's KernelManager.restart_kernel: a shutdown_request with
  restart true, then a new gateway on the same connection file) gives a fresh interpreter over
  the same /workspace; so does a second restart in a row;
- a kernel killed by SIGKILL from inside a cell: the client sees KernelDied and `restarting`, then
  a fresh interpreter over the same /workspace;
- (microvm) the VM itself killed: a fresh VM whose /workspace is empty, and the client is told
  in words;
- (microvm) a session started from a snapshot (CELLVM_FROM_SNAPSHOT in the kernel's env, which
  jupyter_client passes again on a restart) keeps its own /workspace over a restart too.

The workspace is /workspace in a VM and a private directory of the gateway's with unsafe-local;
cells find it as the parent of CELLVM_OUTDIR (sessions.WS). Every session is a sessions.Session
of the build's kernelspecs, closed (and killed by pid) at the end of its test.
"""
import json
import os
import pathlib
import queue
import signal
import time
import uuid

import pytest

from sessions import (BACKENDS, READY_TIMEOUT, TIMEOUT, WS, Session, alive, identity_of,
                      run_base, snapshot_request, wait_gone, wait_no_leftovers)

RESTART_TIMEOUT = READY_TIMEOUT     # a restart: a shutdown, then a new gateway that must answer


def start(kernel, name, **kw):
    s = Session(kernel, name=name, **kw)
    try:
        s.start()
    except BaseException:
        s.close()
        raise
    return s


def write_token(s, rel="keep/token.txt"):
    """A cell writes a fresh token into the workspace (and defines x); the token."""
    token = uuid.uuid4().hex
    r = s.run(WS + f"os.makedirs(os.path.join(WS, {os.path.dirname(rel)!r}), exist_ok=True)\n"
                   f"open(os.path.join(WS, {rel!r}), 'w').write({token!r})\n"
                   "x = 'defined before'\n")
    assert r.status == "ok", r.describe()
    return token


def read_rel(s, rel="keep/token.txt", timeout=TIMEOUT):
    """What the workspace file holds now, or None when it is missing."""
    r = s.run(WS + "import json\n"
                   f"p = os.path.join(WS, {rel!r})\n"
                   "print(json.dumps(open(p).read() if os.path.exists(p) else None))",
              timeout=timeout)
    assert r.status == "ok", r.describe()
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_fresh_interpreter(s, timeout=TIMEOUT):
    r = s.run("x", timeout=timeout)
    assert r.status == "error" and r.content.get("ename") == "NameError", \
        f"the variable survived (or the cell failed otherwise): {r.describe()}"


def restart(s):
    """The client's restart (KernelManager.restart_kernel, as Jupyter Server does it), then wait
    until the new gateway answers. The old gateway pid."""
    old = s.gateway_pid
    s.km.restart_kernel(now=False)
    s.kc.wait_for_ready(timeout=RESTART_TIMEOUT)
    s.track()
    assert s.gateway_pid != old, "restart_kernel did not start a new gateway"
    assert wait_gone([old], TIMEOUT), f"the old gateway {old} still runs after the restart"
    return old


def kept_dir(s):
    return run_base() / "kept" / identity_of(s)


# --------------------------------------------------------------------------
# Client restarts

@pytest.mark.parametrize("backend", list(BACKENDS))
def test_client_restart_keeps_the_workspace_and_forgets_variables(backend):
    s = start(BACKENDS[backend], f"restart-{backend}")
    try:
        token = write_token(s)
        before = s.log_text().count("event=session.adopting")
        restart(s)
        log = s.log_text()
        assert "event=session.workspace_kept" in log and "rc=0" in \
            [ln for ln in log.splitlines() if "event=session.workspace_kept" in ln][-1], \
            "the old gateway did not keep the workspace:\n" + log[-4000:]
        assert log.count("event=session.adopting") == before + 1, \
            "the new gateway did not adopt the kept workspace:\n" + log[-4000:]
        assert_fresh_interpreter(s)
        assert read_rel(s) == token, "the workspace file did not survive the restart"
        assert not kept_dir(s).exists(), f"{kept_dir(s)} is still there after the adoption"
        # The restarted session works as any other: it writes, and a second restart keeps that.
        token2 = write_token(s, "keep/second.txt")
        restart(s)
        assert_fresh_interpreter(s)
        assert read_rel(s) == token and read_rel(s, "keep/second.txt") == token2
    finally:
        s.close()
    gws = [p for p in s.procs]          # every gateway (and QEMU) this session ever had
    assert wait_gone(gws, 10), [p for p in gws if alive(p)]
    assert wait_no_leftovers(gws, timeout=10) == []
    assert not kept_dir(s).exists(), "a plain shutdown left a kept workspace"


DIRTY = WS + """
import hashlib
data = os.urandom(24 * 1024 * 1024)
with open(os.path.join(WS, 'big.bin'), 'wb') as f:
    f.write(data)
log = open(os.path.join(WS, 'open.log'), 'w')
log.write('flushed but never closed\\n')
log.flush()
print(hashlib.sha256(data).hexdigest())
"""


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_restart_right_after_big_writes_keeps_every_byte(backend):
    """Data the kernel wrote but nothing synced (24 MiB in the guest's page cache, and a file
    still open) is all there after a restart that comes at once: on microvm the kernel is frozen
    with its VM and /workspace frozen (flushed, clean) as the disk is kept."""
    s = start(BACKENDS[backend], f"restart-dirty-{backend}")
    try:
        r = s.run(DIRTY)
        assert r.status == "ok", r.describe()
        want = r.stdout.strip()
        restart(s)
        assert_fresh_interpreter(s)
        r = s.run(WS + "import hashlib\n"
                       "print(hashlib.sha256(open(os.path.join(WS, 'big.bin'), 'rb').read())"
                       ".hexdigest())\n"
                       "print(open(os.path.join(WS, 'open.log')).read(), end='')")
        assert r.status == "ok", r.describe()
        assert r.stdout.splitlines() == [want, "flushed but never closed"], r.stdout
        if backend == "microvm":
            assert 'kernel="frozen with its VM"' in s.log_text(), s.log_text()[-3000:]
    finally:
        s.close()


# --------------------------------------------------------------------------
# Kernel deaths

def collect_all(kc, msg_id, timeout=TIMEOUT, until_restarting=True):
    """(iopub messages of msg_id up to its idle, every other iopub message seen meanwhile, the
    execute_reply). With until_restarting, also wait for a `restarting` status (its parent is
    empty: the gateway publishes it on its own)."""
    deadline = time.monotonic() + timeout
    mine, others, reply, idle = [], [], None, False

    def restarting():
        return any(m["msg_type"] == "status" and m["content"]["execution_state"] == "restarting"
                   for m in mine + others)

    while not idle or (until_restarting and not restarting()):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"within {timeout} s: idle={idle} restarting={restarting()}; "
                                 f"mine={[m['msg_type'] for m in mine]} others="
                                 f"{[(m['msg_type'], m['content']) for m in others][-10:]}")
        try:
            msg = kc.get_iopub_msg(timeout=min(left, 1))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            mine.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        else:
            others.append(msg)
    while reply is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no execute_reply for {msg_id} within {timeout} s")
        try:
            msg = kc.get_shell_msg(timeout=min(left, 1))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            reply = msg
    return mine, others, reply


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_kernel_sigkill_keeps_the_workspace(backend):
    s = start(BACKENDS[backend], f"sigkill-{backend}")
    try:
        token = write_token(s)
        msg_id = s.kc.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        mine, others, reply = collect_all(s.kc, msg_id, timeout=READY_TIMEOUT)
        c = reply["content"]
        assert c["status"] == "error" and c["ename"] == "KernelDied", c
        assert "SIGKILL" in c["evalue"], c["evalue"]
        errors = [m for m in mine if m["msg_type"] == "error"]
        assert [m["content"]["ename"] for m in errors] == ["KernelDied"], mine
        # The next cell waits for the new kernel: fresh, over the same workspace.
        assert_fresh_interpreter(s, timeout=READY_TIMEOUT)
        assert read_rel(s) == token, "the workspace file did not survive the kernel's death"
        token2 = write_token(s, "keep/after.txt")
        assert read_rel(s, "keep/after.txt") == token2
        assert s.gateway_pid is not None and alive(s.gateway_pid)
    finally:
        s.close()


def test_vm_death_gives_a_fresh_vm_and_says_the_workspace_is_lost():
    s = start("cellvm", "vmdeath")
    try:
        write_token(s)
        qemu = s.qemu_pid()
        msg_id = s.kc.execute("import time\ntime.sleep(600)")
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:              # the cell runs
            try:
                m = s.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
                break
        os.kill(qemu, signal.SIGKILL)
        mine, others, reply = collect_all(s.kc, msg_id, timeout=READY_TIMEOUT)
        c = reply["content"]
        assert c["status"] == "error" and c["ename"] == "KernelDied", c
        assert "/workspace" in c["evalue"], \
            f"the client is not told that /workspace is lost: {c['evalue']!r}"
        assert_fresh_interpreter(s, timeout=READY_TIMEOUT)
        assert read_rel(s, timeout=READY_TIMEOUT) is None, \
            "a fresh VM still has the dead VM's /workspace file"
        assert s.qemu_pid() != qemu
    finally:
        s.close()


# --------------------------------------------------------------------------
# A session started from a snapshot, restarted

def test_restart_of_a_session_started_from_a_snapshot_keeps_its_own_workspace(tmp_path):
    store = tmp_path / "store"
    src = start("cellvm", "restart-snapsrc", extra_args=["--snapshot-dir", store])
    try:
        src.run("x = 'from the snapshot'\n"
                "open('/workspace/in-snapshot.txt', 'w').write('snap')")
        rep = snapshot_request(src, "restart-base")
        assert rep["content"]["status"] == "ok", rep["content"]
    finally:
        src.close()
    s = start("cellvm", "restart-fork", extra_args=["--snapshot-dir", store],
              env={"CELLVM_FROM_SNAPSHOT": "restart-base"})
    try:
        assert s.value("x") == "'from the snapshot'"
        token = write_token(s, "keep/after-resume.txt")
        restart(s)
        r = s.run("x", timeout=READY_TIMEOUT)
        assert r.status == "error" and r.content.get("ename") == "NameError", \
            ("a client restart of a session started from a snapshot gave the snapshot's "
             f"interpreter again, not a fresh one: {r.describe()}")
        assert read_rel(s, "keep/after-resume.txt") == token, \
            "the restart lost what the session wrote after it started from the snapshot"
        assert read_rel(s, "in-snapshot.txt") == "snap"
    finally:
        s.close()
    assert pathlib.Path(store / "restart-base").is_dir(), "the snapshot went away"
