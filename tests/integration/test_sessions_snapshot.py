"""Snapshots of a running session and sessions started from them (docs/sessions.md, "Snapshots",
"Sessions started from a snapshot"; the store's layout: gateway/snap/gw_snapstore.h).

- cellvm_snapshot_request on the control channel: the reply, the store's files and meta.json,
  a generated name, a name taken (SnapshotExists), bad names (BadRequest, nothing written
  outside the store), a running cell (SessionBusy), a full disk (an error saying so, the
  session goes on, nothing kept under the name);
- starts from a snapshot (--from-snapshot NAME, or CELLVM_FROM_SNAPSHOT / CELLVM_SNAPSHOT_DIR in
  the kernel's env): variables, imports and /workspace as at the snapshot; two forks at once,
  each with its own /workspace and its own random values;
- a bad start (unknown name, flipped bytes in the state, a truncated state, another memory
  size in meta.json): the gateway exits non-zero with one line naming the snapshot and the
  problem, and nothing else in the store is touched;
- two starts while `cellvm snapshot rm` removes their snapshot: each works fully or fails
  cleanly, never half.

One source session (microvm, default options, its own store under pytest's tmp dir) serves the
module; its snapshot "base" is copied into each test's own store where a test changes things.
Every session is a sessions.Session, closed (killed by pid) at the end.
"""
import json
import os
import pathlib
import queue
import re
import shutil
import subprocess
import time

import pytest

from sessions import (IMAGE, READY_TIMEOUT, TIMEOUT, cellvm_cli, open_session, ram_digest,
                      require_image, session_status, sha_file, snapshot_list, snapshot_request,
                      store_tree, wait_ready_or_exit)

VM_STARTED = re.compile(r"event=vm\.(?:booting|spawned|restored|resumed|resume_failed|"
                        r"cold_boot)")
NAME_RE = re.compile(r"^snap-\d{8}-\d{6}-[0-9a-f]{4}$")
SNAP_TIMEOUT = 600                  # a snapshot's reply: RAM and disk written, under TCG


@pytest.fixture(autouse=True)
def _image_required():
    require_image(IMAGE)


def start(name, store=None, args=(), env=None, wait=True):
    """A microvm session of the `cellvm` kernelspec with --snapshot-dir store (when given)."""
    extra = (["--snapshot-dir", str(store)] if store else []) + list(args)
    return open_session("cellvm", name, extra, wait, env=env)


SETUP = ("import os, sys, json, random, numpy\n"
         "x = 4242\n"
         "arr = numpy.arange(1000)\n"
         "open('/workspace/base.txt', 'w').write('at snapshot')\n")
AFTER = ("x = 0\n"
         "open('/workspace/after.txt', 'w').write('after the snapshot')\n")
STATE = ("print(json.dumps({'x': x, 'arr': int(arr.sum()), 'numpy': 'numpy' in sys.modules,"
         " 'base': open('/workspace/base.txt').read() if os.path.exists('/workspace/base.txt')"
         " else None, 'after': os.path.exists('/workspace/after.txt')}))")
