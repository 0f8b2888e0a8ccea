/*  gw_session_life - a session's life beyond one kernel: lifetimes (--ttl,
    --idle-timeout), idle pauses to disk (--idle-pause) and their
    transparent resume, snapshots on request, and the hand-over of
    /workspace on a client restart (docs/sessions.md).
*/
#include "session/gw_session_int.h"
#include "session/gw_memtrim.h"
#include "base/gw_log.h"
#include "session/gw_out.h"
#include "snap/gw_snapstore.h"
#include "snap/gw_ckpt.h"
#include "ch_text.h"
#include "ch_clock.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  ---------------------------------------------------------------------------
//  Activity, idle pauses, lifetimes

static bool
s_idle (const gw_session_t *self)
{
    return gw_reqs_oldest (self->reqs, false) == NULL && zlistx_size (self->held) == 0
        && gw_files_busy (self->files) == 0 && !self->snapshotting;
}

static void
s_resume (gw_session_t *self)
{
    char err [600] = "";
    self->paused = false;
    gw_log (GW_LOG_INFO, "session.resuming", "snapshot=%s", self->opts.pause_name);
    if (gw_session__start_kernel (self, true, err, sizeof err) < 0) {
        self->restart_pending = true;           //  the usual retries and their words
        self->restart_at = ch_clock_mono_ms ();
        self->failures++;
    }
}

void
gw_session__activity (gw_session_t *self, bool resume)
{
    self->last_activity = ch_clock_mono_ms ();
    if (resume && self->paused && self->state == GW_SESSION_NONE && !self->shutting_down
    &&  !self->suspending)
        s_resume (self);
}

//  The suspend's save is done, or failed: the session ends either way, and
//  its snapshot stays in the store only when it is whole.
static void
s_suspended (gw_session_t *self, int rc, const char *err)
{
    self->suspended = rc == 0 && (rc = gw_backend_keep_paused (self->backend)) == 0;
    if (self->suspended)
        gw_log (GW_LOG_INFO, "session.suspended", "snapshot=%s store=%s action=\"the next "
                "launch of this session resumes it\"", self->opts.pause_name,
                self->opts.snapshot_dir);
    else
        gw_log (GW_LOG_ERROR, "session.suspend_failed", "snapshot=%s reason=\"%s\" "
                "action=\"end the session: what it did since its last suspend or checkpoint is "
                "lost\"",
                self->opts.pause_name, err && err [0] ? err : strerror (-rc));
    gw_session__begin_shutdown (self, true);
}

static void
s_paused (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
          const char *err)
{
    (void) reply, (void) data, (void) len;
    gw_session_t *self = arg;
    self->pausing = false;
    if (rc < 0 && self->suspending) {
        s_suspended (self, rc, err);
        return;
    }
    if (rc < 0) {
        //  A full store stays full for a while: wait 2, 4, ... 64 idle periods.
        if (self->pause_failures < 6)
            self->pause_failures++;
        gw_log (GW_LOG_WARN, "session.pause_failed", "reason=\"%s\" action=\"keep running\" "
                "retry_after_s=%g", err, self->opts.idle_pause * (1u << self->pause_failures));
        self->last_activity = ch_clock_mono_ms ();
        gw_session__flush_held (self);
        return;
    }
    gw_chan_destroy (&self->chan);
    self->state = GW_SESSION_NONE;
    self->paused = true;
    self->pause_failures = 0;
    if (self->suspending) {
        s_suspended (self, 0, NULL);
        return;
    }
    size_t paged = gw_memtrim_release ();     //  a paused session should cost ~nothing
    gw_log (GW_LOG_INFO, "session.paused", "snapshot=%s pageout_advised_kib=%zu",
            self->opts.pause_name, paged >> 10);
    if (zlistx_size (self->held) && !self->shutting_down)
        s_resume (self);                        //  a request came in meanwhile
    else if (self->shutting_down)
        gw_session__begin_shutdown (self, true);
}

