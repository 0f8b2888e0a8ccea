"""nbclient's own test suite against the `cellvm` kernelspec (docs/kernel.md, "nbclient's own
tests"): scripts/peer-suite.sh runs the suite Debian's python3-nbclient installs
(nbclient/tests/test_client.py, 84 tests) where it is, every kernel it starts being `cellvm`.

Every test passes but the ones declared here, each with why it differs; a new failure, or a
declared one that starts passing, fails this test, and so does a gateway or QEMU left behind.
About 1.5 minutes on this 2-core TCG machine: `slow`, left out of `make test-fast`.
"""
import os
import re
import subprocess

import psutil
import pytest

from sessions import BUILD, GATEWAY, IMAGE, LAUNCH, ROOT, require_image, wait_no_leftovers

SCRIPT = ROOT / "scripts" / "peer-suite.sh"
T = "nbclient/tests/test_client.py::"
TOTAL = 84
# The suite's own skip: @pytest.mark.skip on TestExecute.test_widgets.
SKIPPED = 1
# Failures by design, each with its reason (docs/kernel.md says the same).
BY_DESIGN = {
    T + "test_run_all_notebooks[Inline Image.ipynb-opts5]":
        "reads python.png beside the notebook: the VM holds none of the host's files "
        "(the cellvm-notebook kernelspec copies the folder in, and passes it)",
    T + "test_async_parallel_notebooks":
        "two kernels meet through a host directory named in a host environment variable: "
        "neither the host's environment nor its files reach a guest",
    T + "TestExecute::test_kernel_death_during_execution":
        "the kernel kills itself: the gateway, the process jupyter_client watches, lives on, "
        "answers the cell with a KernelDied error and starts a new kernel, so nbclient raises "
        "CellExecutionError, not DeadKernelError (a RuntimeError)",
    T + "TestExecute::test_error_notebook_hook":
        "the same kernel death (Autokill.ipynb), expected as a RuntimeError",
}
# May fail, and only this way: the suite's ProcessPoolExecutor has two processes allocate
# ports, each with its own jupyter_client port cache, so two kernels can be handed one port;
# a heartbeat client then reaches another kernel's control port, and that kernel says on
# stderr that it dropped what came (ipykernel's Session logs "Invalid Message" there too),
# which the test finds in stderr. Its failure must show nothing but those lines.
RACY = {T + "test_many_parallel_notebooks":
        re.compile(r'event=client\.drop channel=\w+ reason="missing <IDS\|MSG> delimiter"')}
# Passes, but its notebooks fail as test_async_parallel_notebooks' do: it runs them in
# threads, and pytest makes a thread's exception a warning.
THREAD_EXCEPTIONS = {T + "test_parallel_notebooks"}
SUMMARY = re.compile(r"^peer-suite: kernel=(\S+) (.*) total=(\d+)$", re.M)
TIMEOUT_S = 900


def _our_gateways(pids):
    """Those of pids that are still one of our gateways (psutil handles: no recycled pid)."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.cmdline()[:1] in ([str(GATEWAY)], [str(LAUNCH)]):
                procs.append(proc)
        except psutil.Error:
            pass
    return procs


def _kill_left(pids, grace_s=30):
    """Gateways of ours still running grace_s after the suite ended, killed; their pids. Some
    tests leave theirs running, as they would leave ipykernel's: a gateway ends by itself
    once its client process is gone (JPY_PARENT_PID)."""
    _, left = psutil.wait_procs(_our_gateways(pids), timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return [proc.pid for proc in left]


def _listed(out, what):
    """The tests the plugin listed as `what` (failed, error, xpassed, thread-exception)."""
    return {line.split(" ", 2)[2] for line in out.splitlines()
            if line.startswith(f"peer-suite: {what} ")}


def _raced(out, failed):
    """The RACY tests that failed, each only with its race's lines on stderr."""
    raced = set()
    for test in failed & set(RACY):
        block = out.split(f"{test} - ", 1)
        block = re.split(r"\n\s*(?:FAILED |peer-suite: |=+ )", block[1], 1)[0] if len(block) == 2 else ""
        said = [ln.strip()[2:] for ln in block.splitlines() if ln.strip().startswith("+ ")]
        assert said and all(RACY[test].search(ln) for ln in said), (test, block[-3000:])
        raced.add(test)
    return raced


@pytest.mark.slow
def test_nbclient_suite_passes_but_for_the_declared_differences(tmp_path):
    require_image(IMAGE)
    pids_file = tmp_path / "kernel-pids"
    env = dict(os.environ, CELLVM_BUILD=str(BUILD), PEER_KERNEL="cellvm",
               PEER_PIDS_FILE=str(pids_file))
    # Gateways as a user's: the suite checks that some runs print nothing on stderr, and the
    # integration tests' info level and reactor watchdog (conftest.py) would print there.
    for name in ("CELLVM_LOG_LEVEL", "CELLVM_WATCHDOG_MS"):
        env.pop(name, None)
    run = subprocess.run(["bash", str(SCRIPT)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=TIMEOUT_S)
    out = run.stdout + run.stderr
    (tmp_path / "peer-suite.log").write_text(out)
    pids = [int(x) for x in pids_file.read_text().split()] if pids_file.exists() else []
    left = _kill_left(pids)
    m = SUMMARY.search(out)
    assert m, out[-5000:]
    counts = dict(kv.split("=") for kv in m.group(2).split())
    assert m.group(1) == "cellvm" and int(m.group(3)) == TOTAL, m.group(0)
    failed = _listed(out, "failed")
    raced = _raced(out, failed)
    assert failed - raced == set(BY_DESIGN), out[-8000:]
    assert not _listed(out, "error") and not _listed(out, "xpassed"), m.group(0)
    assert _listed(out, "thread-exception") == THREAD_EXCEPTIONS, m.group(0)
    assert int(counts["skipped"]) == SKIPPED, m.group(0)
    assert int(counts["passed"]) == TOTAL - SKIPPED - len(BY_DESIGN) - len(raced), m.group(0)
    assert pids, "the plugin recorded no kernel"
    assert not left, f"gateways still running after the suite: {left}"
    assert not wait_no_leftovers(pids, timeout=30), wait_no_leftovers(pids, timeout=0)
