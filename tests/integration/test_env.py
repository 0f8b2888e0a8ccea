"""Environment variables a client means for the kernel (docs/gateway.md "Environment"), on both
backends.

A client passes CELLVM_ENV_<NAME>=value (start_kernel(env=...), or a kernelspec's env); the
kernel's os.environ has NAME=value before the first cell, and again after a restart. A name
that is not a name is left out, with one warning line. On microvm nothing else of the client's
or the host's environment reaches the guest (a canary variable), and passing env does not stop
template clones from being reseeded (two sessions draw different random numbers).
"""
import json

import pytest

from sessions import BACKENDS, start_session

ENV = {"CELLVM_ENV_FOO": "bar baz", "CELLVM_ENV_QUOTE": 'a "q" \\ é', "CELLVM_ENV_9BAD": "x",
       "CELLVM_CANARY_NOT_PASSED": "host-secret-123"}
PROBE = ("import os, json, random\n"
         "print(json.dumps({'FOO': os.environ.get('FOO'), 'QUOTE': os.environ.get('QUOTE'),\n"
         "  'canary': [k for k, v in os.environ.items() if 'host-secret-123' in v],\n"
         "  'bad': '9BAD' in os.environ, 'r': random.random()}))")


def start(kernel, name):
    return start_session(kernel, name=name, env=ENV)


def probe(s):
    r = s.run(PROBE)
    assert r.status == "ok", r.describe()
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_prefixed_variables_reach_the_kernel_and_survive_a_restart(backend):
    s = start(BACKENDS[backend], f"env-{backend}")
    try:
        got = probe(s)
        assert got["FOO"] == "bar baz" and got["QUOTE"] == 'a "q" \\ é', got
        assert got["bad"] is False, got
        log = s.log_text()
        assert "event=session.env_skipped count=1" in log, log[-3000:]
        if backend == "microvm":
            assert got["canary"] == [], got     # the client's own variables stay on the host
        s.km.restart_kernel(now=False)
        s.kc.wait_for_ready(timeout=60)
        s.track()
        again = probe(s)
        assert again["FOO"] == "bar baz", again
    finally:
        s.close()


def test_env_does_not_stop_clones_from_being_reseeded():
    a, b = start("cellvm", "env-reseed-a"), None
    try:
        b = start("cellvm", "env-reseed-b")
        ra, rb = probe(a), probe(b)
        assert ra["FOO"] == rb["FOO"] == "bar baz"
        for s in (a, b):
            log = s.log_text()
            assert "event=vm.restored" in log or "event=vm.from_pool" in log, log[-2000:]
        assert ra["r"] != rb["r"], "two clones drew the same random number: not reseeded"
    finally:
        a.close()
        if b:
            b.close()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_runner_passing_ipython_options_gets_a_kernel(backend):
    """nbclient and other runners pass IPython's options (KernelManager's extra_arguments, as
    --Class.trait=value): the gateway accepts them, the kernel's shell applies IPython's (here
    ast_node_interactivity=all: every expression of a cell is displayed), and one warning names
    the others (ipykernel's app options mean nothing here)."""
    from sessions import Session
    s = Session(BACKENDS[backend], name=f"traits-{backend}")
    try:
        start_kernel = s.km.start_kernel
        s.km.start_kernel = lambda **kw: start_kernel(
            extra_arguments=["--HistoryManager.hist_file=:memory:",
                             "--InteractiveShell.ast_node_interactivity=all",
                             "--IPKernelApp.pylab=inline"], **kw)
        s.start()
        r = s.run("6 * 7\n6 * 8")
        assert r.status == "ok", r.describe()
        shown = [m["content"]["data"]["text/plain"] for m in r.of_type("execute_result")]
        assert shown == ["42", "48"], shown
        log = s.log_text()
        assert log.count("event=gateway.options_ignored count=1 ") == 1, log[-3000:]
        assert 'first="--IPKernelApp.pylab=inline"' in log, log[-3000:]
        assert "event=gateway.ipython_options count=2 " in log, log[-3000:]
    finally:
        s.close()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_clean_session_writes_nothing_to_stderr(backend):
    """By default the gateway logs warnings and errors only, as ipykernel is silent when
    nothing is wrong: a session that starts, runs a cell, restarts and shuts down writes no line.
    The tests' own gateways log at info (conftest.py)."""
    from sessions import Session
    s = Session(BACKENDS[backend], name=f"quiet-{backend}", env={"CELLVM_LOG_LEVEL": ""})
    try:
        s.start()
        r = s.run("print('out'); import sys; print('err', file=sys.stderr)")
        assert r.status == "ok" and r.stdout == "out\n", r.describe()
        s.km.restart_kernel(now=False)
        s.kc.wait_for_ready(timeout=60)
        s.track()
        assert s.run("1").status == "ok"
        s.km.shutdown_kernel(now=False)
        text = s.log_path.read_text(errors="replace")
        assert text == "", text[-3000:]
    finally:
        s.close()
