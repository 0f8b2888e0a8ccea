#!/usr/bin/python3
"""careless_launcher.py PROGRAM [ARGS...]: exec PROGRAM with the signal state a careless launcher
leaves behind, which survives exec. A background job of a non-interactive shell starts with SIGINT
and SIGQUIT ignored, `nohup ... &` adds SIGHUP (how Gateway Provisioners' SSH launcher starts
kernels); here SIGCHLD and SIGUSR1 are ignored too, and so are 32 and 33, the two real-time
signals glibc keeps for itself (its sigaction() refuses them, so only the raw system call resets
them; seen inherited ignored on a CI runner), and every signal is blocked.

CPython keeps an inherited SIG_IGN for SIGINT (it installs its KeyboardInterrupt handler only over
SIG_DFL), so a kernel that does not set its own signals loses every interrupt; an ignored SIGCHLD
makes the kernel reap children before anyone waits for them (a child's exit status is lost)."""
import ctypes
import os
import signal
import sys

IGNORED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1)


GLIBC_RESERVED = (32, 33)
SYS_RT_SIGACTION = 13                   # x86_64


class _KernelSigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong),
                ("restorer", ctypes.c_void_p), ("mask", ctypes.c_ulong)]


def _ignore_raw(sig):
    libc = ctypes.CDLL(None, use_errno=True)
    act = _KernelSigaction(handler=1)   # SIG_IGN
    if libc.syscall(SYS_RT_SIGACTION, sig, ctypes.byref(act), None, 8) != 0:
        raise OSError(ctypes.get_errno(), f"rt_sigaction({sig})")


def main():
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    for sig in GLIBC_RESERVED:
        _ignore_raw(sig)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
