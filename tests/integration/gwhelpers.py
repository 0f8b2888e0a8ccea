"""What the gateway test modules (test_gateway.py, test_gateway_hostile.py, test_curve.py) share:
the client key, a gateway behind the fake kernel (the `start_gateway` and `gw` fixtures: a module
imports them to use them), the `reaper` fixture for gateways started without a Session, and
waiting for one message on IOPub.
"""
import time

import psutil
import pytest

from sessions import TIMEOUT, Logs, Session, descendants, kill_procs

KEY = b"test-key-5f1b9c"


# --------------------------------------------------------------------------
# A gateway behind the fake kernel (raw tests), signed with KEY.

@pytest.fixture
def start_gateway(gateway_bin):
    """start_gateway(args=(), env=None, key=KEY): a Session behind the fake kernel with extra
    gateway arguments, launched but not waited for. Closed (killed by pid) after the test."""
    started = []

    def start(args=(), env=None, key=KEY):
        g = Session("fake", extra_args=args, env=env, key=key)
        started.append(g)
        return g.start(wait=False)

    yield start
    for g in started:
        g.close()


@pytest.fixture
def gw(start_gateway):
    g = start_gateway()
    g.wait_ready()
    return g


# --------------------------------------------------------------------------
# Process bookkeeping for the few gateways started without sessions.Session (tests of how a
# gateway is launched): every pid we start, and their descendants, dies.

@pytest.fixture
def reaper():
    """reaper(pid, log=None): kill pid and its process tree after the test; `log`, the file the
    gateway writes, is registered with the session logs (attached when the test fails, scanned
    for slow reactor turns). Processes are held as psutil.Process, so a pid recycled meanwhile
    is never killed."""
    procs = {}
    logs = []

    def add(pid):
        try:
            procs.setdefault(pid, psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass

    def track(pid, log=None):
        for p in [pid, *descendants(pid)]:
            add(p)
        if log is not None:
            logs.append(Logs(f"gateway-{pid}", gateway_log=log))

    yield track
    for p in list(procs.values()):
        if p.is_running():
            for kid in descendants(p.pid):
                add(kid)
    kill_procs(procs.values())
    for lg in logs:
        lg.close()


# --------------------------------------------------------------------------
# Jupyter client helpers (cells: sessions.run_cell).

def wait_iopub(kc, msg_id, msg_type, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == msg_type:
            return msg
