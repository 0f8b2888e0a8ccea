/*  ch_sig - a child's signal state, reset before exec. */
#include "ch_sig.h"

#include <signal.h>
#include <string.h>

void
ch_sig_defaults (void)
{
    struct sigaction dfl;
    memset (&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction (sig, &dfl, NULL);            //  EINVAL for SIGKILL/SIGSTOP: fine
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
}