EXPECTED = {"x": 4242, "arr": 499500, "numpy": True, "base": "at snapshot", "after": False}
RANDOM = ("import os, random, numpy, json\n"
          "print(json.dumps({'random': random.random(), 'numpy': float(numpy.random.random()),"
          " 'urandom': os.urandom(8).hex()}))")


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(source session, its store, the reply to snapshot "base", the source's execution count at
    the snapshot). After the snapshot the source changes x and writes after.txt."""
    store = tmp_path_factory.mktemp("snapstore") / "store"
    src = start("snap-src", store)
    try:
        r = src.run(SETUP)
        assert r.status == "ok", r.describe()
        count = r.content["execution_count"]
        rep = snapshot_request(src, "base", timeout=SNAP_TIMEOUT)
        assert src.run(AFTER).status == "ok"
        yield src, store, rep, count
    finally:
        src.close()


def copy_snapshot(src_dir, store, name, link=True):
    """A copy of snapshot src_dir as store/name (its meta.json renamed); the big files hard
    linked unless link is False (a test that damages them copies)."""
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    dst = store / name
    dst.mkdir(mode=0o700)
    for f in ("state", "ram", "workspace.qcow2"):
        if not (src_dir / f).exists():
            continue
        if link:
            os.link(src_dir / f, dst / f)
        else:
            shutil.copyfile(src_dir / f, dst / f)
            os.chmod(dst / f, 0o600)
    meta = json.loads((src_dir / "meta.json").read_text())
    meta["name"] = name
    (dst / "meta.json").write_text(json.dumps(meta))
    os.chmod(dst / "meta.json", 0o600)
    return dst


def leftover_entries(store):
    """Staging and trash directories left in the store."""
    return [p.name for p in pathlib.Path(store).iterdir()
            if p.name.startswith((".staging", ".trash"))] if pathlib.Path(store).exists() else []


def one_error_line(s):
    """The gateway's one human line (cellvm-gateway: ...) in its output."""
    lines = [ln for ln in s.log_text().splitlines() if ln.startswith("cellvm-gateway: ")]
    assert len(lines) == 1, f"want one cellvm-gateway: line, got {lines}:\n{s.log_text()[-3000:]}"
    return lines[0]


# --------------------------------------------------------------------------
# Taking snapshots

def test_snapshot_reply_store_files_and_meta(base):
    src, store, rep, count = base
    assert rep["msg_type"] == "cellvm_snapshot_reply", rep["msg_type"]
    c = rep["content"]
    assert c["status"] == "ok", c
    assert c["name"] == "base"
    for k in ("bytes", "ms", "pause_ms", "split_ms"):
        assert isinstance(c[k], int) and c[k] >= 0, (k, c)
    d = store / "base"
    assert sorted(p.name for p in d.iterdir()) == ["meta.json", "ram", "state",
                                                   "verified-ram.json", "verified.json",
                                                   "workspace.qcow2"]
    assert c["bytes"] >= (d / "state").stat().st_size > 0
    meta = json.loads((d / "meta.json").read_text())
    image = json.loads((IMAGE / "image.json").read_text())
    assert meta["format"] == 2 and meta["name"] == "base", meta
    # Guest RAM in its own file (gw_snapram.h), hashed and stamped as the state is.
    assert meta["ram_bytes"] == meta["mem_mib"] << 20 == (d / "ram").stat().st_size, meta
    assert meta["ram_digest"] == ram_digest(d / "ram")
    ram_stamp, ram_st = json.loads((d / "verified-ram.json").read_text()), (d / "ram").stat()
    assert ram_stamp["state_sha256"] == meta["ram_digest"], ram_stamp
    assert (ram_stamp["ino"], ram_stamp["size"]) == (ram_st.st_ino, ram_st.st_size), ram_stamp
    assert abs(meta["created"] - time.time()) < 3600, meta["created"]
    assert meta["image_hash"] == image["image_hash"], meta
    assert isinstance(meta["qemu_version"], str) and meta["qemu_version"], meta
    for k in ("mem_mib", "vcpus", "disk_bytes", "tsc_khz"):
        assert isinstance(meta.get(k), int) and meta[k] > 0, (k, meta)
    assert "accel" in meta and "cpu" in meta and "append" in meta, meta
    assert meta["state_bytes"] == (d / "state").stat().st_size
    assert meta["state_sha256"] == sha_file(d / "state")
    # The stamp (gw_snapstamp.h): that hash, for exactly this file, so resumes skip it.
    stamp, st = json.loads((d / "verified.json").read_text()), (d / "state").stat()
    assert stamp["state_sha256"] == meta["state_sha256"], stamp
    assert (stamp["ino"], stamp["size"], stamp["ctime_ns"]) == \
        (st.st_ino, st.st_size, st.st_ctime_ns % 10**9), (stamp, st)
    assert meta["disk_file_bytes"] == (d / "workspace.qcow2").stat().st_size
    assert (d / "workspace.qcow2").read_bytes()[:4] == b"QFI\xfb"
    assert meta["reason"] == "request", meta
    assert meta.get("source", {}).get("execution_count") == count, meta.get("source")
    assert meta["source"].get("kernel_name") in (src.km.kernel_name, "cellvm"), meta["source"]
    assert leftover_entries(store) == []
    listed = snapshot_list(store)
    assert "base" in listed and listed["base"]["reason"] == "request", listed
    assert src.value("x") == "0", "the source session did not go on after the snapshot"