//  Save the VM into the store under pause_name and stop it: an idle pause,
//  or a suspend (s_paused tells them apart). A suspend does not wait for a
//  cell to end: a drain's grace period would not, and the cell goes on
//  after the resume. A refusal (an empty store, QEMU busy) is handled here.
static void
s_pause (gw_session_t *self)
{
    char err [600] = "";
    self->pausing = true;
    int rc = gw_backend_pause (self->backend, self->opts.snapshot_dir, self->opts.pause_name,
                               s_paused, self, err, sizeof err);
    if (rc < 0 && self->suspending) {
        self->pausing = false;
        s_suspended (self, rc, err);
    }
    else if (rc < 0) {
        self->pausing = false;
        self->last_activity = ch_clock_mono_ms ();
        gw_log (GW_LOG_WARN, "session.pause_refused", "reason=\"%s\"", err);
    }
}

//  The session's time is up: say why on stderr, then shut down.
static void
s_expire (gw_session_t *self, const char *what, double limit)
{
    char text [400];
    snprintf (text, sizeof text, "cellvm: this session %s (%g s) and is being shut down. "
              "Its variables and /workspace files are discarded; start a new session to go "
              "on.\n", what, limit);
    gw_log (GW_LOG_INFO, "session.expired", "reason=\"%s\" limit_s=%g", what, limit);
    json_t *stream = json_pack ("{s:s, s:s}", "name", "stderr", "text", text);
    gw_out_new_msg (self->out, CH_IOPUB, NULL, "stream", NULL, &stream);
    gw_session__begin_shutdown (self, true);
}

void
gw_session_terminate (gw_session_t *self)
{
    assert (self);
    if (self->finished || self->shutting_down || self->suspending)
        return;
    if (!self->opts.suspend_on_term || !self->opts.pause_name || !self->opts.snapshot_dir) {
        gw_session__begin_shutdown (self, true);
        return;
    }
    self->suspending = true;
    gw_log (GW_LOG_INFO, "session.suspending", "snapshot=%s state=%s", self->opts.pause_name,
            self->paused ? "paused" : self->pausing ? "pausing" : "live");
    if (self->paused)
        s_suspended (self, 0, NULL);            //  already on disk
    else if (self->pausing || self->snapshotting)
        ;                                       //  s_paused or s_snapped goes on with it
    else if (self->state == GW_SESSION_READY)
        s_pause (self);
    else
        s_suspended (self, -ESRCH, "the kernel was not running (starting or restarting): "
                     "there was nothing to save");
}

//  Checkpoints of a named session (gw_ckpt.h).

typedef struct {
    char store [4096], name [GW_SNAP_NAME_MAX + 1], keep [GW_SNAP_NAME_MAX + 1];
} s_prune_t;

static void
s_prune_work (void *arg)
{
    s_prune_t *p = arg;
    gw_ckpt_prune (p->store, p->name, p->keep);
}

static void
s_checkpointed (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
                const char *err)
{
    (void) data, (void) len;
    gw_session_t *self = arg;
    self->snapshotting = false;
    const char *name = json_string_value (json_object_get (reply, "name"));
    if (rc == 0 && name) {
        gw_log (GW_LOG_INFO, "session.checkpoint", "name=%s ms=%lld pause_ms=%lld bytes=%lld",
                name, (long long) json_integer_value (json_object_get (reply, "ms")),
                (long long) json_integer_value (json_object_get (reply, "pause_ms")),
                (long long) json_integer_value (json_object_get (reply, "bytes")));
        s_prune_t *p = calloc (1, sizeof *p);   //  the older ones go, off the reactor
        if (!p)
            abort ();
        snprintf (p->store, sizeof p->store, "%s", self->opts.snapshot_dir);
        snprintf (p->name, sizeof p->name, "%s", self->opts.session_name);
        snprintf (p->keep, sizeof p->keep, "%s", name);
        gw_worker_submit (self->worker, s_prune_work, free, p);
    }
    else
        gw_log (GW_LOG_WARN, "session.checkpoint_failed", "reason=\"%s\" retry_after_s=%g",
                err && err [0] ? err : strerror (-rc), self->opts.checkpoint_every);
    if (self->suspending)
        s_pause (self);
    else
        gw_session__flush_held (self);
}

