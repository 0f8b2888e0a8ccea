"""cellvm-gateway acceptance tests: a hostile or failing kernel behind the gateway.

The kernel is tests/integration/fake_kernel.py, made to misbehave on purpose (`%fake ...`
cells, FAKE_KERNEL_* variables): it breaks the channel protocol, closes its channel, outlives
its cell's time limit, writes after its reply, or never starts. The gateway says so in words,
stops and replaces the kernel where it must, and keeps serving. Split from test_gateway.py
(whose docstring says how its sessions are made); the fixtures and helpers both modules use are
in gwhelpers.py.
"""
import time

import pytest

from gwhelpers import gw, start_gateway, wait_iopub  # noqa: F401  (fixtures)
from sessions import TIMEOUT, run_cell, wait_gone


# --------------------------------------------------------------------------
# Hostile kernel: the session's kernel is stopped with a clear error to the
# client, a new kernel is started, and the gateway keeps serving.

HOSTILE = [
    ("oversize", "out of range"),
    ("zero", "out of range"),
    ("garbage", "not valid UTF-8 JSON"),
    ("notobject", "not a JSON object"),
    ("bogus_type", "bogus_type is not allowed"),
    ("bogus_channel", "unknown or missing channel"),
    ("unknown_parent", "execute_reply for a request it was not sent"),
    ("bad_content", "content.text must be a string"),
    ("idle_first", "idle before the execute_reply"),
    ("big 100000", "larger than the 65536-byte limit"),
]


@pytest.mark.parametrize("what,words", HOSTILE, ids=[h[0].split()[0] for h in HOSTILE])
def test_hostile_kernel_is_stopped_and_replaced(start_gateway, what, words):
    g = start_gateway(args=("--max-msg", "65536"))
    g.wait_ready()
    kc = g.kc
    first = g.kernel_pid()
    r = run_cell(kc, f"%fake {what}")
    assert len(r.errors) == 1, r.msgs
    evalue = r.errors[0]["content"]["evalue"]
    assert "broke the channel protocol" in evalue and words in evalue, evalue
    assert r.status == "error"
    assert wait_gone([first], 5)
    r = run_cell(kc, "6 * 7")
    assert r.status == "ok"
    assert "42" in r.results()
    assert g.proc.poll() is None
    assert "event=kernel.violation" in g.log_text()


def test_kernel_closing_its_channel_is_stopped(gw):
    first = gw.kernel_pid()
    assert "closed its channel" in run_cell(gw.kc, "%fake close").content["evalue"]
    assert wait_gone([first], 5)
    assert run_cell(gw.kc, "1").status == "ok"


def test_cell_timeout_interrupts_the_cell(start_gateway):
    g = start_gateway(args=("--cell-timeout", "0.5"))
    g.wait_ready()
    kc = g.kc
    t0 = time.monotonic()
    r = run_cell(kc, "import time; time.sleep(100)")
    assert time.monotonic() - t0 < 3
    assert r.content["ename"] == "KeyboardInterrupt"
    assert any(m["msg_type"] == "stream" and "time limit" in m["content"]["text"] for m in r.msgs)
    assert run_cell(kc, "1").status == "ok"          # same kernel, still fine
    assert "kernel.died" not in g.log_text()


def test_cell_timeout_stops_a_cell_that_ignores_interrupts(start_gateway):
    g = start_gateway(args=("--cell-timeout", "0.5"))
    g.wait_ready()
    kc = g.kc
    first = g.kernel_pid()
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass"
    r = run_cell(kc, stubborn)
    assert r.content["ename"] == "KernelDied"
    assert "time limit" in r.content["evalue"]
    assert wait_gone([first], 5)
    assert run_cell(kc, "1").status == "ok"


def test_late_output_keeps_its_parent(gw):
    r = run_cell(gw.kc, "%fake late")
    msg = wait_iopub(gw.kc, r.msg_id, "stream")
    assert msg["content"]["text"] == "late\n"
    assert gw.proc.poll() is None


def test_kernel_that_never_starts_makes_the_gateway_give_up(start_gateway):
    g = start_gateway(env={"FAKE_KERNEL_EXIT": "1"})
    assert g.proc.wait(TIMEOUT) == 1
    assert "session.give_up" in g.log_text()
    # The one human line, for whoever reads the gateway's output (a launcher's log).
    said = [ln for ln in g.log_text().splitlines() if ln.startswith("cellvm-gateway: ")]
    assert len(said) == 1 and "could not be started" in said[0] and "attempts" in said[0], said
