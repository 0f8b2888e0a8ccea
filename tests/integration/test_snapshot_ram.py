"""A snapshot's RAM as a file that resumes map (docs/snapshots.md, "Resume maps RAM";
gateway/snap/gw_snapram.h, gw_migsplit.h; the guard: gateway/base/gw_readlease.h).

- a fork and the session it was taken from write the same page: each sees its own, a second
  fork sees the snapshot's, and the snapshot's RAM file is unchanged;
- a resumed session whose RAM file is written to or truncated while it runs: the writer waits
  until the VM is stopped, the gateway says why (log and client), and no cell ever sees the
  changed memory;
- a resume refuses a RAM file that another process holds open for writing, in words;
- a RAM file whose metadata changed (a chmod) is hashed again and resumes.

One source session (its own store under pytest's tmp dir) makes snapshot "p" for the module.
Every session is a sessions.Session, closed (killed by pid) at the end.
"""
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from sessions import (IMAGE, TIMEOUT, open_session, ram_digest, require_image, sha_file,
                      snapshot_request)

PAGE = 4096
FILL = ("import hashlib\n"
        "buf = bytearray(b'a' * (32 << 20))\n"
        "digest = hashlib.sha256(buf).hexdigest()\n")
AT = 100 * PAGE + 17                # one byte of one page, the same in every session


@pytest.fixture(autouse=True)
def _image_required():
    require_image(IMAGE)


def start(name, store, args=(), wait=True):
    return open_session("cellvm", name, ["--snapshot-dir", str(store), *map(str, args)], wait)


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    """(the source session, still running, and its store holding snapshot "p")."""
    store = tmp_path_factory.mktemp("ramstore") / "store"
    src = start("ram-src", store)
    try:
        assert src.run(FILL).status == "ok"
        rep = snapshot_request(src, "p")
        assert rep["content"]["status"] == "ok", rep["content"]
        yield src, store
    finally:
        src.close()


def copy_snapshot(store, name, dst_store):
    """Snapshot name copied whole (RAM included) into dst_store: a test that damages it."""
    dst_store.mkdir(mode=0o700, parents=True, exist_ok=True)
    dst = dst_store / name
    shutil.copytree(store / name, dst)
    return dst


def test_the_snapshot_keeps_ram_in_a_mapped_file(snap):
    _, store = snap
    d = store / "p"
    meta = json.loads((d / "meta.json").read_text())
    assert meta["format"] == 2, meta
    assert meta["ram_bytes"] == meta["mem_mib"] << 20 == (d / "ram").stat().st_size
    assert meta["ram_digest"] == ram_digest(d / "ram")
    # The stream holds device state only: far below the 32 MiB the guest filled.
    assert meta["state_bytes"] == (d / "state").stat().st_size < 1 << 20, meta
    assert (d / "ram").stat().st_blocks * 512 < meta["ram_bytes"], "the RAM file is not sparse"


def test_a_fork_and_its_parent_write_the_same_page_and_each_sees_its_own(snap):
    src, store = snap
    before = sha_file(store / "p" / "ram")
    a = start("ram-fork-a", store, ["--from-snapshot", "p"], wait=False)
    b = start("ram-fork-b", store, ["--from-snapshot", "p"], wait=False)
    try:
        a.wait_ready()
        b.wait_ready()
        for s, mark in ((src, "S"), (a, "A")):
            assert s.run(f"buf[{AT}] = ord('{mark}')").status == "ok"
        for s, want in ((src, "S"), (a, "A"), (b, "a")):
            got = s.value(f"chr(buf[{AT}]), buf.count(b'a') == len(buf) - (buf[{AT}] != 97), "
                          "hashlib.sha256(bytes(buf[:4096])).hexdigest() != ''")
            assert got == f"('{want}', True, True)", (s.name, got)
        assert b.value("hashlib.sha256(buf).hexdigest() == digest") == "True"
    finally:
        a.close()
        b.close()
    assert sha_file(store / "p" / "ram") == before, "a guest's write reached the snapshot"


def test_a_ram_file_whose_metadata_changed_is_hashed_again_and_resumes(snap, tmp_path):
    """A chmod changes the file's ctime, so its stamp no longer holds: the start hashes it
    again (under the lease) instead of refusing a file whose content is intact."""
    _, store = snap
    d = copy_snapshot(store, "p", tmp_path / "store")
    s = start("ram-chmod-0", tmp_path / "store", ["--from-snapshot", "p"])
    s.close()
    os.chmod(d / "ram", 0o644)
    s = start("ram-chmod-1", tmp_path / "store", ["--from-snapshot", "p"])
    try:
        assert s.value("hashlib.sha256(buf).hexdigest() == digest") == "True"
    finally:
        s.close()


def iopub_text(s, seconds):
    """The text of every iopub message for seconds: streams, errors, statuses."""
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            m = s.kc.get_iopub_msg(timeout=0.2)
        except Exception:
            continue
        c = m.get("content", {})
        out.append(" ".join(str(c.get(k, "")) for k in ("text", "evalue", "execution_state")))
    return "\n".join(out)