def test_a_snapshot_without_a_name_gets_a_fresh_one(base):
    src, store, _, _ = base
    rep = snapshot_request(src, timeout=SNAP_TIMEOUT)
    c = rep["content"]
    assert c["status"] == "ok", c
    assert NAME_RE.match(c["name"]), c["name"]
    assert (store / c["name"] / "meta.json").exists()
    assert c["name"] in snapshot_list(store)
    assert src.value("x") == "0"


def test_a_name_taken_is_refused_and_the_snapshot_kept(base):
    src, store, _, _ = base
    before = store_tree(store / "base")
    meta = (store / "base" / "meta.json").read_bytes()
    rep = snapshot_request(src, "base", timeout=SNAP_TIMEOUT)
    c = rep["content"]
    assert rep["msg_type"] == "cellvm_snapshot_reply"
    assert c["status"] == "error" and c["ename"] == "SnapshotExists", c
    assert "base" in c["evalue"], c
    assert store_tree(store / "base") == before
    assert (store / "base" / "meta.json").read_bytes() == meta
    assert leftover_entries(store) == []
    assert src.value("x") == "0"


BAD_NAMES = {"dotdot": "../x", "empty": "", "long": "a" * 65, "slash": "a/b", "dot": ".x",
             "space": "a b", "newline": "x\n", "nonascii": "é", "int": 5, "list": ["a"]}


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_bad_names_are_refused_and_nothing_is_written(base, name):
    src, store, _, _ = base
    before = store_tree(store)
    outside = sorted(p.name for p in store.parent.iterdir())
    rep = snapshot_request(src, content={"name": name}, timeout=SNAP_TIMEOUT)
    c = rep["content"]
    assert rep["msg_type"] == "cellvm_snapshot_reply"
    assert c["status"] == "error" and c["ename"] == "BadRequest", c
    assert "[A-Za-z0-9_-]" in c["evalue"], c["evalue"]
    assert store_tree(store) == before, "the store changed"
    assert sorted(p.name for p in store.parent.iterdir()) == outside, \
        "something was written beside the store"
    assert src.value("x") == "0"


def test_a_snapshot_while_a_cell_runs_is_refused(base):
    src, store, _, _ = base
    before = store_tree(store)
    msg_id = src.kc.execute("import time\nfor i in range(600): time.sleep(0.1)")
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            m = src.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
            break
    else:
        raise AssertionError("the cell never started")
    rep = snapshot_request(src, "during-cell", timeout=TIMEOUT)
    c = rep["content"]
    assert c["status"] == "error" and c["ename"] == "SessionBusy", c
    assert "between cells" in c["evalue"], c["evalue"]
    src.km.interrupt_kernel()
    r = src.collect(msg_id, timeout=TIMEOUT)
    assert r.status == "error", r.describe()
    assert store_tree(store) == before
    rep = snapshot_request(src, "after-cell", timeout=SNAP_TIMEOUT)
    assert rep["content"]["status"] == "ok", rep["content"]


# --------------------------------------------------------------------------
# Starting from a snapshot

