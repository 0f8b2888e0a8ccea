"""The cellvm-slurm kernel provisioner (provisioner/cellvm_slurm.py): the launch protocol's
codec, the kernelspec, and jupyter_client's KernelManager starting, polling, interrupting and
shutting down a kernel that runs as a job on the three-node test cluster
(tests/cluster/slurm_cluster.py), with the stand-in launcher (tests/cluster/standin_launcher.py)
in place of build/cellvm-remote.
"""
import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT / "provisioner"))
from Cryptodome.PublicKey import RSA  # noqa: E402
from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.provisioning.factory import KernelProvisionerFactory  # noqa: E402

import cellvm_slurm  # noqa: E402
import standin_launcher  # noqa: E402
from slurm_cluster import SlurmCluster, exported  # noqa: E402

STANDIN = ROOT / "tests" / "cluster" / "standin_launcher.py"
INFO = {"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003, "hb_port": 5004,
        "control_port": 5005, "comm_port": 5006, "ip": "10.77.1.11", "key": "k",
        "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_id": "x", "pid": 1,
        "pgid": 1}


# --- the codec (no cluster) ------------------------------------------------------------------

@pytest.fixture(scope="module")
def rsa_key():
    return RSA.generate(1024)


def test_response_round_trip(rsa_key):
    data = standin_launcher.payload(INFO, cellvm_slurm.public_key_b64(rsa_key))
    assert cellvm_slurm.decode_response(data, rsa_key) == INFO


def test_response_under_another_key_is_refused(rsa_key):
    data = standin_launcher.payload(INFO, cellvm_slurm.public_key_b64(RSA.generate(1024)))
    with pytest.raises(ValueError):
        cellvm_slurm.decode_response(data, rsa_key)


@pytest.mark.parametrize("mangle", [
    lambda b: b"not base64!",
    lambda b: base64.b64encode(b"[1, 2]"),
    lambda b: base64.b64encode(json.dumps({"version": 2, "key": "", "conn_info": ""}).encode()),
    lambda b: base64.b64encode(json.dumps({"version": 1}).encode()),
    lambda b: b[:-8],
])
def test_malformed_response_is_refused(rsa_key, mangle):
    data = standin_launcher.payload(INFO, cellvm_slurm.public_key_b64(rsa_key))
    with pytest.raises(ValueError):
        cellvm_slurm.decode_response(mangle(data), rsa_key)


def test_connection_info_without_ports_is_refused(rsa_key):
    info = dict(INFO, hb_port=0)
    data = standin_launcher.payload(info, cellvm_slurm.public_key_b64(rsa_key))
    with pytest.raises(ValueError, match="hb_port"):
        cellvm_slurm.decode_response(data, rsa_key)


def test_placeholders():
    got = cellvm_slurm.format_argv(["x", "--id={kernel_id}", "{connection_file}"],
                                   {"kernel_id": "K"})
    assert got == ["x", "--id=K", "{connection_file}"]


def test_kernelspec_names_the_provisioner(tmp_path):
    out = tmp_path / "kernels" / "cellvm-slurm" / "kernel.json"
    subprocess.run(["bash", str(ROOT / "scripts" / "kernelspec.sh"), "cellvm-slurm",
                    str(ROOT / "build"), str(out)], check=True)
    spec = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]).get_kernel_spec(
        "cellvm-slurm")
    assert spec.argv[0].endswith("/cellvm-remote")
    for ph in ("{kernel_id}", "{response_address}", "{public_key}", "{port_range}"):
        assert ph in spec.argv
    prov = spec.metadata["kernel_provisioner"]
    assert prov["provisioner_name"] == "cellvm-slurm"
    assert KernelProvisionerFactory.instance().is_provisioner_available(spec)


# --- on the cluster --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster() as c, exported(c):
        yield c


