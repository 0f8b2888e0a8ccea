"""A launcher that keeps the gateway's VM short of CPU (test_admission.py): it pins itself to
CPU 0 and starts a process that spins there, in a cpu cgroup of its own weighing 8 times a
VM's (each VM gets a cpu cgroup of its own from the jail, so its rivals are groups too), then
execs the gateway (same pid, as kernelspecs expect). The guest gets a few percent of CPU 0.

Usage: starve_launcher.py DIR GATEWAY [ARGS...]: the spinner's pid goes to DIR/spinner.pid and
its cgroup's path to DIR/spinner.cgroup; the test kills it by that pid and removes the cgroup.
"""
import os
import pathlib
import sys

V1 = pathlib.Path("/sys/fs/cgroup/cpu")
V2 = pathlib.Path("/sys/fs/cgroup")


def _cgroup(pid):
    """A cpu cgroup for pid weighing 8 VMs (cgroup v1 cpu.shares, or v2 cpu.weight)."""
    if (V1 / "cpu.shares").exists():
        group, knob, weight = V1 / f"cellvm-spinner-{pid}", "cpu.shares", 8 * 1024
    else:
        group, knob, weight = V2 / f"cellvm-spinner-{pid}", "cpu.weight", 8 * 100
    group.mkdir()
    (group / knob).write_text(str(weight))
    (group / "cgroup.procs").write_text(str(pid))
    return group


def main():
    out, argv = pathlib.Path(sys.argv[1]), sys.argv[2:]
    os.sched_setaffinity(0, {0})
    pid = os.fork()
    if pid == 0:
        while True:
            pass
    (out / "spinner.pid").write_text(str(pid))
    (out / "spinner.cgroup").write_text(str(_cgroup(pid)))
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