static void
s_checkpoint (gw_session_t *self, int64_t now)
{
    char name [GW_SNAP_NAME_MAX + 1], err [600] = "";
    self->checkpoint_at = now;                  //  a failure is tried again S s later
    if (gw_ckpt_name (self->opts.session_name, ch_clock_wall_s (), name, sizeof name) < 0)
        return;
    json_t *extra = json_pack ("{s:{s:i, s:s?}, s:s}", "source", "execution_count",
                               self->exec_count, "kernel_name", self->opts.kernel_name,
                               "reason", "checkpoint");
    self->snapshotting = true;
    int rc = gw_backend_snapshot (self->backend, self->opts.snapshot_dir, name, extra,
                                  s_checkpointed, self, err, sizeof err);
    json_decref (extra);
    if (rc < 0) {
        self->snapshotting = false;
        gw_log (GW_LOG_WARN, "session.checkpoint_failed", "reason=\"%s\"", err);
    }
}

void
gw_session__life_tick (gw_session_t *self, int64_t now)
{
    if (self->finished || self->shutting_down || self->suspending)
        return;
    bool idle = s_idle (self);
    if (!idle)
        self->last_activity = now;
    int64_t idle_ms = now - self->last_activity;
    if (self->opts.ttl > 0 && now - self->started_at >= (int64_t) (self->opts.ttl * 1000))
        s_expire (self, "reached its lifetime limit (--ttl)", self->opts.ttl);
    else if (self->opts.idle_timeout > 0 && idle
         &&  idle_ms >= (int64_t) (self->opts.idle_timeout * 1000))
        s_expire (self, "was idle longer than its limit (--idle-timeout)",
                  self->opts.idle_timeout);
    else if (self->opts.idle_pause > 0 && idle && self->state == GW_SESSION_READY
         &&  !self->pausing
         &&  idle_ms >= (int64_t) (self->opts.idle_pause * 1000) << self->pause_failures
         &&  self->opts.pause_name && self->opts.snapshot_dir)
        s_pause (self);
    else if (self->opts.checkpoint_every > 0 && idle && self->state == GW_SESSION_READY
         &&  !self->pausing && self->opts.session_name && self->opts.snapshot_dir
         &&  now - self->checkpoint_at >= (int64_t) (self->opts.checkpoint_every * 1000)
         &&  self->last_activity > self->checkpoint_at)
        s_checkpoint (self, now);               //  only what changed since the last one
}

//  ---------------------------------------------------------------------------
//  cellvm_snapshot_request

typedef struct {
    gw_session_t *session;
    gw_frames_t *ids;
    json_t *header;
} s_snap_job_t;

static void
s_snap_reply (gw_session_t *self, gw_frames_t **ids_p, json_t *header, json_t **content_p)
{
    gw_out_new_msg (self->out, CH_CONTROL, *ids_p, "cellvm_snapshot_reply", header, content_p);
    gw_out_status (self->out, header, "idle");
    gw_frames_destroy (ids_p);
}

static json_t *
s_snap_error (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback", evalue);
}

static void
s_snapped (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
           const char *err)
{
    (void) data, (void) len;
    s_snap_job_t *job = arg;
    gw_session_t *self = job->session;
    self->snapshotting = false;
    char text [800];
    snprintf (text, sizeof text, "The snapshot was not taken: %s. The session goes on "
              "unchanged.", err && err [0] ? err : strerror (-rc));
    ch_text_printable (text, NULL);
    json_t *content = rc == 0 ? json_deep_copy (reply)
                    : s_snap_error (rc == -EEXIST ? "SnapshotExists" : "SnapshotFailed", text);
    s_snap_reply (self, &job->ids, job->header, &content);
    json_decref (job->header);
    free (job);
    if (self->suspending)
        s_pause (self);
    else
        gw_session__flush_held (self);
}

