/*  gw_backend - where a session's kernel runs: the seam.

    A backend starts one kernel at a time and hands the session a connected
    channel file descriptor (docs/channel.md). It can stop the kernel from
    outside and say how it ended. The session drives every backend the same
    way, so cmocka tests plug in a mock and the microvm backend slots in
    beside unsafe-local without touching the session.

    Lifecycle: start (-> connect until the channel is up) -> (reap returns
    -EAGAIN while it runs) -> kill or a natural exit -> reap returns 0 with
    the exit -> start again (restart). The kernel is ready when its hello
    arrives on the channel, which may take a VM boot.
    Every function returns 0 or a negative errno; none may block for long:
    they run on the gateway's reactor thread.
*/
#ifndef GW_BACKEND_H
#define GW_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  How a kernel ended, in the terms a person needs to hear.
typedef struct {
    int exit_code;                              //  exit status, -1 when signalled
    int signal;                                 //  terminating signal, 0 when exited
    bool core_dumped;                           //  the signal dumped core
    bool oom_killed;                            //  the backend knows it was the OOM killer
    bool vm_died;                               //  the whole VM ended, not just the kernel
    char detail [512];                          //  the backend's own words, "" = none
} gw_exit_t;

typedef struct {
    const char *name;                           //  "unsafe-local", "microvm"
    //  Start a kernel. On success 0 is returned and *fd_p is the channel fd
    //  (caller owns it, connected, any blocking mode), or -1 when the channel
    //  is not up yet (a VM still starting): the session then calls connect
    //  on every tick. On failure a negative errno and a reason in err.
    int (*start) (void *ctx, int *fd_p, char *err, size_t errlen);
    //  The channel of a started kernel: 0 and *fd_p once it is connected,
    //  -EAGAIN while not yet, another negative errno (reason in err) when
    //  it never will be. NULL when start always returns the fd.
    int (*connect) (void *ctx, int *fd_p, char *err, size_t errlen);
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
    //  A file descriptor the reactor polls for the backend's own events (a
    //  VM's init port, timers), -1 when none. NULL: no events.
    int (*event_fd) (void *ctx);
    //  The event fd is readable: handle it. Returns 1 when the kernel has
    //  died (reap now has its exit), else 0.
    int (*on_event) (void *ctx);
    //  Copy len bytes into the session's /workspace at path (for
    //  cellvm_put_request). 0 and *reply_p (new JSON, caller owns) with what
    //  the far side said, or a negative errno with the reason in err. NULL:
    //  not supported.
    int (*put_file) (void *ctx, const char *path, const uint8_t *data, size_t len,
                     json_t **reply_p, char *err, size_t errlen);
    //  Read the file at path, at most max bytes (for cellvm_get_request). 0
    //  and *data_p (malloc'ed, caller frees) / *len_p, or a negative errno
    //  with the reason in err. NULL: not supported.
    int (*get_file) (void *ctx, const char *path, size_t max, uint8_t **data_p,
                     size_t *len_p, char *err, size_t errlen);
    //  Kill whatever still runs and free ctx.
    void (*destroy) (void *ctx);
    void *ctx;                                  //  backend state, owned
    //  The channel is a virtio port: the kernel writes a sync marker before
    //  every hello (docs/channel.md), and the port outlives a kernel, so each
    //  new channel skips to the next marker first.
    bool sync_markers;
} gw_backend_t;

//  Destroy a backend made by one of the gw_backend_*_new constructors;
//  nulls *self_p. NULL-safe.
void gw_backend_destroy (gw_backend_t **self_p);

//  How the kernel ended, as one sentence without a final period: the
//  backend's detail when it gave one, else from the exit code or signal:
//  "The kernel process was killed by signal 9 (SIGKILL, Killed): usually ...".
void gw_exit_describe (const gw_exit_t *ex, char *out, size_t cap);

#endif