def test_forks_resume_the_state_with_their_own_workspace_and_randomness(base, tmp_path):
    _, store, rep, _ = base
    assert rep["content"]["status"] == "ok", rep["content"]
    # One names the snapshot by option; the other by environment only, store included.
    a = start("fork-a", store, args=["--from-snapshot", "base"], wait=False)
    b = start("fork-b", env={"CELLVM_FROM_SNAPSHOT": "base",
                             "CELLVM_SNAPSHOT_DIR": str(store)}, wait=False)
    try:
        for s in (a, b):
            s.wait_ready()
            assert "event=vm.resumed" in s.log_text() and "snapshot=base" in s.log_text(), \
                s.log_text()[-3000:]
            got = last_json(s.output(STATE))
            assert got == EXPECTED, f"{s.name}: {got}"
            st = session_status(s.gateway_pid)
            assert st and st.get("from_snapshot") == "base", st
        a.output("open('/workspace/only-a.txt', 'w').write('a')")
        b.output("open('/workspace/only-b.txt', 'w').write('b')")
        seen = {s.name: last_json(s.output(
            "import os, json\nprint(json.dumps(sorted(os.listdir('/workspace'))))"))
            for s in (a, b)}
        assert "only-a.txt" in seen["fork-a"] and "only-b.txt" not in seen["fork-a"], seen
        assert "only-b.txt" in seen["fork-b"] and "only-a.txt" not in seen["fork-b"], seen
        ra, rb = (last_json(s.output(RANDOM)) for s in (a, b))
        for k in ("random", "numpy", "urandom"):
            assert ra[k] != rb[k], f"two forks share {k}: {ra[k]}"
    finally:
        a.close()
        b.close()
    assert (store / "base" / "meta.json").exists(), "a fork consumed the snapshot"


BAD_STARTS = {
    "unknown": "no snapshot",
    "flipped": "corrupt",
    "truncated": "truncated",
    "flipped-ram": "corrupt",
    "truncated-ram": "truncated",
    "memory": "memory",
}


