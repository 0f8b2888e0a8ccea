"""jupyter_kernel_test against protocol 5.5 (docs/gateway.md, "Protocol 5.5"): the samples of
test_jkt.py, through `cellvm-unsafe-local` with `--protocol 5.5` and through the `cellvm-5.5`
kernelspec (microvm). jupyter_kernel_test 0.4.5 knows no iopub_welcome; the client's
wait_for_ready reads it (it is the IOPub message that proves the subscription), so no test sees
one. Everything else is checked exactly as for 5.3.
"""
import unittest

import jupyter_kernel_test as jkt

import test_jkt
from sessions import Session, running


class Samples55(test_jkt.Samples):
    extra_args = ()

    @classmethod
    def setUpClass(cls):
        cls.session = Session(cls.kernel_name, extra_args=cls.extra_args)
        try:
            cls.session.start()
        except BaseException:
            cls.session.close()
            raise
        cls.km, cls.kc = cls.session.km, cls.session.kc

    @classmethod
    def tearDownClass(cls):
        procs = list(cls.session.procs.values())
        cls.session.close()
        assert not [p.pid for p in procs if running(p)], "a process outlived the session"

    def test_protocol_is_55(self):
        self.flush_channels()
        reply = self.kc.kernel_info(reply=True, timeout=jkt.TIMEOUT)
        self.assertEqual(reply["content"]["protocol_version"], "5.5")
        self.assertEqual(reply["header"]["version"], "5.5")


class TestUnsafeLocal55(Samples55, jkt.KernelTests):
    kernel_name = "cellvm-unsafe-local"
    extra_args = ("--protocol", "5.5")


class TestMicrovm55(Samples55, jkt.KernelTests):
    kernel_name = "cellvm-5.5"


if __name__ == "__main__":
    unittest.main()
