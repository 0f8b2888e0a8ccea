"""jupyter_kernel_test against the `cellvm-unsafe-local` and the `cellvm` (microvm) kernelspecs.

The sample module of jupyter-protocol.md section 4, IPython-dependent samples included, and
every history operation the kernel documents (docs/kernel.md: tail, range and search). One
kernel per class, a sessions.Session whose KernelManager and client jupyter_kernel_test uses (as
start_new_kernel would make them); closing it kills, by pid, whatever of its gateway (and QEMU)
is still there. A missing kernelspec, build or guest image FAILS these tests, it never skips
them.

Nothing here is relaxed for the microVM: jupyter_kernel_test's own timeouts apply (15 s per
reply, 1 s to the busy, 0.1 s between a request's iopub messages).
"""
import unittest

import jupyter_kernel_test as jkt

from sessions import BACKENDS, Session, running


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
        # Fails (never skips) without spec or image. Instead of jkt's own start_new_kernel.
        cls.session = Session(cls.kernel_name)
        try:
            cls.session.start()
        except BaseException:
            cls.session.close()
            raise
        cls.km, cls.kc = cls.session.km, cls.session.kc

    @classmethod
    def tearDownClass(cls):
        procs = list(cls.session.procs.values())
        cls.session.close()                     # shutdown, then SIGKILL by pid
        assert not [p.pid for p in procs if running(p)], "a process outlived the session"


class TestUnsafeLocal(Samples, jkt.KernelTests):
    kernel_name = BACKENDS["unsafe-local"]


class TestMicrovm(Samples, jkt.KernelTests):
    kernel_name = BACKENDS["microvm"]


if __name__ == "__main__":
    unittest.main()
