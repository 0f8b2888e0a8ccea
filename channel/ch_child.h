/*  ch_child - a child's set-up between fork and exec, as the unsafe-local
    kernel's, QEMU's, the template builder's, init's kernel's and
    cellvm-mcp's gateway's all need it: its fds, its tie to the parent, and
    the report of an exec that failed (ch_sig_defaults resets its signals).

    The child side calls only async-signal-safe functions: safe after a fork
    in a threaded parent.
*/
#ifndef CH_CHILD_H
#define CH_CHILD_H

#include <stdbool.h>
#include <sys/types.h>

#define CH_CHILD_FDS_MAX 8

//  Child: fds[i] onto fd i for each i < n (at most CH_CHILD_FDS_MAX; -1
//  leaves fd i as it is), through copies above them all, so none is
//  overwritten before it is read (a source may sit on any target). Then
//  every fd from n up is closed, or only marked close-on-exec when
//  cloexec_rest (the child still needs some before exec). 0 or -errno.
int ch_child_fds (const int *fds, int n, bool cloexec_rest);

//  Child: die with the parent (PR_SET_PDEATHSIG sig, even by SIGKILL), and
//  -ESRCH when parent (0: unknown, not checked) has already gone.
int ch_child_tie (pid_t parent, int sig);

//  Child, once exec failed: its errno down report_fd, the write end of a
//  close-on-exec pipe, then _exit (127).
void ch_child_exec_failed (int report_fd) __attribute__ ((noreturn));

//  Parent: read report_fd, the pipe's read end (the write end closed
//  here): 0 once it closed empty (the child exec'd), else -errno as the
//  child reported it.
int ch_child_wait_exec (int report_fd);

#endif