@pytest.mark.parametrize("how", list(BAD_STARTS))
def test_a_bad_start_exits_with_one_line_and_touches_nothing(base, tmp_path, how):
    _, src_store, _, _ = base
    store = tmp_path / "store"
    copy_snapshot(src_store / "base", store, "good")
    name = "nosuch"
    if how != "unknown":
        name = "bad"
        bad = copy_snapshot(src_store / "base", store, name, link=how == "memory")
        victim = bad / ("ram" if how.endswith("-ram") else "state")
        if how.startswith("flipped"):
            with open(victim, "r+b") as f:
                size = f.seek(0, os.SEEK_END)
                for off in (size // 3, size // 2, size - 100):
                    f.seek(off)
                    byte = f.read(1)
                    f.seek(off)
                    f.write(bytes([byte[0] ^ 0xFF]))
        elif how.startswith("truncated"):
            with open(victim, "r+b") as f:
                f.truncate(f.seek(0, os.SEEK_END) // 2)
        else:
            meta = json.loads((bad / "meta.json").read_text())
            meta["mem_mib"] = meta["mem_mib"] * 2
            (bad / "meta.json").write_text(json.dumps(meta))
    before = store_tree(store)
    s = start(f"badstart-{how}", store, env={"CELLVM_FROM_SNAPSHOT": name}, wait=False)
    try:
        try:
            rc = s.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the gateway still runs {TIMEOUT} s after a bad start "
                                 f"({how}):\n{s.log_text()[-3000:]}")
        assert rc != 0, s.log_text()[-3000:]
        line = one_error_line(s)
        assert f'"{name}"' in line or name in line, line
        assert BAD_STARTS[how] in line, line
        started = VM_STARTED.findall(s.log_text())
        assert not started, (f"a VM was started ({started}) for a snapshot that cannot be "
                             f"resumed:\n" + s.log_text()[-3000:])
    finally:
        s.close()
    after = store_tree(store)
    assert {k: v for k, v in after.items() if k.startswith("good")} == \
        {k: v for k, v in before.items() if k.startswith("good")}, "the good snapshot changed"
    assert set(after) - set(before) == set(), f"new files in the store: {set(after) - set(before)}"


@pytest.mark.parametrize("when", [0.0, 0.05, 0.2, 0.5, 1.5, "listening"])
def test_starts_racing_a_snapshot_rm_work_fully_or_fail_cleanly(base, tmp_path, when):
    """`when`: seconds after both launches, or as soon as the first gateway listens (it has
    checked the snapshot; its VM has not taken it yet)."""
    _, src_store, _, _ = base
    store = tmp_path / "store"
    copy_snapshot(src_store / "base", store, "race")
    forks = [start(f"race-{i}", store, env={"CELLVM_FROM_SNAPSHOT": "race"}, wait=False)
             for i in range(2)]
    try:
        if when == "listening":
            deadline = time.monotonic() + TIMEOUT
            while "event=gateway.listening" not in forks[0].log_text() \
                    and forks[0].proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
        else:
            time.sleep(when)
        rm = cellvm_cli("snapshot", "rm", "race", "--snapshot-dir", store)
        removed = rm.returncode == 0
        if removed:
            assert not (store / "race").exists(), rm
        else:
            assert rm.returncode == 1 and "race" in rm.stderr, (rm.returncode, rm.stdout, rm.stderr)
            assert json.loads((store / "race" / "meta.json").read_text())["name"] == "race"
        outcomes = []
        for s in forks:
            ok = wait_ready_or_exit(s)
            outcomes.append(ok)
            if ok:
                got = last_json(s.output(STATE, timeout=READY_TIMEOUT))
                assert got == EXPECTED, f"{s.name} started but is not whole: {got}"
                assert s.output("open('/workspace/w.txt', 'w').write('ok'); "
                                "print(open('/workspace/w.txt').read())").strip() == "ok"
                assert s.proc.poll() is None
            else:
                assert s.proc.returncode != 0, s.log_text()[-3000:]
                line = one_error_line(s)
                assert "race" in line, line
        assert leftover_entries(store) == [], leftover_entries(store)
    finally:
        for s in forks:
            s.close()
    if removed:
        late = start("race-late", store, env={"CELLVM_FROM_SNAPSHOT": "race"}, wait=False)
        try:
            assert late.proc.wait(timeout=TIMEOUT) != 0
            assert "no snapshot" in one_error_line(late)
        finally:
            late.close()


# --------------------------------------------------------------------------
# A full disk

@pytest.fixture
def small_store(tmp_path):
    """A store on a 50 MB tmpfs mounted for this test (unmounted after)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m,mode=0700", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)])


@pytest.mark.slow
def test_a_full_disk_fails_the_snapshot_and_the_session_goes_on(small_store):
    store = small_store / "store"
    s = start("diskfull", store)
    try:
        r = s.run("import os\nbig = os.urandom(80 << 20)\n"
                  "open('/workspace/before.txt', 'w').write('before')")
        assert r.status == "ok", r.describe()
        rep = snapshot_request(s, "full", timeout=SNAP_TIMEOUT)
        c = rep["content"]
        assert rep["msg_type"] == "cellvm_snapshot_reply"
        assert c["status"] == "error" and c["ename"] == "SnapshotFailed", c
        assert s.value("len(big)") == str(80 << 20), "the session did not go on"
        s.output("open('/workspace/after.txt', 'w').write('after')")
        assert not (store / "full").exists()
        assert leftover_entries(store) == []
        st = os.statvfs(small_store)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        assert used < 1 << 20, f"{used} bytes of a failed snapshot are still in the store"
        # With room, the same name works, and a start from it has everything.
        subprocess.run(["mount", "-o", "remount,size=4g", str(small_store)], check=True)
        rep = snapshot_request(s, "full", timeout=SNAP_TIMEOUT)
        assert rep["content"]["status"] == "ok", rep["content"]
    finally:
        s.close()
    f = start("diskfull-fork", store, env={"CELLVM_FROM_SNAPSHOT": "full"})
    try:
        assert f.value("len(big)") == str(80 << 20)
        assert f.output("print(open('/workspace/before.txt').read(), "
                        "open('/workspace/after.txt').read())").split() == ["before", "after"]
    finally:
        f.close()
    # Last, so that everything above is checked too: the words name the cause.
    assert "space" in c["evalue"].lower(), \
        f"the error does not say the disk is full (no space): {c['evalue']!r}"
