"""The three-node Slurm cluster the remote-kernel tests run on (tests/cluster/slurm_cluster.py):
real slurmctld, slurmd and munged, each node its own network namespace, hostname and address.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from slurm_cluster import SlurmCluster, pid_alive  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster() as c:
        yield c


@pytest.fixture
def fresh_cluster():
    """A cluster of its own, for a test that kills a node."""
    with SlurmCluster() as c:
        yield c


def test_three_nodes_idle(cluster):
    assert cluster.node_states() == {"n1": "idle", "n2": "idle", "n3": "idle"}
    assert len(set(cluster.addr.values())) == 3
    # The daemons came up well within the start budget (the report's figure).
    assert cluster.start_seconds < 15, cluster.start_seconds


@pytest.mark.parametrize("node", ["n1", "n3"])
def test_job_lands_on_the_node_asked_for(cluster, node):
    out = cluster.run_job(node, "hostname; hostname -I; echo SLURMD_NODENAME=$SLURMD_NODENAME")
    hostname, addrs, nodename = out.split("\n")[:3]
    assert hostname == node
    assert addrs.split() == [cluster.addr[node]]
    assert nodename == f"SLURMD_NODENAME={node}"


def test_jobs_share_the_filesystem(cluster):
    (cluster.shared / "from-submitter").write_text("hello\n")
    out = cluster.run_job("n2", "cat from-submitter; echo from-n2 > from-node")
    assert out == "hello\n"
    assert (cluster.shared / "from-node").read_text() == "from-n2\n"


def test_drained_node_gets_no_new_job(cluster):
    cluster.drain("n1", reason="test drain")
    cluster.drain("n2", reason="test drain")
    pinned = None
    try:
        cluster.wait_states({"n1": "drained", "n2": "drained", "n3": "idle"})
        # Unpinned, the scheduler would take n1 first: with n1 and n2 drained it must be n3.
        out = cluster.run_job(None, "hostname")
        assert out == "n3\n"
        # Pinned to a drained node, a job waits.
        pinned = cluster.submit("hostname", node="n1")
        time.sleep(2)
        job = cluster.job(pinned)
        assert job["JobState"] == "PENDING", job
    finally:
        if pinned:
            cluster.slurm("scancel", pinned)
        cluster.resume("n1")
        cluster.resume("n2")
    cluster.wait_states({n: "idle" for n in cluster.nodes})


@pytest.mark.slow
def test_killed_node_goes_down_and_requeued_job_lands_elsewhere(fresh_cluster):
    c = fresh_cluster
    c.drain("n2")
    c.drain("n3")
    jobid = c.submit("hostname; sleep 300", args=["--requeue"])
    job = c.wait_job(jobid, "RUNNING")
    assert job["NodeList"] == "n1"
    c.resume("n2")
    c.resume("n3")
    step_pids = c.node_pids("n1")
    assert len(step_pids) > 1, step_pids   # slurmd and the job's processes
    c.kill_node("n1")
    assert c.node_pids("n1") == []
    assert [p for p in step_pids if pid_alive(p)] == []
    c.wait_states({"n1": r"down\*"}, budget=40)
    # Slurm requeues the job of a failed node itself (JobRequeue defaults to 1)...
    c.wait_job(jobid, "PENDING")
    # ...and holds it back a while (BeginTime): let it go now.
    c.requeue(jobid)
    job = c.wait_job(jobid, "RUNNING")
    assert job["NodeList"] in ("n2", "n3"), job
    assert int(job.get("Restarts", "0")) >= 1, job
    c.slurm("scancel", jobid)


def _links():
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_teardown_leaves_nothing():
    c = SlurmCluster()
    with c:
        c.submit("sleep 300", node="n2")
        c.submit("sleep 300 & sleep 300; wait", node="n3")
        deadline = time.monotonic() + 15
        while len(c.node_pids("n3")) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = c.pids()
        names = list(c.netns.values())
        bridge, base, veths = c.bridge, c.dir, list(c.hosts.veths)
        assert len(c.node_pids("n3")) >= 4   # slurmd, slurmstepd, the job's shell and sleeps
    assert [p for p in pids if pid_alive(p)] == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names), listed
    assert bridge not in _links()
    assert veths and not [v for v in veths if v in _links()], _links()
    assert not base.exists()
    assert c.stop_seconds < 10, c.stop_seconds
