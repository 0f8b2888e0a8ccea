/*  gw_backend - where a session's kernel runs: the seam.

    The parts every backend shares: destruction, and putting an exit into
    words a person can act on.
*/
#include "backend/gw_backend.h"

#include <assert.h>
#include <errno.h>
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

int
gw_backend_start (gw_backend_t *self, int *fd_p, char *err, size_t errlen)
{
    assert (self && self->start && fd_p);
    *fd_p = -1;
    return self->start (self->ctx, fd_p, err, errlen);
}

int
gw_backend_connect (gw_backend_t *self, int *fd_p, char *err, size_t errlen)
{
    assert (self && fd_p);
    *fd_p = -1;
    if (!self->connect) {
        snprintf (err, errlen, "the %s backend gave no channel", self->name);
        return -ENOTCONN;
    }
    return self->connect (self->ctx, fd_p, err, errlen);
}

int
gw_backend_kill (gw_backend_t *self)
{
    assert (self && self->kill);
    return self->kill (self->ctx);
}

int
gw_backend_reap (gw_backend_t *self, gw_exit_t *exit_p)
{
    assert (self && self->reap && exit_p);
    return self->reap (self->ctx, exit_p);
}

int
gw_backend_pid (gw_backend_t *self)
{
    assert (self);
    return self->pid ? self->pid (self->ctx) : 0;
}

int
gw_backend_event_fd (gw_backend_t *self)
{
    assert (self);
    return self->event_fd && self->on_event ? self->event_fd (self->ctx) : -1;
}

int
gw_backend_on_event (gw_backend_t *self)
{
    assert (self);
    return self->on_event ? self->on_event (self->ctx) : 0;
}

//  True when put_chunk and get_chunk are there.
static bool
s_can_move_files (const gw_backend_t *self)
{
    assert (self);
    return self->put_chunk && self->get_chunk;
}

int
gw_backend_put_chunk (gw_backend_t *self, const char *path, bool append, const uint8_t *data,
                      size_t len, gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    assert (self && path && done && len <= GW_CHUNK_MAX);
    if (!s_can_move_files (self)) {
        snprintf (err, errlen, "the %s backend cannot move files", self->name);
        return -ENOTSUP;
    }
    return self->put_chunk (self->ctx, path, append, data, len, done, arg, err, errlen);
}

int
gw_backend_get_chunk (gw_backend_t *self, const char *path, uint64_t offset, size_t len,
                      gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    assert (self && path && done && len <= GW_CHUNK_MAX);
    if (!s_can_move_files (self)) {
        snprintf (err, errlen, "the %s backend cannot move files", self->name);
        return -ENOTSUP;
    }
    return self->get_chunk (self->ctx, path, offset, len, done, arg, err, errlen);
}

void
gw_backend_cancel_chunks (gw_backend_t *self)
{
    assert (self);
    if (self->cancel_chunks)
        self->cancel_chunks (self->ctx);
}

static int
s_unsupported (const gw_backend_t *self, const char *what, char *err, size_t errlen)
{
    snprintf (err, errlen, "the %s backend cannot %s", self->name, what);
    return -ENOTSUP;
}

int
gw_backend_keep_workspace (gw_backend_t *self, const char *dir, char *err, size_t errlen)
{
    assert (self && dir);
    if (!self->keep_workspace)
        return s_unsupported (self, "keep /workspace across a restart", err, errlen);
    return self->keep_workspace (self->ctx, dir, err, errlen);
}

int
gw_backend_snapshot (gw_backend_t *self, const char *store_dir, const char *name,
                     const json_t *extra, gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    assert (self && store_dir && name && done);
    if (!self->snapshot)
        return s_unsupported (self, "take snapshots (use the microvm backend)", err, errlen);
    return self->snapshot (self->ctx, store_dir, name, extra, done, arg, err, errlen);
}

int
gw_backend_pause (gw_backend_t *self, const char *store_dir, const char *name,
                  gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    assert (self && store_dir && name && done);
    if (!self->pause)
        return s_unsupported (self, "pause to disk", err, errlen);
    return self->pause (self->ctx, store_dir, name, done, arg, err, errlen);
}

int
gw_backend_keep_paused (gw_backend_t *self)
{
    assert (self);
    if (!self->keep_paused)
        return -ENOTSUP;
    self->keep_paused (self->ctx);
    return 0;
}

const char *
gw_backend_workspace (gw_backend_t *self)
{
    assert (self);
    return self->workspace ? self->workspace (self->ctx) : NULL;
}

const char *
gw_backend_name (const gw_backend_t *self)
{
    assert (self);
    return self->name;
}

bool
gw_backend_sync_markers (const gw_backend_t *self)
{
    assert (self);
    return self->sync_markers;
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
