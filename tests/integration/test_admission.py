"""Many sessions starting at once on one host (docs/sessions.md, "Admission"): restores wait in
the host's line for one of its slots, each told its place, and a burst larger than the line's
slots ends with every session ready and none cold-booted; a restore whose guest is kept off the
CPUs past its deadline is waited for, not turned into a cold boot.
"""
import datetime
import pathlib
import re
import threading
import time

import psutil
import pytest

from sessions import HERE, HOST_PYTHON, Session, require_image

SLOTS = 2
BURST = 6
STAMP = re.compile(r"^(\S+Z) .*event=(vm\.admitted|vm\.restored)\b")


def _t(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def _window(log):
    """(admitted, restored) times of the session's one restore, from its gateway's log."""
    got = {}
    for line in log.splitlines():
        m = STAMP.match(line)
        if m:
            got.setdefault(m.group(2), _t(m.group(1)))
    assert set(got) == {"vm.admitted", "vm.restored"}, log[-3000:]
    return got["vm.admitted"], got["vm.restored"]


def _most_at_once(windows):
    """The most restores in their slots at one instant."""
    events = sorted([(a, 1) for a, _ in windows] + [(r, -1) for _, r in windows])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.slow
def test_a_burst_larger_than_the_line_all_become_ready_and_none_cold_boots():
    require_image()
    sessions = [Session("cellvm", extra_args=["--admit", str(SLOTS)]) for _ in range(BURST)]
    errors = []

    def start(s):
        try:
            s.start()
            r = s.run("n = 6 * 7\nn")
            assert r.status == "ok" and r.results() == ["42"], r.describe()
        except Exception as e:              # noqa: BLE001 -- reported below, by session
            errors.append(f"{s.name}: {e!r}")

    threads = [threading.Thread(target=start, args=(s,)) for s in sessions]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        logs = [s.log_text() for s in sessions]
        for log in logs:
            assert "event=vm.cold_boot" not in log, log[-3000:]
        # Some waited in line, and were told their place; at most SLOTS restored at once.
        places = [int(p) for log in logs
                  for p in re.findall(r"event=vm\.admission_wait place=(\d+)", log)]
        assert places and max(places) > SLOTS, places
        windows = [_window(log) for log in logs]
        assert _most_at_once(windows) <= SLOTS, windows
    finally:
        for s in sessions:
            s.close()


STARVE = HERE / "starve_launcher.py"


@pytest.mark.slow
def test_a_restore_kept_off_the_cpus_is_waited_for_and_not_cold_booted(tmp_path):
    """The gateway and its QEMU on CPU 0, beside a spinning process in a cpu cgroup weighing 8
    VMs (starve_launcher.py), with each step of a restore allowed 1 s (--start-timeout): the
    guest gets a few percent of a CPU, its restore runs past that, and the start waits on,
    because the guest was waiting for a CPU and not stuck."""
    require_image()
    s = Session("cellvm", launcher=[HOST_PYTHON, STARVE, tmp_path],
                extra_args=["--start-timeout", "1"])
    spinner = None
    try:
        s.start(wait=False)
        spinner = _spinner(tmp_path)
        s.wait_ready()
        _end(spinner, tmp_path)
        r = s.run("6 * 7")
        assert r.status == "ok" and r.results() == ["42"], r.describe()
        log = s.log_text()
        assert "event=vm.restored" in log and "event=vm.cold_boot" not in log, log[-3000:]
        assert "event=vm.short_of_cpu" in log, log[-3000:]      # it did run past the deadline
    finally:
        s.close()
        if spinner:
            _end(spinner, tmp_path)


def _spinner(out, timeout=30):
    """The launcher's spinner (a psutil handle, so a recycled pid is not killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "spinner.cgroup").exists():
            return psutil.Process(int((out / "spinner.pid").read_text()))
        time.sleep(0.05)
    raise AssertionError(f"the launcher wrote no {out}/spinner.cgroup")


def _end(spinner, out):
    """Kill the spinner (the gateway's child: the launcher forked it before its exec, so it is
    not ours to wait for) and remove its cgroup once the spinner has left it."""
    try:
        spinner.kill()
    except psutil.NoSuchProcess:
        pass
    group = pathlib.Path((out / "spinner.cgroup").read_text())
    deadline = time.monotonic() + 10
    while group.exists() and (group / "cgroup.procs").read_text().strip():
        assert time.monotonic() < deadline, f"the spinner is still in {group}"
        time.sleep(0.05)
    if group.exists():
        group.rmdir()
