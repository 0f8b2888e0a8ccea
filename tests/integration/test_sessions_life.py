"""Sessions that outlive their gateway, and sessions that end on their own (docs/sessions.md,
"Idle sessions go to disk", "Lifetimes").

- --idle-pause (microvm): after the idle period the VM is saved into the store as
  paused-<identity> and QEMU exits; `cellvm ls` says paused; heartbeats are still answered and
  do not wake it; the next request resumes it with its variables and files; it pauses and
  resumes again; nothing is left in the store when the session ends;
- a gateway SIGKILLed while paused leaves paused-<identity>, which --from-snapshot resumes;
- --idle-timeout and --ttl (both backends): one iopub stream on stderr says why, the gateway
  exits, and nothing is left behind (no VM, run dir, socket, disk layer, status file);
- acceptance: a 200 MB pandas DataFrame and an open file survive a snapshot, a SIGKILL of the
  gateway and a start from that snapshot.

Every session is a sessions.Session of the build's kernelspecs, closed (killed by pid) at the
end of its test; stores are under pytest's tmp dir.
"""
import json
import os
import re
import queue
import signal
import subprocess
import time

import pytest
import zmq

from sessions import (BACKENDS, IMAGE, READY_TIMEOUT, TIMEOUT, identity_of, open_session,
                      qemu_children, require_image, run_base, session_status, snapshot_list,
                      snapshot_request, wait_gone, wait_no_leftovers)

IDLE_PAUSE = 5                      # --idle-pause for these tests, seconds
PAUSE_TIMEOUT = 600                 # idle, then RAM and disk written, under TCG
SNAP_TIMEOUT = 600
# The acceptance test's VMs: the default (512 MiB, restored from the template: 200 MB of data
# and pandas fit, with ~140 MB to spare) and 1024 MiB (cold-booted: --no-templates, so that no
# template build for that size runs in the background).
ACCEPT_ARGS = {"default": [], "1024-cold": ["--memory", "1024", "--no-templates"]}


def start(kernel, name, args=(), env=None, wait=True):
    return open_session(kernel, name, args, wait, env=env)


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


SETUP = ("import os, json, numpy\n"
         "x = 'kept in RAM'\n"
         "arr = numpy.arange(10**6)\n"
         "open('/workspace/kept.txt', 'w').write('kept on disk')\n")
STATE = ("import os, json\n"
         "print(json.dumps([x, int(arr.sum()), open('/workspace/kept.txt').read()]))")
EXPECTED = ["kept in RAM", 499999500000, "kept on disk"]


def wait_log(s, text, count=1, timeout=PAUSE_TIMEOUT):
    """Wait until text appears count times in the gateway's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.log_text().count(text) >= count:
            return
        assert s.proc.poll() is None, f"the gateway exited:\n{s.log_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"no {count}x {text} within {timeout} s:\n{s.log_text()[-3000:]}")


def hb_ping(s, timeout=30):
    """One heartbeat round trip on a socket of our own: True when echoed."""
    sock = s.ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(s.endpoint("hb"))
        payload = os.urandom(8)
        sock.send(payload)
        if not sock.poll(timeout * 1000):
            return False
        return sock.recv() == payload
    finally:
        sock.close()


def wait_paused(s, qemu, count=1):
    """The count-th pause: logged, QEMU gone, and the status file saying so (it is written on
    a thread of its own, a moment after the log line)."""
    wait_log(s, "event=session.paused", count)
    assert wait_gone([qemu], TIMEOUT), f"QEMU {qemu} still runs after the pause"
    assert qemu_children(s.gateway_pid) == []
    deadline = time.monotonic() + 10
    while (session_status(s.gateway_pid) or {}).get("state") != "paused":
        assert time.monotonic() < deadline, session_status(s.gateway_pid)
        time.sleep(0.1)


@pytest.fixture(params=["same-fs", "other-fs"])
def pause_store(request, tmp_path):
    """A store beside the test's files (the run dirs' filesystem), or on a tmpfs mounted for the
    test (another filesystem than the run dirs', as a store on its own disk would be)."""
    if request.param == "same-fs":
        yield tmp_path / "store"
        return
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g,mode=0700", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt / "store"
    finally:
        if subprocess.run(["umount", str(mnt)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)])