//  Why this session cannot take a snapshot now, or NULL.
static const char *
s_snap_refusal (const gw_session_t *self, const char **ename)
{
    *ename = "SessionBusy";
    if (self->snapshotting || self->pausing)
        return "A snapshot is already being taken; try again when it is done.";
    if (gw_reqs_oldest ((gw_reqs_t *) self->reqs, false) || gw_files_busy (self->files))
        return "A cell is running (or a file is moving); take the snapshot between cells.";
    if (self->state != GW_SESSION_READY)
        return "The kernel is not running right now (starting, paused or restarting); "
               "try again in a moment.";
    *ename = "SnapshotsOff";
    if (!self->opts.snapshot_dir)
        return "This gateway has no snapshot store.";
    return NULL;
}

void
gw_session__snapshot_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p)
{
    json_t *header = json_incref (ch_msg_header (msg));
    json_t *name_j = json_object_get (ch_msg_content (msg), "name");
    char name [80], err [600] = "";
    const char *ename = NULL, *why = s_snap_refusal (self, &ename);
    gw_out_status (self->out, header, "busy");
    if (!why && name_j && !json_is_null (name_j)
    &&  !(json_is_string (name_j) && gw_snapstore_name_ok (json_string_value (name_j))))
        ename = "BadRequest", why = "name must match [A-Za-z0-9_-]{1,64}.";
    if (!why && json_is_string (name_j))
        snprintf (name, sizeof name, "%s", json_string_value (name_j));
    else if (!why)
        gw_snapstore_new_name (name, sizeof name);
    s_snap_job_t *job = why ? NULL : calloc (1, sizeof *job);
    if (job) {
        *job = (s_snap_job_t) { .session = self, .ids = *ids_p, .header = json_incref (header) };
        *ids_p = NULL;
        self->snapshotting = true;
        json_t *extra = json_pack ("{s:{s:i, s:s?}}", "source", "execution_count",
                                   self->exec_count, "kernel_name", self->opts.kernel_name);
        int rc = gw_backend_snapshot (self->backend, self->opts.snapshot_dir, name, extra,
                                      s_snapped, job, err, sizeof err);
        json_decref (extra);
        if (rc == 0) {
            json_decref (header);
            return;
        }
        *ids_p = job->ids;
        json_decref (job->header);
        free (job);
        self->snapshotting = false;
        ename = "SnapshotFailed", why = err;
    }
    json_t *content = s_snap_error (ename, why);
    s_snap_reply (self, ids_p, header, &content);
    json_decref (header);
}

//  ---------------------------------------------------------------------------
//  The rest of the public API

gw_backend_t *
gw_session_backend (gw_session_t *self)
{
    return self->backend;
}

const char *
gw_session_end_kind (const gw_session_t *self)
{
    return self->suspended ? "suspended" : self->suspending ? "suspend_failed" : "ended";
}

bool
gw_session_restart_requested (const gw_session_t *self)
{
    return self->restart_requested;
}

int
gw_session_keep_workspace (gw_session_t *self, const char *dir, char *err, size_t errlen)
{
    return gw_backend_keep_workspace (self->backend, dir, err, errlen);
}

const char *
gw_session_state_name (const gw_session_t *self)
{
    if (self->finished || self->shutting_down)
        return "stopping";
    if (self->paused)
        return "paused";
    if (self->pausing)
        return "pausing";
    if (self->state != GW_SESSION_READY)
        return "starting";
    return s_idle (self) ? "idle" : "running";
}

const char *
gw_session_gave_up (const gw_session_t *self)
{
    assert (self);
    return self->gave_up [0] ? self->gave_up : NULL;
}
