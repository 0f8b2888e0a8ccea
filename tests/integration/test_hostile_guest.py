"""Every byte from a guest is capped and validated (docs/security.md, "Hostile and frozen
guests"): a compromised guest must not crash, stall or exhaust the gateway.

The guest is tests/integration/hostile_qemu.py (guesthelpers.py says how its sessions are made):
a fake QEMU that plays init and the kernel well enough for a session to run cells, then, on a
cell `%hostile WHAT`, sends what a compromised guest could on its kernel port or init's control
port. Each test first shows the probe triggers the behaviour it looks for (the gateway's own
words in its log and to the client), then that the session recovers, the gateway still runs, and
a bystander session (another gateway with its own fake VM) kept answering throughout.
"""
import pytest

from guesthelpers import SLOW_AT_BOOT, fake_qemu_pid, fake_vm_session, slow_turns, wait_log
from sessions import run_cell, snapshot_request, wait_gone

pytestmark = pytest.mark.allow_slow_reactor(reason=SLOW_AT_BOOT)


@pytest.fixture(scope="module")
def bystander():
    s = fake_vm_session(name="bystander")
    yield s
    s.close()


@pytest.fixture
def vm(bystander):
    s = fake_vm_session()
    yield s
    try:
        assert bystander.run("1 + 1").results() == ["2"], "the bystander session stopped answering"
        assert not slow_turns(s.log_text()), slow_turns(s.log_text())
    finally:
        s.close()


def test_the_fake_vm_runs_cells(vm):
    r = vm.run("6 * 7")
    assert r.status == "ok" and r.results() == ["42"]
    assert "event=vm.init_ready" in vm.log_text()


# A guest whose init breaks its port is stopped; the client reads why; a new VM starts.
INIT_STOPS = [
    ("init_oversize", "broke the protocol of its control port (JSON frame length 2147483632 is out of range"),
    ("init_big", "broke the protocol of its control port (JSON frame length"),
    ("init_flood", "messages nobody asked for"),
    ("init_endless", "has not answered a status request"),
    ("init_deaf", "has not answered a status request"),
]


@pytest.mark.parametrize("what,words", INIT_STOPS, ids=[w for w, _ in INIT_STOPS])
def test_a_hostile_init_stops_its_vm_and_says_why(vm, what, words):
    first = fake_qemu_pid(vm)
    r = run_cell(vm.kc, f"%hostile {what}")
    assert r.status == "error", r.describe()
    evalue = r.content["evalue"]
    assert "virtual machine was stopped by the gateway" in evalue and words in evalue, evalue
    assert "A new VM is starting" in evalue
    assert wait_gone([first], 10)
    log = wait_log(vm, "event=vm.stopped")
    assert words.split(" (")[0] in log
    vm.wait_ready()
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) != first
    assert vm.proc.poll() is None


def test_bad_json_from_init_is_dropped_and_logged(vm):
    first = fake_qemu_pid(vm)
    assert vm.run("%hostile init_badjson").status == "ok"
    log = wait_log(vm, "event=init.drop")
    assert "not valid UTF-8 JSON" in log or "JSON" in log.split("event=init.drop")[1][:200]
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) == first               # same VM: one bad message is not fatal


def test_a_reply_init_was_never_asked_for_is_logged(vm):
    first = fake_qemu_pid(vm)
    assert vm.run("%hostile init_unasked").status == "ok"
    wait_log(vm, "event=vm.init_unasked")
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) == first


def test_a_file_reply_with_dotdot_is_refused(vm):
    ok = vm.control("cellvm_put_request", {"path": "a.txt"}, buffers=[b"hello"])
    assert ok["content"]["status"] == "ok", ok["content"]
    assert ok["content"]["path"] == "/workspace/a.txt"
    assert vm.run("%hostile init_dotdot").status == "ok"
    bad = vm.control("cellvm_put_request", {"path": "b.txt"}, buffers=[b"hello"])
    c = bad["content"]
    assert c["status"] == "error", c
    assert "breaks the protocol" in c["evalue"] and ".." in c["evalue"], c
    got = vm.control("cellvm_get_request", {"path": "a.txt"})
    assert got["content"]["status"] == "error" and "breaks the protocol" in got["content"]["evalue"]
    assert "event=vm.init_bad_reply" in vm.log_text()
    assert vm.run("1 + 1").results() == ["2"]


# A kernel that breaks its port is stopped and restarted inside the same VM.
KERNEL_STOPS = [
    ("kernel_oversize", "broke the channel protocol"),
    ("kernel_badjson", "broke the channel protocol"),
    ("kernel_unasked", "execute_reply for a request it was not sent"),
    ("kernel_endless", "began a message and sent nothing to complete it"),
    ("kernel_flood", "more than 100 protocol_error notices (a flood)"),
]


@pytest.mark.parametrize("what,words", KERNEL_STOPS, ids=[w for w, _ in KERNEL_STOPS])
def test_a_hostile_kernel_in_a_vm_is_stopped_and_restarted(vm, what, words):
    first = fake_qemu_pid(vm)
    r = run_cell(vm.kc, f"%hostile {what}")
    assert r.status == "error", r.describe()
    assert words in r.content["evalue"], r.content["evalue"]
    vm.wait_ready()
    assert vm.run("1 + 1").results() == ["2"]
    assert fake_qemu_pid(vm) == first                # the kernel restarted inside the VM
    assert vm.proc.poll() is None


# QEMU's QMP replies (read when a snapshot is taken) are capped and validated: a hostile QEMU
# fails the snapshot with words that say what it did, and the session goes on.
QMP = [
    ("qmp_oversize", "a QMP line is over the length limit"),
    ("qmp_badjson", "a QMP line is not a JSON object"),
    ("qmp_flood", "no answer within"),
    ("qmp_stall", "no answer within"),
]


@pytest.mark.parametrize("what,words", QMP, ids=[w for w, _ in QMP])
@pytest.mark.slow
def test_hostile_qmp_replies_fail_a_snapshot_with_words(bystander, tmp_path, what, words):
    s = fake_vm_session(extra=("--snapshot-dir", str(tmp_path / "snaps")))
    try:
        assert s.run(f"%hostile {what}").status == "ok"
        c = snapshot_request(s, "x", timeout=120)["content"]
        assert c["status"] == "error", c
        assert words in c["evalue"], c
        assert s.run("1 + 1").results() == ["2"]
        assert s.proc.poll() is None
        assert bystander.run("1 + 1").results() == ["2"]
        assert not slow_turns(s.log_text()), slow_turns(s.log_text())
    finally:
        s.close()