def _write_over(path):
    with open(path, "r+b") as f:                # waits for the lease: the VM is stopped first
        f.seek(1 << 20)
        f.write(b"\xee" * (64 << 20))


HOW = {"written": _write_over, "truncated": lambda p: os.truncate(p, 1 << 20)}


@pytest.mark.parametrize("how", list(HOW))
def test_a_ram_file_changed_under_a_running_resume_stops_it_first(snap, tmp_path, how):
    _, store = snap
    copy_snapshot(store, "p", tmp_path / "store")
    s = start(f"ram-changed-{how}", tmp_path / "store", ["--from-snapshot", "p"])
    try:
        assert s.value("buf[0] == 97") == "True"
        HOW[how](tmp_path / "store" / "p" / "ram")
        seen = iopub_text(s, 3)
        r = s.run("hashlib.sha256(buf).hexdigest() == digest", timeout=TIMEOUT)
        log = s.log_text()
        assert "event=vm.ram_changed" in log, log[-3000:]
        assert "opened for writing or truncated" in log, log[-3000:]
        # Never the changed memory: the VM that mapped it is gone, the kernel is a new one.
        assert r.status == "error" and "True" not in r.results(), r.describe()
        assert "RAM file" in seen or "RAM file" in r.describe(), \
            f"the client was not told why:\n{seen}\n{r.describe()}"
    finally:
        s.close()


def test_a_resume_refuses_a_ram_file_open_for_writing(snap, tmp_path):
    _, store = snap
    d = copy_snapshot(store, "p", tmp_path / "store")
    fd = os.open(d / "ram", os.O_RDWR)
    try:
        s = start("ram-open", tmp_path / "store", ["--from-snapshot", "p"], wait=False)
        try:
            try:
                rc = s.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                raise AssertionError("the gateway runs on with a RAM file open for writing:\n"
                                     + s.log_text()[-3000:])
            assert rc != 0
            log = s.log_text()
            assert '"p"' in log and "open for writing by another process" in log, log[-3000:]
            assert "event=vm.restored" not in log and "event=vm.resumed" not in log, log[-3000:]
        finally:
            s.close()
    finally:
        os.close(fd)


def _ram_mapping(pid):
    """(path, Private_Dirty bytes) of the file QEMU maps as guest RAM."""
    with open(f"/proc/{pid}/smaps") as f:
        text = f.read()
    path, dirty = None, 0
    current = None
    for line in text.splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 6 and head[-1].endswith("/ram"):
            current = head[-1]
        elif head and "-" in head[0]:
            current = None
        elif current and line.startswith("Private_Dirty:"):
            path, dirty = current, dirty + int(head[1]) * 1024
    assert path, f"QEMU {pid} maps no RAM file"
    return pathlib.Path(path), dirty


@pytest.mark.parametrize("how", ["template", "fork", "fork-unjailed"])
def test_memory_the_guest_frees_returns_to_the_host_and_the_mapped_file_stays_whole(
        snap, how):
    """Free page reporting: 192 MiB a cell fills, then frees, leaves QEMU's private copy of
    guest RAM within seconds. A fork also frees the 32 MiB buffer its snapshot holds, pages
    that are data in the snapshot's RAM file: QEMU 7.2 punches what its guest frees out of
    the file it maps, private mapping or not, so without the shim (jailshim.c), jailed or
    not, that file, which every fork of it maps, would lose them. It must stay byte for byte
    what it was, holes included."""
    _, store = snap
    args = {"template": [], "fork": ["--from-snapshot", "p"],
            "fork-unjailed": ["--from-snapshot", "p", "--jail", "off"]}[how]
    s = start(f"ram-free-{how}", store, args)
    try:
        q = s.qemu_pid()
        ram, base = _ram_mapping(q)
        if how != "template":
            assert ram == store / "p" / "ram", ram
        before, blocks = sha_file(ram), ram.stat().st_blocks
        assert s.run("held = bytearray(b'\\x01') * (192 << 20)").status == "ok"
        _, full = _ram_mapping(q)
        assert full - base > 150 << 20, (base, full)
        assert s.run("del held" + ("" if how == "template" else "; del buf")).status == "ok"
        deadline, dirty = time.monotonic() + 30, full
        while time.monotonic() < deadline and dirty - base > 64 << 20:
            time.sleep(0.5)
            _, dirty = _ram_mapping(q)
        assert dirty - base <= 64 << 20, (
            f"192 MiB freed in the guest, but QEMU still holds {(dirty - base) >> 20} MiB more "
            f"of guest RAM than at the start (free page reporting did not hand it back)")
        time.sleep(4)                   # the guest reports what it freed every 2 s
        assert s.value("1 + 1") == "2"
    finally:
        s.close()
    assert ram.stat().st_blocks == blocks, f"holes were punched in {ram}"
    assert sha_file(ram) == before, f"{ram} changed under a clone"
