/*  gw_status - a gateway's status file, BASE/sessions/<pid>.json, which
    `cellvm ls` and `cellvm rm` read (docs/sessions.md, "Status files").

        {"pid", "pid_start", "id", "backend", "state", "started",
         "last_activity", "qemu_pid", "workspace", "from_snapshot",
         "paused_snapshot", "connection_file", "kernel_name"}

    The writer keeps the document in memory and replaces the file
    atomically (a temporary file, then rename; mode 0600): on every state
    change, and at most once a second for anything else, so a busy session
    costs one small write a second at most. Readers never see half a file.
    pid_start (field 22 of /proc/PID/stat) tells a live gateway from a dead
    one whose pid was reused.

    The reader trusts nothing: the file may be stale, truncated, oversized
    or written by someone else.
*/
#ifndef GW_STATUS_H
#define GW_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define GW_STATUS_DIR "sessions"                //  under BASE
#define GW_STATUS_MAX_BYTES (64 * 1024)         //  what a reader accepts
#define GW_STATUS_THROTTLE_MS 1000              //  unforced writes, at most this often

typedef struct _gw_status_t gw_status_t;

//  Create BASE/sessions (0700, ours, not a symlink) and write
//  BASE/sessions/<getpid()>.json with state "starting". base NULL:
//  gw_runbase_default. connection_file and kernel_name may be NULL
//  (written as null). NULL with the reason in err.
gw_status_t *gw_status_new (const char *base, const char *identity, const char *backend,
                            const char *connection_file, const char *kernel_name,
                            char *err, size_t errlen);

//  Delete the file, free; nulls *self_p. NULL-safe.
void gw_status_destroy (gw_status_t **self_p);

//  The file's path.
const char *gw_status_path (const gw_status_t *self);

//  "starting", "running" (a cell runs), "idle", "paused", "resuming" or
//  "stopping"; written at once (a forced flush).
void gw_status_set_state (gw_status_t *self, const char *state);

//  Set key to value (stolen; NULL: JSON null): qemu_pid, workspace,
//  paused_snapshot, from_snapshot... Marks the file dirty when it changes.
void gw_status_set (gw_status_t *self, const char *key, json_t *value);

//  last_activity = now; marks the file dirty.
void gw_status_touch (gw_status_t *self);

//  Write the file when dirty and (force, or GW_STATUS_THROTTLE_MS since the
//  last write). Cheap when there is nothing to do: call it every reactor
//  turn. 0, or -errno (the file stays dirty; the first failure is logged).
int gw_status_flush (gw_status_t *self, bool force);
//  Writes happen on a thread of the status file's own (off the reactor):
//  wait until what was handed over is on disk. The last write's 0 or -errno.
int gw_status_sync (gw_status_t *self);

//  ---------------------------------------------------------------------------
//  Reading (cellvm)

//  Read and check a status file: a regular file (not a symlink) of at most
//  GW_STATUS_MAX_BYTES holding an object with every key above of the
//  right type (pid a positive int; pid_start, qemu_pid >= 0; strings or
//  null where allowed; started, last_activity numbers). *out: a new
//  reference. 0, -ENOENT, -EFBIG, -EBADMSG (not JSON or a wrong type) or
//  -errno, with the reason in err.
int gw_status_read (const char *path, json_t **out, char *err, size_t errlen);

//  True when st's pid runs (not a zombie) and its start time is pid_start.
bool gw_status_alive (const json_t *st);

//  The start time (field 22 of /proc/PID/stat) of a process that is alive
//  and not a zombie. 0, -ESRCH (gone or a zombie) or -errno.
int gw_status_proc_start (pid_t pid, unsigned long long *start_p);

#endif