def _kernel(cluster, tmp_path, env=None, timeout=30, argv=None):
    """A KernelManager for a kernelspec that runs the stand-in launcher on the cluster."""
    log = cluster.shared / f"standin-{tmp_path.name}.log"
    spec = {
        "argv": argv or ["/usr/bin/python3", str(STANDIN), "--kernel-id", "{kernel_id}",
                         "--response-address", "{response_address}", "--public-key",
                         "{public_key}", "--port-range", "{port_range}", "--", "--backend",
                         "microvm"],
        "display_name": "stand-in on Slurm", "language": "python", "interrupt_mode": "signal",
        "env": dict({"CELLVM_STANDIN_LOG": str(log)}, **(env or {})),
        "metadata": {"kernel_provisioner": {"provisioner_name": "cellvm-slurm", "config": {
            "launch_timeout": timeout, "response_ip": cluster.ctl_addr,
            "output": str(cluster.shared / "launcher-%j.out")}}},
    }
    d = tmp_path / "kernels" / "standin"
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps(spec))
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="standin", kernel_spec_manager=ksm), log


def _events(log, event=None):
    if not log.exists():
        return []
    evs = [json.loads(line) for line in log.read_text().splitlines()]
    return [e for e in evs if event is None or e["event"] == event]


def _wait_for(cond, budget=10):
    deadline = time.monotonic() + budget
    while not (got := cond()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return got


def test_kernel_life_on_a_node(cluster, tmp_path):
    km, log = _kernel(cluster, tmp_path)
    km.start_kernel()
    try:
        prov = km.provisioner
        assert isinstance(prov, cellvm_slurm.SlurmProvisioner)
        # The connection info came from the node the job runs on.
        assert prov.host in cluster.nodes
        assert km.ip == cluster.addr[prov.host]
        started = _events(log, "started")
        assert len(started) == 1 and started[0]["host"] == prov.host
        assert started[0]["info"]["shell_port"] == km.shell_port
        assert started[0]["info"]["kernel_id"] == km.kernel_id
        assert started[0]["rest"] == ["--backend", "microvm"]
        assert cluster.job(prov.job_id)["JobState"] == "RUNNING"

        assert km.is_alive()
        _wait_for(lambda: {"signum": 0} in [e["request"] for e in _events(log, "request")])

        km.interrupt_kernel()
        _wait_for(lambda: {"signum": 2} in [e["request"] for e in _events(log, "request")])
        assert km.is_alive()    # the stand-in's kernel ignores SIGINT, as a kernel would
        job_id = prov.job_id
    finally:
        km.shutdown_kernel()
    assert {"shutdown": 1} in [e["request"] for e in _events(log, "request")]
    assert _events(log, "exit")
    squeue = cluster.slurm("squeue", "-h", "-j", job_id).stdout
    assert squeue.strip() == ""
    assert cluster.job(job_id)["JobState"] == "COMPLETED"


def test_kernel_killed_through_the_provisioner(cluster, tmp_path):
    km, log = _kernel(cluster, tmp_path)
    km.start_kernel()
    job_id = km.provisioner.job_id
    try:
        km.shutdown_kernel(now=True)     # kill: comm {"signum": 9}, then scancel
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    assert {"signum": 9} in [e["request"] for e in _events(log, "request")]
    cluster.wait_job(job_id, "COMPLETED|CANCELLED|FAILED")
    assert cluster.slurm("squeue", "-h", "-j", job_id).stdout.strip() == ""


def test_launcher_that_never_answers_times_out_and_is_cancelled(cluster, tmp_path):
    km, log = _kernel(cluster, tmp_path, env={"CELLVM_STANDIN_MODE": "silent"}, timeout=4)
    with pytest.raises(cellvm_slurm.LaunchError) as err:
        km.start_kernel()
    msg = str(err.value)
    assert "timed out after 4 s" in msg and "RUNNING on n" in msg, msg
    job_id = re.search(r"Slurm job (\d+)", msg).group(1)
    assert _events(log, "silent")
    cluster.wait_job(job_id, "CANCELLED")
    assert cluster.slurm("squeue", "-h", "-j", job_id).stdout.strip() == ""


def test_launcher_that_fails_is_reported(cluster, tmp_path):
    km, _ = _kernel(cluster, tmp_path, argv=["/nonexistent/cellvm-remote", "{kernel_id}"])
    with pytest.raises(cellvm_slurm.LaunchError, match=r"ended before answering.*FAILED"):
        km.start_kernel()


def test_more_cpus_than_a_node_has_pends_and_says_why(cluster, tmp_path):
    km, _ = _kernel(cluster, tmp_path, env={"KERNEL_CPUS": "64"}, timeout=3)
    with pytest.raises(cellvm_slurm.LaunchError) as err:
        km.start_kernel()
    msg = str(err.value)
    assert "is PENDING (Reason=PartitionConfig" in msg, msg
    job = cluster.wait_job(re.search(r"Slurm job (\d+)", msg).group(1), "CANCELLED")
    assert job["NumCPUs"] == "64", job       # KERNEL_CPUS became --cpus-per-task


def test_sbatch_refusal_is_reported(cluster, tmp_path):
    km, _ = _kernel(cluster, tmp_path, env={"KERNEL_MEMORY": "not-a-size"}, timeout=3)
    with pytest.raises(cellvm_slurm.LaunchError, match=r"sbatch failed \(exit \d+\): .*Invalid --mem"):
        km.start_kernel()


def test_pending_job_times_out_with_its_reason(cluster, tmp_path):
    for n in cluster.nodes:
        cluster.drain(n, reason="pending test")
    try:
        km, _ = _kernel(cluster, tmp_path, env={"KERNEL_MEMORY": "100M"}, timeout=3)
        with pytest.raises(cellvm_slurm.LaunchError) as err:
            km.start_kernel()
    finally:
        for n in cluster.nodes:
            cluster.resume(n)
    msg = str(err.value)
    assert "timed out after 3 s" in msg and "is PENDING (Reason=" in msg, msg
    job_id = re.search(r"Slurm job (\d+)", msg).group(1)
    job = cluster.wait_job(job_id, "CANCELLED")
    assert job["MinMemoryNode"] == "100M", job    # KERNEL_MEMORY became --mem


def test_a_real_cellvm_session_on_a_node(cluster, tmp_path):
    """The cellvm-slurm kernelspec as the build writes it (build/cellvm-remote, a microVM),
    placed on a node: a cell runs there through the ports its launcher reported, and the
    shutdown ends the job, the gateway and the VM."""
    build = Path(os.environ.get("CELLVM_BUILD", ROOT / "build"))     # build/san under make check
    built = json.loads((build / "share" / "jupyter" / "kernels" / "cellvm-slurm" /
                        "kernel.json").read_text())
    spec = dict(built, env={"CELLVM_LOG_LEVEL": "info"})
    spec["metadata"]["kernel_provisioner"]["config"].update(
        response_ip=cluster.ctl_addr, output=str(cluster.shared / "remote-%j.out"))
    d = tmp_path / "kernels" / "cellvm-slurm-test"
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps(spec))
    km = KernelManager(kernel_name="cellvm-slurm-test",
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]))
    km.start_kernel()
    job_id, host = km.provisioner.job_id, km.provisioner.host
    out = []
    try:
        assert host in cluster.nodes and km.ip == cluster.addr[host]
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=240)
            reply = kc.execute_interactive(
                "import socket; print(socket.gethostname(), 6 * 7)", timeout=240,
                output_hook=lambda m: out.append(m["content"].get("text", "")))
        finally:
            kc.stop_channels()
    except BaseException:
        km.shutdown_kernel(now=True)
        raise
    km.shutdown_kernel()
    assert reply["content"]["status"] == "ok", reply
    cluster.wait_job(job_id, "COMPLETED")
    assert cluster.slurm("squeue", "-h", "-j", job_id).stdout.strip() == ""
    left = [p for p in cluster.node_pids(host) if any(
        w in open(f"/proc/{p}/cmdline").read() for w in ("cellvm-remote", "cellvm-gateway"))]
    assert left == [], left
    assert "".join(out).split() == ["cellvm", "42"], out    # the guest's name, not the node's
