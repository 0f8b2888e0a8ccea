"""Shared pytest setup: where the build is, the kernelspecs it wrote, and what every test gets:

- `session_logs` (autouse): when a test fails, the log of every gateway it started or used and
  the console log of each of their VMs (sessions.Logs) are attached to its report (their last
  TAIL_LINES lines) and copied whole under build/test-logs/<test id>/;
- the reactor watchdog check: every gateway runs with CELLVM_WATCHDOG_MS=50; after each test,
  the lines the gateways logged meanwhile are scanned, and an `event=reactor.slow` line (one
  reactor turn over 50 ms, waits for a CPU not counted) whose time was the reactor's own work
  or a long block (sessions.slow_turn_fault) fails the test, unless it is marked
  `@pytest.mark.allow_slow_reactor(reason="...")`. The other lines are attached to its report.
"""
import os
import re
import shutil

import pytest

import sessions
from sessions import BUILD, ROOT

# Every Jupyter tool in the tests finds our kernelspecs without installing them.
os.environ["JUPYTER_PATH"] = str(BUILD / "share" / "jupyter")
# Every gateway the tests start (they inherit this) logs a reactor turn over 50 ms
# (gw_server.c; older gateways ignore it). The check below fails the test on such a line.
os.environ.setdefault("CELLVM_WATCHDOG_MS", str(sessions.WATCHDOG_MS))
# Gateways log warnings and errors only by default (a clean session is silent); the tests read
# their info lines (vm.restored, kernel.ready, ...), so every gateway they start logs at info.
os.environ.setdefault("CELLVM_LOG_LEVEL", "info")

SLOW_REACTOR = "event=reactor.slow"
TAIL_LINES = 80
TEST_LOGS = ROOT / "build" / "test-logs"
WATCH = pytest.StashKey()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: over about 7 s on the 2-core reference machine (a cold boot, a TTL or "
        "idle timer run out, a big transfer, a fork bomb); `make test` runs it, `make test-fast` "
        "(-m 'not slow') does not. Taken from the --durations figures")
    config.addinivalue_line(
        "markers", "allow_slow_reactor(reason): the gateway may log event=reactor.slow (a "
        "reactor turn over 50 ms) during this test; say why in reason")


@pytest.fixture(scope="session", autouse=True)
def _sessions_home(tmp_path_factory):
    """Session logs go under pytest's basetemp; whatever a test left open is killed at the end."""
    sessions.LOG_ROOT = tmp_path_factory.mktemp("sessions", numbered=False)
    yield
    sessions.close_all()


@pytest.fixture(scope="session", autouse=True)
def private_data_home(tmp_path_factory):
    """Gateways started by the tests put artifacts under $XDG_DATA_HOME/cellvm/artifacts:
    a temporary one, never the user's ~/.local/share. Tests may still pass their own."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def kernel_bin():
    p = BUILD / "cellvm-kernel"
    if not p.exists():
        pytest.fail(f"{p} is missing: run `make` first")
    return p


@pytest.fixture(scope="session")
def gateway_bin():
    p = BUILD / "cellvm-gateway"
    if not p.exists():
        pytest.fail(f"{p} is missing: run `make` first")
    return p


# --------------------------------------------------------------------------
# Logs of failed tests, and the reactor watchdog

class Watch:
    """The sessions of one test: those alive when it began (shared ones) and those it started."""

    def __init__(self):
        self.first = len(sessions.LOGS)
        self.live = [lg for lg in sessions.LOGS if not lg.closed]
        self.slow = []              # (Logs, line) with event=reactor.slow, seen during this test
        self.copied = None

    def logs(self):
        seen = {id(lg): lg for lg in self.live}
        seen.update((id(lg), lg) for lg in sessions.LOGS[self.first:])
        return sorted(seen.values(), key=lambda lg: lg.index)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Before any fixture: sessions that module fixtures start count as this test's too.
    item.stash[WATCH] = Watch()


@pytest.fixture(autouse=True)
def session_logs(request):
    """Which sessions this test started or used, for the makereport hook below (which attaches
    their logs when the test fails, and runs the reactor watchdog check)."""
    watch = request.node.stash.get(WATCH, None)
    if watch is None:
        watch = request.node.stash[WATCH] = Watch()
    yield watch


def _safe(text, limit=120):
    """text as a file name: runs of anything but [A-Za-z0-9_.-] become one _."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:limit] or "_"


