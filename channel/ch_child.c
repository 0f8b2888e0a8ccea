/*  ch_child - a child's set-up between fork and exec (see ch_child.h). */
#include "ch_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

int
ch_child_fds (const int *fds, int n, bool cloexec_rest)
{
    int high [CH_CHILD_FDS_MAX];
    if (n < 0 || n > CH_CHILD_FDS_MAX)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        if ((high [i] = fds [i] < 0 ? -1 : fcntl (fds [i], F_DUPFD_CLOEXEC, n)) < 0
        &&  fds [i] >= 0)
            return -errno;
    for (int i = 0; i < n; i++)
        if (high [i] >= 0 && dup2 (high [i], i) < 0)    //  the copy at i stays open on exec
            return -errno;
    return close_range ((unsigned) n, ~0U, cloexec_rest ? CLOSE_RANGE_CLOEXEC : 0) < 0
         ? -errno : 0;
}

int
ch_child_tie (pid_t parent, int sig)
{
    prctl (PR_SET_PDEATHSIG, sig);
    return parent > 0 && getppid () != parent ? -ESRCH : 0;
}

void
ch_child_exec_failed (int report_fd)
{
    int e = errno;
    (void) !write (report_fd, &e, sizeof e);
    _exit (127);
}

int
ch_child_wait_exec (int report_fd)
{
    int e = 0;
    ssize_t n;
    do
        n = read (report_fd, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t) sizeof e ? -(e ? e : EIO) : 0;
}
