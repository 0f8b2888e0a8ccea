"""--lease-wait S (docs/cluster.md "Failure modes and what they cost"): a launch of a named
session whose lease another host holds waits up to S seconds for it, instead of refusing at
once. A cluster engine relaunches a dead node's kernel before that node's lease has expired
(Slurm requeues it as soon as the node is marked down).

- a live holder renews its lease: the wait ends in the refusal, naming the holder, and the
  running session is untouched;
- a dead holder's lease expires during the wait: the launch takes it over and starts.
Hosts are network namespaces (tests/cluster/hosts.py), as in test_move.py.
"""
import os
import signal
import time

import pytest

from sessions import READY_TIMEOUT, wait_gone
from test_move import hosts, lease_files, named, on, refused  # noqa: F401 (hosts: a fixture)

pytestmark = pytest.mark.slow


def test_a_live_holder_outlasts_the_wait(tmp_path, hosts):  # noqa: F811
    store = tmp_path / "store"
    a = on(hosts, "hosta", "wait-live-a", named(store, "conv-w1", "--lease-ttl", 4))
    try:
        assert a.output("x = 1; print(x)").strip() == "1"
        t0 = time.monotonic()
        text = refused(lambda wait: on(hosts, "hostb", "wait-live-b",
                                       named(store, "conv-w1", "--lease-wait", 14), wait))
        waited = time.monotonic() - t0
        assert "event=session.lease_wait" in text, text[-2000:]
        assert "hosta" in text, text[-2000:]        # the refusal names the holder
        # Longer than the lease lasts unrenewed (4 s, plus 5 s of skew): only the holder's
        # renewals kept it.
        assert waited >= 13, waited
        assert a.output("print(x + 1)").strip() == "2"
    finally:
        a.close()


def test_a_dead_holder_s_lease_expires_during_the_wait(tmp_path, hosts):  # noqa: F811
    store = tmp_path / "store"
    a = on(hosts, "hosta", "wait-dead-a", named(store, "conv-w2", "--lease-ttl", 10))
    try:
        assert a.output("x = 1; print(x)").strip() == "1"
        gw, qemu = a.gateway_pid, a.qemu_pid()
        hosts.kill("hosta")                     # no SIGTERM: the lease stays, unreleased
        os.kill(qemu, signal.SIGKILL)           # QEMU is in the jail's namespaces
        assert wait_gone([gw, qemu], 10)
    finally:
        a.close()
    lease = next(iter(lease_files(store, "conv-w2").values()))
    assert not lease.get("released"), lease
    b = on(hosts, "hostb", "wait-dead-b", named(store, "conv-w2", "--lease-wait", 40))
    try:
        text = b.log_text()
        assert "event=session.lease_wait" in text, text[-2000:]
        assert "event=session.lease_taken name=conv-w2 epoch=2" in text, text[-2000:]
        # Taken no sooner than the holder's expiry plus the skew others allow (5 s): a ttl of
    # 10 s leaves the lease live while this launch starts, so it must wait.
        assert time.time() >= lease["expires"] + 5
        # Nothing was saved: a fresh session.
        assert b.output("print('x' in dir())", timeout=READY_TIMEOUT).strip() == "False"
    finally:
        b.close()
