#!/usr/bin/python3
"""careless_launcher.py PROGRAM [ARGS...]: exec PROGRAM with the signal state a careless launcher
leaves behind, which survives exec. A background job of a non-interactive shell starts with SIGINT
and SIGQUIT ignored, `nohup ... &` adds SIGHUP (how Gateway Provisioners' SSH launcher starts
kernels); here SIGCHLD and SIGUSR1 are ignored too, and every signal is blocked.

CPython keeps an inherited SIG_IGN for SIGINT (it installs its KeyboardInterrupt handler only over
SIG_DFL), so a kernel that does not set its own signals loses every interrupt; an ignored SIGCHLD
makes the kernel reap children before anyone waits for them (a child's exit status is lost)."""
import os
import signal
import sys

IGNORED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1)


def main():
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