# --------------------------------------------------------------------------
# Idle pauses

@pytest.mark.slow
def test_idle_pause_saves_stops_and_resumes_on_the_next_request(pause_store):
    store = pause_store
    s = start("cellvm", "idlepause", ["--snapshot-dir", store, "--idle-pause", IDLE_PAUSE])
    try:
        r = s.run(SETUP)
        assert r.status == "ok", r.describe()
        qemu = s.qemu_pid()
        name = f"paused-{identity_of(s)}"
        wait_paused(s, qemu)
        st = session_status(s.gateway_pid)
        assert st is not None, "the paused gateway is not in `cellvm ls`"
        assert st["state"] == "paused" and st["qemu_pid"] == 0, st
        assert st["paused_snapshot"] == name, st
        # The gateway gave back its read-only file pages (gw_memtrim: MADV_PAGEOUT).
        m = re.findall(r"event=session\.paused .*pageout_advised_kib=(\d+)", s.log_text())
        assert m and int(m[-1]) > 1024, s.log_text()[-2000:]
        # ... and the cells' output kept for cellvm_replay_request (docs/replay.md).
        wait_log(s, "event=replay.released", timeout=10)
        snaps = snapshot_list(store)
        assert name in snaps and snaps[name]["reason"] == "idle-pause", snaps
        # Heartbeats are answered while paused, and do not wake the VM.
        for _ in range(3):
            assert hb_ping(s), "a heartbeat was not answered while paused"
            time.sleep(2)
        assert s.km.is_alive()
        assert s.kc.hb_channel.is_beating(), "the client's heartbeat channel stopped beating"
        assert qemu_children(s.gateway_pid) == [], "a heartbeat woke the VM"
        assert session_status(s.gateway_pid)["state"] == "paused"
        # The next request resumes it.
        assert last_json(s.output(STATE, timeout=READY_TIMEOUT)) == EXPECTED
        log = s.log_text()
        assert "event=session.resuming" in log and f"snapshot={name}" in log, log[-3000:]
        assert "event=vm.resumed" in log, log[-3000:]
        qemu2 = s.qemu_pid()
        assert qemu2 != qemu
        st = session_status(s.gateway_pid)
        assert st["state"] in ("idle", "running") and st["qemu_pid"] == qemu2, st
        # Again: new state, a second pause under the same name, a second resume.
        s.output("y = x.upper()\nopen('/workspace/second.txt', 'w').write('two')")
        wait_paused(s, qemu2, count=2)
        assert s.output("print(y, open('/workspace/second.txt').read())",
                        timeout=READY_TIMEOUT).split() == ["KEPT", "IN", "RAM", "two"]
        assert last_json(s.output(STATE)) == EXPECTED
        gw = s.gateway_pid
    finally:
        s.close()
    assert wait_gone([gw], 10)
    assert wait_no_leftovers([gw], timeout=10) == []
    left = [n for n in snapshot_list(store) if n.startswith("paused-")]
    assert left == [], f"the ended session left its pause in the store: {left}"


