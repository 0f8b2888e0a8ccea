"""jupyter_kernel_test against the cellvm-unsafe-local kernelspec (the real kernel).

The sample module of jupyter-protocol.md section 4, IPython-dependent
samples included. Needs build/cellvm-kernel and build/cellvm-gateway: a
missing or broken kernel FAILS these tests, it never skips them.
"""
import os
import unittest

import jupyter_kernel_test as jkt
import pytest

from conftest import BUILD

for _binary in ("cellvm-gateway", "cellvm-kernel"):
    if not (BUILD / _binary).exists():
        pytest.fail(f"{BUILD / _binary} is missing: run `make` first", pytrace=False)


class CellvmUnsafeLocalKernelTests(jkt.KernelTests):
    kernel_name = os.environ.get("CELLVM_JKT_KERNEL", "cellvm-unsafe-local")
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
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"


if __name__ == "__main__":
    unittest.main()
