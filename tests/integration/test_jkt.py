"""jupyter_kernel_test against the `cellvm-unsafe-local` and the `cellvm` (microvm) kernelspecs.

The sample module of jupyter-protocol.md section 4, IPython-dependent samples included, and
every history operation the kernel documents (docs/kernel.md: tail, range and search). One
kernel per class, started by jupyter_kernel_test itself; each class kills, by pid, whatever of its
gateway (and QEMU) is still there after jupyter_kernel_test's shutdown. A missing kernelspec,
build or guest image FAILS these tests, it never skips them.

Nothing here is relaxed for the microVM: jupyter_kernel_test's own timeouts apply (15 s per
reply, 1 s to the busy, 0.1 s between a request's iopub messages).
"""
import unittest

import jupyter_kernel_test as jkt
import psutil

from backends import BACKENDS, descendants, kernel_spec, kill_procs, wait_gone


class Samples:
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [{"text": "zi", "matches": {"zip"}}]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise"
    code_execute_result = [{"code": "1+2+3", "result": "6"},
                           {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"}]
    code_display_data = [{"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))",
                          "mime": "text/html"}]
    code_history_pattern = "1?2*"
    # Under pytest a SkipTest inside one of test_history's subTests ends the whole test, so an
    # undeclared operation would silently drop the ones after it: declare all three.
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    @classmethod
    def setUpClass(cls):
        kernel_spec(cls.kernel_name)            # fails (never skips) without spec or image
        super().setUpClass()
        gateway = cls.km.provisioner.pid
        cls._procs = [psutil.Process(p) for p in [gateway] + descendants(gateway)]

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            kill_procs(cls._procs)
            assert wait_gone([p.pid for p in cls._procs if p.is_running()], 5)


class TestUnsafeLocal(Samples, jkt.KernelTests):
    kernel_name = BACKENDS["unsafe-local"]


class TestMicrovm(Samples, jkt.KernelTests):
    kernel_name = BACKENDS["microvm"]


if __name__ == "__main__":
    unittest.main()
