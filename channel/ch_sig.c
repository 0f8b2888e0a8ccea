/*  ch_sig - a child's signal state, reset before exec. */
#include "ch_sig.h"

#include <signal.h>
#include <string.h>
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
