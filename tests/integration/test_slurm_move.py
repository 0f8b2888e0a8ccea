"""cellvm kernels that move between the nodes of the three-node Slurm cluster
(tests/cluster/slurm_cluster.py), through the cellvm-slurm provisioner (provisioner/cellvm_slurm.py)
and a snapshot store the nodes share (docs/slurm.md "Moves"):
- a node drained for maintenance and its job requeued: the gateway suspends the session into the
  store on SIGTERM, Slurm starts the job again on another node, the launcher there resumes it and
  answers the provisioner again; the KernelManager lives throughout and a client made from it
  afterwards finds the variables and /workspace;
- a node that dies (every process of its namespace killed, QEMU too): Slurm requeues its job,
  and the session comes back on another node from its last checkpoint.
Each test uses the build's cellvm-slurm kernelspec as written, plus a store of its own and, for
the dead node, checkpoints and a short lease.
"""
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
from sessions import qemu_children, snapshot_list, wait_gone  # noqa: E402
from slurm_cluster import SlurmCluster, exported  # noqa: E402
from slurm_kernel import launcher_log, manager, run, wait_moved  # noqa: E402

MOVE_BUDGET_S = 240       # TCG: a suspend, Slurm's requeue, a resume on a loaded 2-core host

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm_move")]


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster() as c, exported(c):
        yield c


def _gateway_on(cluster, host):
    """The gateway pid running on host, and its QEMU's."""
    for pid in cluster.node_pids(host):
        try:
            if "cellvm-gateway" in " ".join(psutil.Process(pid).cmdline()[:1]):
                return pid, qemu_children(pid)
        except psutil.Error:
            pass
    raise AssertionError(f"no cellvm-gateway on {host}: {cluster.node_pids(host)}")


def _end(km, cluster, store):
    """Shut the kernel down: the job completes and the store keeps nothing of the session."""
    job_id = km.provisioner.job_id
    km.shutdown_kernel()
    cluster.wait_job(job_id, "COMPLETED")
    kid = km.kernel_id
    assert not [n for n in snapshot_list(store) if kid in n], snapshot_list(store)


@contextlib.contextmanager
def _killed_on_failure(km):
    """The kernel killed (its job cancelled) when the test fails inside."""
    try:
        yield km
    except BaseException:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        raise


def test_a_drained_node_s_kernel_moves_with_its_state(cluster, tmp_path):
    store = tmp_path / "store"
    km = manager(cluster, tmp_path, store)
    km.start_kernel()
    host = km.provisioner.host
    with _killed_on_failure(km):
        assert host in cluster.nodes and km.ip == cluster.addr[host]
        assert run(km, "import socket\nx = 41\nopen('/workspace/notes', 'w').write('kept')\n"
                        "print(socket.gethostname())").split() == ["cellvm"]
        cluster.drain(host, reason="maintenance")
        cluster.slurm("scontrol", "requeue", km.provisioner.job_id)
        try:
            new = wait_moved(km, cluster, host, MOVE_BUDGET_S)
        finally:
            cluster.resume(host)
        assert new in cluster.nodes and new != host
        assert km.ip == cluster.addr[new]
        job = cluster.job(km.provisioner.job_id)
        assert job["NodeList"] == new and int(job.get("Restarts", "0")) == 1, job
        assert run(km, "print(x + 1, open('/workspace/notes').read())").split() == \
            ["42", "kept"]
        log = launcher_log(cluster, km)
        assert "event=session.suspended" in log, log[-3000:]
        assert f"from=session-{km.kernel_id}" in log, log[-3000:]
        _end(km, cluster, store)


def test_a_dead_node_s_kernel_comes_back_from_its_last_checkpoint(cluster, tmp_path):
    store = tmp_path / "store"
    km = manager(cluster, tmp_path, store,
                  ["--checkpoint-every", 2, "--lease-ttl", 6, "--lease-wait", 30])
    km.start_kernel()
    host = km.provisioner.host
    with _killed_on_failure(km):
        assert run(km, "a = 1; print(a)").strip() == "1"
        ckpts = lambda: [n for n in snapshot_list(store) if n.startswith(f"ckpt-{km.kernel_id}-")]  # noqa: E731
        deadline = time.monotonic() + 60
        while not ckpts():
            assert time.monotonic() < deadline, launcher_log(cluster, km)[-3000:]
            time.sleep(0.5)
        assert run(km, "b = 2; print(b)").strip() == "2"

        def after_b():
            # A checkpoint taken after b was set: its source's execution_count is 2. Not just
            # a new name: one taken before that cell may be published after its reply (the
            # RAM split runs once the VM has resumed).
            for n in ckpts():
                try:
                    meta = json.loads((store / n / "meta.json").read_text())
                except (OSError, ValueError):
                    continue
                if meta.get("source", {}).get("execution_count", 0) >= 2:
                    return True
            return False
        deadline = time.monotonic() + 60
        while not after_b():
            assert time.monotonic() < deadline, launcher_log(cluster, km)[-3000:]
            time.sleep(0.5)
        gateway, qemu = _gateway_on(cluster, host)
        cluster.kill_node(host)                  # no SIGTERM: nothing is suspended
        for pid in qemu:                         # QEMU is in the jail's namespaces
            os.kill(pid, signal.SIGKILL)
        assert wait_gone([gateway] + qemu, 10)
        try:
            new = wait_moved(km, cluster, host, MOVE_BUDGET_S)
        finally:
            cluster.restart_node(host)
        assert new != host and km.ip == cluster.addr[new]
        assert run(km, "print(a + b)").strip() == "3"
        log = launcher_log(cluster, km)
        assert f"from=ckpt-{km.kernel_id}-" in log, log[-3000:]
        _end(km, cluster, store)
