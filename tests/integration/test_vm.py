"""The VM layer against the real guest image: boot, kernel hello, kill, nothing left.

Runs the cmocka binary test_gw_vm_boot with CELLVM_IMAGE_DIR set (without it the
binary skips): gw_vm boots build/image under QEMU, connects the kernel, init and
QMP ports, waits for init's and the kernel's hello, kills the VM and checks that
no process, socket or disk is left behind; then it snapshots a template through
the snapshot hooks and restores a clone from it under the same -sandbox.
"""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGE = pathlib.Path(os.environ.get("CELLVM_IMAGE_DIR", ROOT / "build" / "image"))


def _leftover_qemus():
    """QEMU processes started by test_gw_vm (their run dirs are /tmp/test_gw_vm_*)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "qemu-system" in line and "/tmp/test_gw_vm_" in line]


@pytest.mark.slow
def test_vm_boots_restores_and_leaves_nothing(build_dir):
    binary = build_dir / "tests" / "test_gw_vm_boot"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make unit` first")
    if not (IMAGE / "vmlinux").exists():
        pytest.fail(f"no guest image in {IMAGE}: run `make image`")
    env = dict(os.environ, CELLVM_IMAGE_DIR=str(IMAGE))
    proc = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "SKIPPED" not in out, out[-4000:]
    boot = re.search(r"boot \(ms after gw_vm_new\): .*kernel hello (\d+)", out)
    restore = re.search(r"restore: running (\d+) ms, init hello (\d+) ms", out)
    assert boot and restore, out[-4000:]
    print(boot.group(0))
    print(restore.group(0))
    assert not _leftover_qemus()
