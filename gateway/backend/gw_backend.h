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
    Every function returns 0 or a negative errno; none may block: they run
    on the gateway's reactor thread. Work that takes long (a restore, a
    pool take, moving a file) is started and reported back through the
    event fd, so the reactor goes on serving meanwhile.
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

//  A chunk operation ended, on the reactor thread (never inside the call
//  that started it). rc 0 with the far side's reply (borrowed; for a get,
//  "size" is the file's size and "eof" whether this chunk reached its end)
//  and, for a get, the chunk's bytes (borrowed); or a negative errno with
//  the reason in err.
typedef void (gw_chunk_fn) (void *arg, int rc, const json_t *reply, const uint8_t *data,
                            size_t len, const char *err);

//  The largest chunk a backend takes in one operation.
#define GW_CHUNK_MAX (4u << 20)

typedef struct {
    const char *name;                           //  "unsafe-local", "microvm"
    //  Start a kernel. On success 0 is returned and *fd_p is the channel fd
    //  (caller owns it, connected, any blocking mode), or -1 when the channel
    //  is not up yet (a VM still starting or restoring): the session then
    //  calls connect on every tick and backend event. On failure a negative
    //  errno and a reason in err.
    int (*start) (void *ctx, int *fd_p, char *err, size_t errlen);
    //  The channel of a started kernel: 0 and *fd_p once it is connected,
    //  -EAGAIN while not yet, another negative errno (reason in err) when
    //  it never will be. NULL when start always returns the fd.
    int (*connect) (void *ctx, int *fd_p, char *err, size_t errlen);
    //  Stop the running kernel now, and everything it started. -ESRCH when
    //  there is none.
    int (*kill) (void *ctx);
    //  Collect a kernel that ended: 0 and *exit_p filled once it is gone,
    //  -EAGAIN while it still runs, -ECHILD when no kernel was started.
    int (*reap) (void *ctx, gw_exit_t *exit_p);
    //  Process id for log lines. NULL: none.
    int (*pid) (void *ctx);
    //  A file descriptor the reactor polls for the backend's own events (a
    //  VM's init port, timers, finished chunks), -1 when none. NULL: none.
    int (*event_fd) (void *ctx);
    //  The event fd is readable: handle it. Returns 1 when the kernel has
    //  died (reap now has its exit), else 0.
    int (*on_event) (void *ctx);
    //  Write len (1..GW_CHUNK_MAX, or 0 to create/truncate) bytes to path in
    //  the session's /workspace, after what is there when append, else
    //  replacing it. data stays the caller's and valid until done runs. 0
    //  when started (done runs exactly once, later, unless cancelled), or a
    //  negative errno with the reason in err (done never runs). NULL: the
    //  backend cannot move files.
    int (*put_chunk) (void *ctx, const char *path, bool append, const uint8_t *data,
                      size_t len, gw_chunk_fn *done, void *arg, char *err, size_t errlen);
    //  Read up to len (<= GW_CHUNK_MAX) bytes at offset of the file at path.
    //  As put_chunk.
    int (*get_chunk) (void *ctx, const char *path, uint64_t offset, size_t len,
                      gw_chunk_fn *done, void *arg, char *err, size_t errlen);
    //  Forget every chunk operation still in flight: their done never runs.
    void (*cancel_chunks) (void *ctx);
    //  Kill whatever still runs and free ctx. Never calls a done.
    void (*destroy) (void *ctx);
    //  A client restart: when destroyed, leave this session's /workspace in
    //  dir (an empty directory that exists) instead of deleting it, so the
    //  next gateway of the same session adopts it (docs/sessions.md). May
    //  block (it runs once, at the end). 0, or -errno with the reason in
    //  err (the workspace is then lost, and the caller says so). NULL: the
    //  backend cannot.
    int (*keep_workspace) (void *ctx, const char *dir, char *err, size_t errlen);
    //  A session snapshot (docs/sessions.md): save the running VM as name
    //  in store_dir, with extra (borrowed, may be NULL) in its meta.json; done runs later on the reactor thread with rc 0 and
    //  the reply content (borrowed), or a negative errno and the reason.
    //  0 when started, -EBUSY while one runs, -ENOTSUP (reason in err).
    //  NULL: the backend cannot.
    int (*snapshot) (void *ctx, const char *store_dir, const char *name, const json_t *extra,
                     gw_chunk_fn *done, void *arg, char *err, size_t errlen);
    //  Idle: save the VM into store_dir as name and stop it (host RAM goes
    //  to ~0). The kernel's channel then closes; reap does not report a
    //  death. The next start resumes it. done as for snapshot. NULL: cannot.
    int (*pause) (void *ctx, const char *store_dir, const char *name, gw_chunk_fn *done,
                  void *arg, char *err, size_t errlen);
    //  The session is suspended, not ended: its paused snapshot stays in the
    //  store when the backend ends (a later launch resumes it). NULL: cannot.
    void (*keep_paused) (void *ctx);
    //  Where this session's /workspace lives on the host (a disk layer or a
    //  directory), for `cellvm ls`; NULL when unknown. NULL: none.
    const char *(*workspace) (void *ctx);
    void *ctx;                                  //  backend state, owned
    //  The channel is a virtio port: the kernel writes a sync marker before
    //  every hello (docs/channel.md), and the port outlives a kernel, so each
    //  new channel skips to the next marker first.
    bool sync_markers;
    //  keep_workspace works with the kernel still running (it freezes the
    //  VM's /workspace): a client's restart need not wait for the kernel to
    //  exit first (gw_session, docs/sessions.md).
    bool keep_live;
} gw_backend_t;

