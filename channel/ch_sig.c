/*  ch_sig - signals through a signalfd; a child's signal state. */
#include "ch_sig.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

//  The kernel's own struct sigaction, for rt_sigaction(2) called directly:
//  glibc's sigaction() refuses the two real-time signals it keeps for itself
//  (32 and 33, its thread cancellation and set*id broadcast) with EINVAL, yet
//  a launcher can leave them ignored, and an ignored disposition survives exec.
typedef struct {
    void *handler;                  //  NULL is SIG_DFL
    unsigned long flags;
    void *restorer;
    unsigned long mask[1];          //  _NSIG (64) bits
} s_kernel_sigaction_t;

void
ch_sig_defaults (void)
{
    s_kernel_sigaction_t dfl;
    memset (&dfl, 0, sizeof dfl);
    for (int sig = 1; sig < 65; sig++)
        //  EINVAL for SIGKILL/SIGSTOP: fine
        syscall (SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
}

int
ch_sig_fd (const int *sigs, bool only)
{
    sigset_t set;
    sigemptyset (&set);
    for (const int *s = sigs; s && *s; s++)
        sigaddset (&set, *s);
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction (SIGPIPE, &sa, NULL);
    sigprocmask (only ? SIG_SETMASK : SIG_BLOCK, &set, NULL);
    int fd = signalfd (-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}
