"""A cellvm kernel on the test cluster through the cellvm-slurm provisioner, the build's
kernelspec as written: shared by tests/integration/test_slurm_move.py and bench/move_bench.py."""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "provisioner"))      # cellvm_slurm and its entry point
from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

CELL_TIMEOUT_S = 240


def build_dir():
    return Path(os.environ.get("CELLVM_BUILD", ROOT / "build"))   # build/san under make check


def manager(cluster, dirpath, store, gateway_args=(), name="cellvm-slurm-move"):
    """A KernelManager for the build's cellvm-slurm kernelspec (written under dirpath), its
    gateway on the snapshot store `store`, with gateway_args after the kernelspec's own."""
    spec = json.loads((build_dir() / "share" / "jupyter" / "kernels" / "cellvm-slurm" /
                       "kernel.json").read_text())
    spec["argv"] += ["--snapshot-dir", str(store)] + [str(a) for a in gateway_args]
    spec["env"] = {"CELLVM_LOG_LEVEL": "info"}
    spec["metadata"]["kernel_provisioner"]["config"].update(
        response_ip=cluster.ctl_addr, output=str(cluster.shared / "move-%j.out"),
        sbatch_args=["--open-mode=append"])   # a requeued job's log follows the first's
    d = Path(dirpath) / "kernels" / name
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps(spec))
    return KernelManager(kernel_name=name, kernel_spec_manager=KernelSpecManager(
        kernel_dirs=[str(Path(dirpath) / "kernels")]))


def run(km, code, timeout=CELL_TIMEOUT_S):
    """Run code through a new client of km (Jupyter Server makes one per connection): its
    stdout. Raises AssertionError unless the reply is ok."""
    out = []
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
        reply = kc.execute_interactive(
            code, timeout=timeout, output_hook=lambda m: out.append(m["content"].get("text", "")))
    finally:
        kc.stop_channels()
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def launcher_log(cluster, km):
    p = cluster.shared / f"move-{km.provisioner.job_id}.out"
    return p.read_text(errors="replace") if p.exists() else ""


def wait_moved(km, cluster, old_host, budget):
    """Poll as a client's restarter would until the kernel answers from another node; the
    KernelManager must say it is alive all along. The new host."""
    deadline = time.monotonic() + budget
    while km.provisioner.host in (old_host, None):
        assert km.is_alive(), "the kernel was reported dead while it moved"
        assert time.monotonic() < deadline, (
            f"no move within {budget} s: {cluster.job(km.provisioner.job_id)}\n"
            + launcher_log(cluster, km)[-3000:])
        time.sleep(0.2)
    return km.provisioner.host