//  The session calls a backend only through these, which own the defaults
//  for slots a backend leaves NULL.
int gw_backend_start (gw_backend_t *self, int *fd_p, char *err, size_t errlen);
//  -ENOTCONN (reason in err) when the backend has no connect.
int gw_backend_connect (gw_backend_t *self, int *fd_p, char *err, size_t errlen);
int gw_backend_kill (gw_backend_t *self);
int gw_backend_reap (gw_backend_t *self, gw_exit_t *exit_p);
//  0 when the backend names no process.
int gw_backend_pid (gw_backend_t *self);
//  -1 when the backend has no events.
int gw_backend_event_fd (gw_backend_t *self);
//  1 when the kernel died, else 0.
int gw_backend_on_event (gw_backend_t *self);
//  -ENOTSUP with the reason in err when the backend cannot move files.
int gw_backend_put_chunk (gw_backend_t *self, const char *path, bool append,
                          const uint8_t *data, size_t len, gw_chunk_fn *done, void *arg,
                          char *err, size_t errlen);
int gw_backend_get_chunk (gw_backend_t *self, const char *path, uint64_t offset, size_t len,
                          gw_chunk_fn *done, void *arg, char *err, size_t errlen);
void gw_backend_cancel_chunks (gw_backend_t *self);
//  -ENOTSUP with the reason in err when the backend lacks the operation.
int gw_backend_keep_workspace (gw_backend_t *self, const char *dir, char *err, size_t errlen);
int gw_backend_snapshot (gw_backend_t *self, const char *store_dir, const char *name,
                         const json_t *extra, gw_chunk_fn *done, void *arg, char *err,
                         size_t errlen);
int gw_backend_pause (gw_backend_t *self, const char *store_dir, const char *name,
                      gw_chunk_fn *done, void *arg, char *err, size_t errlen);
const char *gw_backend_name (const gw_backend_t *self);
//  NULL when unknown.
const char *gw_backend_workspace (gw_backend_t *self);
//  Keep the paused snapshot when the backend ends. -ENOTSUP when it cannot.
int gw_backend_keep_paused (gw_backend_t *self);
bool gw_backend_sync_markers (const gw_backend_t *self);

//  Destroy a backend made by one of the gw_backend_*_new constructors;
//  nulls *self_p. NULL-safe.
void gw_backend_destroy (gw_backend_t **self_p);

//  How the kernel ended, as one sentence without a final period: the
//  backend's detail when it gave one, else from the exit code or signal:
//  "The kernel process was killed by signal 9 (SIGKILL, Killed): usually ...".
void gw_exit_describe (const gw_exit_t *ex, char *out, size_t cap);

#endif
