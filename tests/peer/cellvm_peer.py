"""A pytest plugin that points another project's test suite at one of our kernelspecs.

nbclient's own tests (Debian's python3-nbclient ships them in nbclient/tests) start their kernels
by name: `kernel_name="python"` in most tests, the notebooks' metadata (`python3`) or
KernelManager's default (`python3`) in the others. At configure time this plugin writes a
kernels directory in a temporary folder where each of those names is a copy of the chosen
kernelspec (PEER_KERNEL, default `cellvm`, looked up on JUPYTER_PATH as the integration tests
do) and puts it first on JUPYTER_PATH, so every name, in this process and in the processes it
forks or spawns (test_many_parallel_notebooks), starts that kernel. Nothing of the suite is
copied or changed.

In this process, every kernelspec jupyter_client resolves is checked to be the chosen one (a
test that would start another kernel fails), and the pid of every kernel launched is appended
to PEER_PIDS_FILE when set (the integration test checks what they left). At the end a line
of counts is printed, then one line per test that did not pass as it should, which
tests/integration/test_peer_suite.py reads:

    peer-suite: kernel=cellvm passed=79 failed=4 skipped=1 xfailed=0 xpassed=0 error=0 total=84
    peer-suite: failed nbclient/tests/test_client.py::test_async_parallel_notebooks
    peer-suite: thread-exception nbclient/tests/test_client.py::test_parallel_notebooks

(`thread-exception`: a test that passed although a thread it started raised, which pytest
turns into a warning.)
"""
import json
import os
import pathlib
import shutil
import tempfile

import pytest

ALIASES = ("python", "python3")     # the names nbclient's tests ask for
PREFIX = "peer-suite:"
_state = {"dir": None, "argv": None, "kernel": None, "outcomes": {}, "thread_errors": set()}


def _chosen_spec(name):
    from jupyter_client.kernelspec import KernelSpecManager
    path = KernelSpecManager().find_kernel_specs().get(name)
    if path is None:
        raise pytest.UsageError(f"peer-suite: no kernelspec {name!r} on JUPYTER_PATH="
                                f"{os.environ.get('JUPYTER_PATH', '')!r} (run `make` first)")
    return pathlib.Path(path)


def _write_aliases(spec_dir, root):
    kernels = root / "kernels"
    for alias in ALIASES:
        shutil.copytree(spec_dir, kernels / alias)
    return json.loads((spec_dir / "kernel.json").read_text())["argv"]


def _guard_spec_lookups(argv):
    """Every spec resolved in this process must be the chosen one's."""
    from jupyter_client.kernelspec import KernelSpecManager
    real = KernelSpecManager.get_kernel_spec

    def get_kernel_spec(self, kernel_name):
        spec = real(self, kernel_name)
        if spec.argv != argv:
            raise RuntimeError(f"peer-suite: kernelspec {kernel_name!r} resolved to "
                               f"{spec.resource_dir}, not the chosen kernel")
        return spec
    KernelSpecManager.get_kernel_spec = get_kernel_spec


def _record_kernel_pids(path):
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner
    real = LocalProvisioner.launch_kernel

    async def launch_kernel(self, cmd, **kwargs):
        info = await real(self, cmd, **kwargs)
        with open(path, "a") as f:         # O_APPEND: forked workers write here too
            f.write(f"{self.pid}\n")
        return info
    LocalProvisioner.launch_kernel = launch_kernel


def pytest_configure(config):
    name = os.environ.get("PEER_KERNEL", "cellvm")
    spec_dir = _chosen_spec(name)
    root = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-peer-"))
    argv = _write_aliases(spec_dir, root)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])
    _guard_spec_lookups(argv)
    if os.environ.get("PEER_PIDS_FILE"):
        _record_kernel_pids(os.environ["PEER_PIDS_FILE"])
    _state.update(dir=root, argv=argv, kernel=name)


def pytest_unconfigure(config):
    if _state["dir"] is not None:
        shutil.rmtree(_state["dir"], ignore_errors=True)
        _state["dir"] = None


def pytest_runtest_logreport(report):
    """One outcome per test: a failed setup or teardown counts as an error, as pytest's own
    summary counts it."""
    out = _state["outcomes"]
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            out[report.nodeid] = "xfailed" if report.skipped else "xpassed"
        elif report.when == "setup" and report.failed:
            out[report.nodeid] = "error"
        else:
            out[report.nodeid] = report.outcome
    elif report.when == "teardown" and report.failed:
        out[report.nodeid] = "error"


def pytest_warning_recorded(warning_message, when, nodeid, location):
    """A test whose threads raised passes all the same (pytest makes the exception a warning):
    test_parallel_notebooks runs its notebooks in threads. Said apart, so such a pass is seen."""
    if warning_message.category.__name__ == "PytestUnhandledThreadExceptionWarning" and nodeid:
        _state["thread_errors"].add(nodeid)


def pytest_terminal_summary(terminalreporter):
    out = _state["outcomes"]
    counts = {k: 0 for k in ("passed", "failed", "skipped", "xfailed", "xpassed", "error")}
    for outcome in out.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    text = " ".join(f"{k}={v}" for k, v in counts.items())
    terminalreporter.write_line(f"{PREFIX} kernel={_state['kernel']} {text} total={len(out)}")
    for nodeid, outcome in sorted(out.items()):
        if outcome in ("failed", "error", "xpassed"):
            terminalreporter.write_line(f"{PREFIX} {outcome} {nodeid}")
    for nodeid in sorted(_state["thread_errors"]):
        terminalreporter.write_line(f"{PREFIX} thread-exception {nodeid}")
