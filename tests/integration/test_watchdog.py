"""The reactor watchdog (docs/gateway.md, "Watchdog") and the check every test runs on it
(conftest.py, sessions.slow_turn_fault): each turn over CELLVM_WATCHDOG_MS is logged with where
its time went, and the check fails the reactor's own work and long blocks, not a host's stalls.
"""
import re

import pytest

import sessions
from sessions import start_session

TURN = re.compile(r"event=reactor\.slow ms=(\d+) waited_for_cpu_ms=(\d+) cpu_ms=(\d+) "
                  r"blocked_ms=(\d+) cause=(\S+) detail=(\S+)")
# The reactor thread's CPU time is read from /proc/thread-self/schedstat, which the scheduler
# brings up to date at its ticks (4 ms at HZ=250): the parts may overshoot the turn by a tick.
TICK_MS = 5
SIZE = 8 << 20                  # a cell this big takes its turn over 1 ms (its HMAC alone)


@pytest.mark.allow_slow_reactor(reason="the watchdog is set to 1 ms here, to see its lines")
def test_each_slow_turn_says_where_its_time_went():
    s = start_session("cellvm-unsafe-local", env={"CELLVM_WATCHDOG_MS": "1"})
    try:
        for _ in range(3):
            r = s.run("x = '" + "y" * SIZE + "'\nlen(x)")
            assert r.status == "ok" and r.results() == [str(SIZE)], r.describe()
        lines = [ln for ln in s.log_text().splitlines() if "event=reactor.slow" in ln]
        turns = [TURN.search(ln) for ln in lines]
        assert lines and all(turns), "\n".join(lines)
        # An 8 MiB request is verified, decoded and sent on: over 1 ms, on a CPU.
        shell = [t for t in turns if t.group(5, 6) == ("client.request", "shell")]
        assert len(shell) >= 3, "\n".join(lines)
        for t in turns:
            ms, waited, cpu, blocked = map(int, t.group(1, 2, 3, 4))
            assert ms - waited > 1, t.group(0)              # the CPU wait is not held against it
            assert blocked == max(0, ms - waited - cpu), t.group(0)
            assert cpu <= ms - waited + TICK_MS, t.group(0)
        assert any(int(t.group(3)) > 0 for t in shell), "\n".join(lines)
    finally:
        s.close()


@pytest.mark.parametrize("line, fault", [
    ("ms=90 waited_for_cpu_ms=32 cpu_ms=20 blocked_ms=38 cause=backend.event detail=-", None),
    ("ms=52 waited_for_cpu_ms=0 cpu_ms=50 blocked_ms=2 cause=client.request detail=shell", None),
    ("ms=61 waited_for_cpu_ms=0 cpu_ms=51 blocked_ms=10 cause=client.request detail=shell",
     "51 ms of the reactor's own work on a CPU, over 50"),
    ("ms=260 waited_for_cpu_ms=10 cpu_ms=5 blocked_ms=245 cause=tick detail=-",
     "the reactor blocked 245 ms, over 200"),
    ("ms=80 waited_for_cpu_ms=0 cause=tick detail=-",
     "a turn of 80 ms (a gateway that does not say where it went)"),
])
def test_the_check_fails_own_work_and_long_blocks_and_not_a_hosts_stall(line, fault):
    line = "2026-12-03T12:00:00.000Z level=warn event=reactor.slow " + line
    assert sessions.slow_turn_fault(line) == fault
