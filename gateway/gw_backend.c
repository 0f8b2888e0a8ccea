/*  gw_backend - where a session's kernel runs: the seam.

    The parts every backend shares: destruction, and putting an exit into
    words a person can act on.
*/
#include "gw_backend.h"

#include <assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
gw_backend_destroy (gw_backend_t **self_p)
{
    assert (self_p);
    gw_backend_t *self = *self_p;
    if (!self)
        return;
    if (self->destroy)
        self->destroy (self->ctx);
    free (self);
    *self_p = NULL;
}

static const char *
s_signal_hint (int sig)
{
    switch (sig) {
        case SIGKILL: return ": usually the out-of-memory killer, or a kill from outside";
        case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGABRT:
            return ": it crashed, most likely in native code (a C extension)";
        case SIGTERM: return ": it was told to terminate from outside";
        default: return "";
    }
}

void
gw_exit_describe (const gw_exit_t *ex, char *out, size_t cap)
{
    assert (ex && out);
    //  Shells and VM init report a signal death as 128 + the signal number.
    int sig = ex->signal ? ex->signal
            : ex->exit_code > 128 && ex->exit_code < 128 + 65 ? ex->exit_code - 128 : 0;
    const char *abbrev = sig ? sigabbrev_np (sig) : NULL;
    if (ex->detail [0])
        snprintf (out, cap, "%.*s", (int) strnlen (ex->detail, sizeof ex->detail), ex->detail);
    else if (ex->oom_killed)
        snprintf (out, cap, "The kernel ran out of memory and was killed by the "
                  "out-of-memory killer");
    else if (ex->signal)
        snprintf (out, cap, "The kernel process was killed by signal %d (SIG%s, %s)%s%s",
                  sig, abbrev ? abbrev : "?", strsignal (sig), s_signal_hint (sig),
                  ex->core_dumped ? "; it dumped core" : "");
    else if (sig)
        snprintf (out, cap, "The kernel process exited with status %d, which means "
                  "signal %d (SIG%s)%s", ex->exit_code, sig, abbrev ? abbrev : "?",
                  s_signal_hint (sig));
    else if (ex->exit_code >= 0)
        snprintf (out, cap, "The kernel process exited unexpectedly with status %d",
                  ex->exit_code);
    else
        snprintf (out, cap, "The kernel process ended");
}