@pytest.mark.slow
def test_a_gateway_killed_while_paused_leaves_a_resumable_snapshot(tmp_path):
    store = tmp_path / "store"
    s = start("cellvm", "pausekill", ["--snapshot-dir", store, "--idle-pause", IDLE_PAUSE])
    try:
        r = s.run(SETUP)
        assert r.status == "ok", r.describe()
        qemu = s.qemu_pid()
        wait_paused(s, qemu)
        paused = [n for n in snapshot_list(store) if n.startswith("paused-")]
        assert paused == [f"paused-{identity_of(s)}"], paused
        gw = s.gateway_pid
        os.kill(gw, signal.SIGKILL)
        assert wait_gone([gw], 10)
    finally:
        s.close()
    snaps = snapshot_list(store)
    assert paused[0] in snaps, f"the paused snapshot went with its gateway: {snaps}"
    r = start("cellvm", "pausekill-resume",
              ["--snapshot-dir", store, "--from-snapshot", paused[0]])
    try:
        assert last_json(r.output(STATE, timeout=READY_TIMEOUT)) == EXPECTED
        assert r.output("open('/workspace/new.txt', 'w').write('n'); "
                        "print(open('/workspace/new.txt').read())").strip() == "n"
    finally:
        r.close()


def test_an_idle_pause_into_a_full_store_says_so_and_the_session_runs_on(tmp_path):
    """The store has room for a few MB, the VM's RAM needs hundreds: the pause fails, the log
    says why in words, the session keeps running in RAM, nothing of the attempt is left under
    any name, and the next attempt waits twice as long."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", str(mnt)],
                   check=True)
    store = mnt / "store"
    s = None
    try:
        s = start("cellvm", "pausefull", ["--snapshot-dir", store, "--idle-pause", IDLE_PAUSE])
        r = s.run(SETUP)
        assert r.status == "ok", r.describe()
        qemu = s.qemu_pid()
        wait_log(s, "event=session.pause_failed")
        line = [ln for ln in s.log_text().splitlines() if "session.pause_failed" in ln][0]
        assert "space" in line.lower(), f"the log does not say the store is full: {line}"
        m = re.search(r"retry_after_s=(\d+)", line)
        assert m and int(m.group(1)) == 2 * IDLE_PAUSE, line
        assert "event=session.paused" not in s.log_text()
        assert s.qemu_pid() == qemu, "the VM did not keep running"
        assert qemu_children(s.gateway_pid) == [qemu]
        assert last_json(s.output(STATE)) == EXPECTED
        assert (session_status(s.gateway_pid) or {}).get("state") in ("idle", "running")
        assert snapshot_list(store) == {}, "a failed pause is visible in the store"
        left = [p.name for p in store.iterdir()
                if p.name.startswith((".staging", ".trash", "paused-"))] if store.exists() else []
        assert left == [], f"the failed pause left {left} in the store"
        st = os.statvfs(mnt)
        assert (st.f_blocks - st.f_bfree) * st.f_frsize < 1 << 20, "its bytes are still there"
    finally:
        if s is not None:
            s.close()
        if subprocess.run(["umount", str(mnt)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)])


# --------------------------------------------------------------------------
# Lifetimes

def watch_until_exit(s, timeout):
    """Every iopub message until the gateway exits (and a little after, for what was queued)."""
    msgs = []
    deadline = time.monotonic() + timeout
    exited_at = None
    while True:
        now = time.monotonic()
        if exited_at is None and s.proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 2:
            return msgs
        if now > deadline:
            raise AssertionError(f"the gateway still runs after {timeout} s; iopub: "
                                 f"{[(m['msg_type'], m['content']) for m in msgs][-10:]}\n"
                                 + s.log_text()[-3000:])
        try:
            msgs.append(s.kc.get_iopub_msg(timeout=0.5))
        except queue.Empty:
            pass


def assert_ended_cleanly(s, msgs, flag):
    streams = [m["content"]["text"] for m in msgs
               if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    why = [t for t in streams if flag in t]
    assert len(why) == 1 and len(streams) == 1, \
        f"want one stderr stream naming {flag}; got {streams}"
    gw = s.gateway_pid
    pids = list(s.procs)
    assert wait_gone(pids, 10), "the gateway or its QEMU outlived the session's end"
    assert wait_no_leftovers(pids, timeout=10) == []
    assert not (run_base() / "sessions" / f"{gw}.json").exists(), "its status file is left"
    assert not (run_base() / "kept" / identity_of(s)).exists(), "its workspace was kept"


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.slow
def test_idle_timeout_ends_the_session_with_one_message(backend):
    s = start(BACKENDS[backend], f"idletimeout-{backend}", ["--idle-timeout", 10])
    try:
        assert s.output("x = 1\nprint('ran')").strip() == "ran"
        msgs = watch_until_exit(s, PAUSE_TIMEOUT)
        assert_ended_cleanly(s, msgs, "--idle-timeout")
    finally:
        s.close()


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.slow
def test_ttl_ends_even_a_busy_session_with_one_message(backend):
    ttl = 90 if backend == "microvm" else 20
    s = start(BACKENDS[backend], f"ttl-{backend}", ["--ttl", ttl])
    try:
        msg_id = s.kc.execute("import time\nfor i in range(6000): time.sleep(0.1)")
        msgs = watch_until_exit(s, ttl + PAUSE_TIMEOUT)
        assert_ended_cleanly(s, msgs, "--ttl")
        started = [m for m in msgs if m["parent_header"].get("msg_id") == msg_id
                   and m["msg_type"] == "execute_input"]
        assert started, "the cell never ran before the ttl ended the session"
        replies = []
        while True:
            try:
                m = s.kc.get_shell_msg(timeout=1)
            except queue.Empty:
                break
            if m["parent_header"].get("msg_id") == msg_id:
                replies.append(m)
        assert [r["content"]["status"] for r in replies] == ["error"], \
            f"the running cell got no error reply before the gateway exited: {replies}"
    finally:
        s.close()


# --------------------------------------------------------------------------
# Acceptance: a big DataFrame and an open file through snapshot, SIGKILL, resume

DF_STATE = ("import json, hashlib, numpy as np\n"
            "v = np.ascontiguousarray(df.values)\n"
            "print(json.dumps({'bytes': int(df.memory_usage().sum()), 'shape': list(df.shape),"
            " 'sha': hashlib.sha256(memoryview(v).cast('B')).hexdigest(),"
            " 'sum': float(df[0].sum()), 'closed': f.closed, 'name': f.name}))")


@pytest.mark.parametrize("vm", list(ACCEPT_ARGS))
@pytest.mark.slow
def test_a_dataframe_and_an_open_file_survive_snapshot_sigkill_resume(tmp_path, vm):
    require_image(IMAGE)
    store = tmp_path / "store"
    s = start("cellvm", f"accept-{vm}", ["--snapshot-dir", store] + ACCEPT_ARGS[vm])
    try:
        r = s.run("import numpy as np, pandas as pd\n"
                  "df = pd.DataFrame(np.random.rand(25_000_000, 1))\n"
                  "f = open('/workspace/log.txt', 'a')\n"
                  "f.write('x')", timeout=READY_TIMEOUT)
        assert r.status == "ok", r.describe()
        before = last_json(s.output(DF_STATE, timeout=READY_TIMEOUT))
        assert before["bytes"] >= 200_000_000 and before["shape"] == [25_000_000, 1], before
        assert before["closed"] is False
        rep = snapshot_request(s, "accept", timeout=SNAP_TIMEOUT)
        assert rep["content"]["status"] == "ok", rep["content"]
        gw, qemu = s.gateway_pid, s.qemu_pid()
        os.kill(gw, signal.SIGKILL)
        assert wait_gone([gw, qemu], 10), "the gateway or its QEMU outlived the SIGKILL"
    finally:
        s.close()
    assert "accept" in snapshot_list(store)
    r = start("cellvm", f"accept-{vm}-resume",
              ["--snapshot-dir", store, "--from-snapshot", "accept"] + ACCEPT_ARGS[vm])
    try:
        after = last_json(r.output(DF_STATE, timeout=READY_TIMEOUT))
        assert after == before, (before, after)
        out = r.output("f.write('y')\nf.flush()\n"
                       "print(f.closed, open('/workspace/log.txt').read())", timeout=READY_TIMEOUT)
        assert out.split() == ["False", "xy"], out
    finally:
        r.close()
