/*  gw_backend - where a session's kernel runs: the seam.

    A backend starts one kernel at a time and hands the session a connected
    channel file descriptor (docs/channel.md). It can stop the kernel from
    outside and say how it ended. The session drives every backend the same
    way, so cmocka tests plug in a mock and the microvm backend slots in
    beside unsafe-local without touching the session.

    Lifecycle: start -> (reap returns -EAGAIN while it runs) -> kill or a
    natural exit -> reap returns 0 with the exit -> start again (restart).
    Every function returns 0 or a negative errno; none may block for long:
    they run on the gateway's reactor thread.
*/
#ifndef GW_BACKEND_H
#define GW_BACKEND_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

//  How a kernel ended, in the terms a person needs to hear.
typedef struct {
    int exit_code;                              //  exit status, -1 when signalled
    int signal;                                 //  terminating signal, 0 when exited
    bool core_dumped;                           //  the signal dumped core
    bool oom_killed;                            //  the backend knows it was the OOM killer
} gw_exit_t;

typedef struct {
    const char *name;                           //  "unsafe-local", "microvm"
    //  Start a kernel. On success *fd_p is the channel fd (caller owns it,
    //  connected, any blocking mode) and 0 is returned; on failure a negative
    //  errno and a reason in err.
    int (*start) (void *ctx, int *fd_p, char *err, size_t errlen);
    //  Ask the running kernel to interrupt its cell from outside (SIGINT or
    //  equivalent). NULL when the backend cannot.
    int (*interrupt) (void *ctx);
    //  Stop the running kernel now, and everything it started. -ESRCH when
    //  there is none.
    int (*kill) (void *ctx);
    //  Collect a kernel that ended: 0 and *exit_p filled once it is gone,
    //  -EAGAIN while it still runs, -ECHILD when no kernel was started.
    int (*reap) (void *ctx, gw_exit_t *exit_p);
    //  Process id for log lines (0 when not applicable).
    int (*pid) (void *ctx);
    //  Kill whatever still runs and free ctx.
    void (*destroy) (void *ctx);
    void *ctx;                                  //  backend state, owned
} gw_backend_t;

//  Destroy a backend made by one of the gw_backend_*_new constructors;
//  nulls *self_p. NULL-safe.
static inline void
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

#endif
