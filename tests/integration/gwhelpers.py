"""What the gateway test modules (test_gateway.py, test_gateway_hostile.py) share: the client
key, a gateway behind the fake kernel (the `start_gateway` and `gw` fixtures: a module imports
them to use them), and waiting for one message on IOPub.
"""
import time

import pytest

from sessions import TIMEOUT, Session

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
# Jupyter client helpers (cells: sessions.run_cell).

def wait_iopub(kc, msg_id, msg_type, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == msg_type:
            return msg