def _tail(path, n=TAIL_LINES, max_bytes=1 << 20):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as e:
        return f"<unreadable: {e}>"
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:]) if lines else "<empty>"


def _attach_logs(item, rep, watch):
    logs = watch.logs()
    if not logs:
        return
    if watch.copied is None:
        watch.copied = TEST_LOGS / _safe(item.nodeid, 200)
        shutil.rmtree(watch.copied, ignore_errors=True)
    watch.copied.mkdir(parents=True, exist_ok=True)
    for lg in logs:
        lg.update()
        if lg.gateway_log is not None:
            rep.sections.append((f"gateway log of {lg.name} ({lg.gateway_log}), last {TAIL_LINES} "
                                 f"lines", _tail(lg.gateway_log)))
        for c in lg.consoles():
            rep.sections.append((f"VM console log of {lg.name} ({c}), last {TAIL_LINES} lines",
                                 _tail(c)))
        files = [("gateway", lg.gateway_log)] if lg.gateway_log else []
        files += [(f"console-{i}", c) for i, c in enumerate(lg.consoles())]
        for kind, f in files:
            try:
                shutil.copyfile(f, watch.copied / f"{lg.index:03d}-{_safe(lg.name)}-{kind}.log")
            except OSError:
                pass
    rep.sections.append(("session logs", f"copied whole to {watch.copied}"))


def _slow_lines(lg):
    """lg's new event=reactor.slow lines but the turn of a cold boot's spawn: the line right
    after its vm.booting. That turn sets up the jail and spawns QEMU on the reactor (restores and
    pool clones do it on gw_vmstart's thread), ~60 ms on this loaded 2-core host."""
    lines = lg.new_lines()
    return [ln for i, ln in enumerate(lines) if SLOW_REACTOR in ln
            and not (i > 0 and "event=vm.booting" in lines[i - 1])]


def _check_reactor(item, rep, watch):
    lines = [(lg, line, sessions.slow_turn_fault(line))
             for lg in sessions.LOGS for line in _slow_lines(lg)]
    new = [(lg, line, fault) for lg, line, fault in lines if fault]
    host = [f"{lg.name}: {line}" for lg, line, fault in lines if not fault]
    if host:
        rep.sections.append(("reactor.slow (the host's: blocked under "
                             f"{sessions.BLOCKED_MS} ms, own work under {sessions.WATCHDOG_MS})",
                             "\n".join(host)))
    if not new:
        return
    watch.slow += [(lg, line) for lg, line, _ in new]
    text = "\n".join(f"{lg.name}: {line} ({fault})" for lg, line, fault in new)
    marker = item.get_closest_marker("allow_slow_reactor")
    reason = marker and (marker.kwargs.get("reason") or (marker.args[0] if marker.args else ""))
    if reason:
        rep.sections.append((f"reactor.slow (allowed: {reason})", text))
        return
    why = (f"the gateway logged {len(new)} slow reactor turn(s) ({SLOW_REACTOR}: one turn over "
           f"{os.environ.get('CELLVM_WATCHDOG_MS')} ms) during the {rep.when} of this test; mark it "
           f"@pytest.mark.allow_slow_reactor(reason=...) if that is expected"
           + (" (the marker needs a reason)" if marker else "") + ":\n" + text)
    if rep.failed:
        rep.sections.append(("reactor.slow", why))
    else:
        rep.outcome = "failed"
        rep.longrepr = why


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    watch = item.stash.get(WATCH, None)
    if watch is None:
        return
    if call.when in ("call", "teardown"):
        _check_reactor(item, rep, watch)
    if rep.failed:
        _attach_logs(item, rep, watch)
