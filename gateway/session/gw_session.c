/*  gw_session - one Jupyter session = one kernel behind a backend.

    Kernel lifecycle, one incarnation at a time:

        NONE --start--> STARTING --hello--> READY
          ^                 |                 |   channel EOF, protocol violation,
          |                 +--------+--------+   ready/shutdown/cell timeout
          |                          v
          +---- reaped: restart ---- DYING (waiting for the backend to reap)

    A request is "outstanding" from the moment a client sends it until the
    kernel's idle for it (or the gateway's, when the kernel died). Requests
    that arrive before the hello are held and sent after it; they survive a
    failed start and go to the next kernel.
*/
#include "session/gw_session_int.h"
#include "ch_hello.h"
#include "ch_text.h"
#include "files/gw_files.h"
#include "base/gw_worker.h"
#include "wire/gw_chan.h"
#include "wire/gw_wire.h"
#include "session/gw_env.h"
#include "session/gw_check.h"
#include "base/gw_log.h"
#include "session/gw_out.h"
#include "session/gw_reqs.h"
#include "guest/gw_watch.h"
#include "ch_frame.h"
#include "ch_clock.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>                 //  environ

#define S_MAX_OUTSTANDING 1024                  //  requests in flight per session
#define S_MAX_HELD 1024                         //  messages waiting for a hello
#define S_EXIT_GRACE_MS 1000                    //  channel closed -> kill if still alive
#define S_KILL_WAIT_MS 3000                     //  kill sent -> stop waiting for the reap
#define S_SHUTDOWN_MS 800                       //  shutdown_request -> kill if still alive
#define S_INTERRUPT_GRACE_MS 5000               //  cell timeout: interrupt -> kill
#define S_MSG_ID_MAX 256

//  --------------------------------------------------------------------------
//  Requests.

static void
s_held_free (void **item)
{
    ch_msg_destroy ((ch_msg_t **) item);
}

//  A kernel_info_reply must parse even when it reports a failure: clients
//  read protocol_version and language_info before they look at status.
static void
s_info_fields (json_t *content, const char *text)
{
    json_t *info = json_pack ("{s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:s, s:[]}",
                              "protocol_version", "5.3", "implementation", "cellvm",
                              "implementation_version", "0", "language_info", "name", "python",
                              "mimetype", "text/x-python", "file_extension", ".py",
                              "banner", text, "help_links");
    json_object_update_missing (content, info);
    json_decref (info);
}

//  Close a request the kernel will never answer: busy (if not yet sent),
//  optionally an iopub error, an error reply, idle. Removes it.
static void
s_fail_request (gw_session_t *self, gw_req_t *req, const char *ename, const char *text,
                bool publish_error)
{
    if (req->ids && !req->busy)
        gw_out_status (self->out, req->header, "busy");
    json_t *tb = json_pack ("[s]", text);
    if (req->ids && publish_error) {
        json_t *error = json_pack ("{s:s, s:s, s:O}", "ename", ename, "evalue", text,
                                   "traceback", tb);
        gw_out_new_msg (self->out, CH_IOPUB, NULL, "error", req->header, &error);
    }
    if (req->ids && req->reply_type [0] && !req->replied) {
        json_t *content = json_pack ("{s:s, s:s, s:s, s:O}", "status", "error", "ename", ename,
                                     "evalue", text, "traceback", tb);
        if (req->execute)
            json_object_set_new (content, "execution_count", json_integer (self->exec_count));
        if (strcmp (req->reply_type, "kernel_info_reply") == 0)
            s_info_fields (content, text);
        gw_out_new_msg (self->out, req->channel, req->ids, req->reply_type, req->header, &content);
    }
    json_decref (tb);
    if (req->ids)
        gw_out_status (self->out, req->header, "idle");
    gw_reqs_remove (self->reqs, req);
}

//  --------------------------------------------------------------------------
//  Talking to the kernel.

//  Hand msg to the current kernel and mark its request as sent. A request
//  that cannot be framed is answered with an error here and now.
static void
s_send (gw_session_t *self, const ch_msg_t *msg)
{
    gw_req_t *req = ch_msg_channel (msg) == CH_STDIN ? NULL
                  : gw_reqs_find (self->reqs, ch_msg_id (msg));
    gw_session__share_notice (self, msg);
    int rc = gw_chan_send (self->chan, msg);
    if (req)
        req->sent = true;
    if (rc == -EMSGSIZE || rc == -ENOBUFS) {
        gw_log (GW_LOG_WARN, "kernel.send_failed", "msg_type=%.64s reason=\"%s\"",
                ch_msg_type (msg), rc == -EMSGSIZE ? "frame too large" : "kernel not reading");
        if (req)
            s_fail_request (self, req, "RequestNotDelivered",
                            rc == -EMSGSIZE ? "The request is too large for the kernel's channel."
                                            : "The kernel is not reading its channel.", false);
    }
}

//  Send now when the kernel is ready, else hold until its hello. Takes *msg_p.
static void
s_deliver (gw_session_t *self, ch_msg_t **msg_p)
{
    if (self->state == GW_SESSION_READY && !self->pausing && !self->sharing) {
        s_send (self, *msg_p);
        ch_msg_destroy (msg_p);
    }
    else {
        zlistx_add_end (self->held, *msg_p);
        *msg_p = NULL;
    }
}

void
gw_session__flush_held (gw_session_t *self)
{
    ch_msg_t *msg;
    while (self->state == GW_SESSION_READY && !self->sharing
       &&  (msg = zlistx_detach (self->held, NULL))) {
        s_send (self, msg);
        ch_msg_destroy (&msg);
    }
}

//  A request of the gateway's own (timeout interrupt, SIGTERM shutdown):
//  tracked like a client's, but nothing about it reaches a client.
static void
s_own_request (gw_session_t *self, const char *type, json_t *content)
{
    ch_msg_t *msg = ch_msg_new (CH_CONTROL, type, NULL, &content, self->session);
    gw_reqs_add (self->reqs, msg, NULL);
    s_deliver (self, &msg);
}

static void
s_send_hello (gw_session_t *self)
{
    json_t *content = ch_hello_driver (CH_PROTO_CHANNEL, "cellvm-gateway", 1);
    if (json_object_size (self->env))           //  the kernel applies it once (gw_env.h)
        json_object_set (content, "env", self->env);
    if (json_array_size (self->ipython))        //  ... and these to its shell
        json_object_set (content, "ipython_options", self->ipython);
    if (self->share)                            //  it starts in the notebook's folder
        json_object_set_new (content, "cwd", json_string (GW_SHARE_ROOT));
    ch_msg_t *hello = ch_msg_new (CH_CELLVM, "hello", NULL, &content, self->session);
    gw_chan_send (self->chan, hello);
    ch_msg_destroy (&hello);
}

//  The channel is up: wrap it and say hello.
static void
s_attach (gw_session_t *self, int fd)
{
    self->chan = gw_chan_new (fd, self->opts.max_frame, self->opts.max_msg, 0);
    if (gw_backend_sync_markers (self->backend))
        gw_chan_hunt (self->chan);              //  a port may hold a dead kernel's half frame
    s_send_hello (self);
}

int
gw_session__start_kernel (gw_session_t *self, bool quiet, char *err, size_t errlen)
{
    assert (self->state == GW_SESSION_NONE && !self->chan);
    int fd = -1;
    self->restart_pending = false;
    int rc = gw_backend_start (self->backend, &fd, err, errlen);
    if (rc < 0) {
        gw_log (GW_LOG_ERROR, "kernel.start_failed", "backend=%s reason=\"%s\"",
                gw_backend_name (self->backend), err);
        return rc;
    }
    if (self->starts++ > 0 && !quiet)
        ch_uuid4 (self->session);               //  a new kernel, a new session id
    if (!quiet)
        gw_out_status (self->out, NULL, "starting");      //  once per kernel, as a kernel would
    self->state = GW_SESSION_STARTING;
    self->hello = self->killed = false;
    self->notices = 0;
    self->end_reason [0] = 0;
    self->deadline = ch_clock_mono_ms () + (int64_t) (self->opts.ready_timeout * 1000);
    gw_log (GW_LOG_INFO, "kernel.starting", "backend=%s pid=%d start=%d session=%s",
            gw_backend_name (self->backend), gw_backend_pid (self->backend), self->starts,
            self->session);
    if (fd >= 0)
        s_attach (self, fd);
    return 0;
}



//  End the current kernel from outside; the reap completes the story.
static void
s_stop_kernel (gw_session_t *self, const char *reason)
{
    if (self->state == GW_SESSION_NONE || self->killed)
        return;
    if (reason && !self->end_reason [0]) {
        snprintf (self->end_reason, sizeof self->end_reason, "%s", reason);
        ch_text_printable (self->end_reason, NULL);
    }
    gw_backend_kill (self->backend);
    self->killed = true;
    gw_chan_destroy (&self->chan);
    self->state = GW_SESSION_DYING;
    self->deadline = ch_clock_mono_ms () + S_KILL_WAIT_MS;
}

//  A started kernel whose channel is not up yet: try again.
static void
s_try_connect (gw_session_t *self)
{
    char err [256] = "";
    int fd = -1;
    int rc = gw_backend_connect (self->backend, &fd, err, sizeof err);
    if (rc == 0 && fd >= 0)
        s_attach (self, fd);
    else if (rc != -EAGAIN) {
        char reason [320];
        snprintf (reason, sizeof reason, "The kernel's channel could not be connected (%s)",
                  err [0] ? err : strerror (-rc));
        gw_log (GW_LOG_ERROR, "kernel.connect_failed", "reason=\"%s\"", reason);
        s_stop_kernel (self, reason);
    }
}

void
gw_session__violation (gw_session_t *self, const char *why)
{
    gw_log (GW_LOG_ERROR, "kernel.violation", "reason=\"%s\" action=stop", why);
    char reason [300];
    snprintf (reason, sizeof reason, "The kernel broke the channel protocol (%s) and was stopped",
              why);
    s_stop_kernel (self, reason);
}

static void
s_lost_channel (gw_session_t *self, const char *why)
{
    gw_log (GW_LOG_INFO, "kernel.channel_closed", "reason=\"%s\"", why);
    gw_chan_destroy (&self->chan);
    self->state = GW_SESSION_DYING;
    self->deadline = ch_clock_mono_ms () + S_EXIT_GRACE_MS;
}

//  --------------------------------------------------------------------------
//  When a kernel ends.

//  How the kernel ended, in words, and what to do about it.
static void
s_describe (const gw_session_t *self, const gw_exit_t *ex, char *out, size_t cap)
{
    char how [400];
    if (self->end_reason [0])
        snprintf (how, sizeof how, "%s", self->end_reason);
    else
        gw_exit_describe (ex, how, sizeof how);
    ch_text_printable (how, NULL);                          //  a backend's detail may quote anything
    size_t len = strlen (how);
    while (len > 0 && (how [len - 1] == '.' || how [len - 1] == ' '))
        how [--len] = 0;
    if (ex->vm_died && !self->end_reason [0])   //  the detail already says what is gone
        snprintf (out, cap, "%s. Re-run the cells this one depends on.", how);
    else
        snprintf (out, cap, "%s. Everything it held in memory (variables, imports) is lost. "
                  "A new kernel is being started: re-run the cells this one depends on.", how);
}

//  Fail every request the dead kernel had: the running cell (the oldest
//  execute_request without a reply) also gets the iopub error.
static void
s_fail_outstanding (gw_session_t *self, const char *text)
{
    gw_req_t *running = gw_reqs_running_cell (self->reqs), *req;
    while ((req = gw_reqs_oldest (self->reqs, true)))
        s_fail_request (self, req, "KernelDied", text, req == running);
}

//  Shutdown is complete: answer whatever is left and let the gateway exit.
static void
s_finish (gw_session_t *self)
{
    gw_files_abort (self->files, "the session is shutting down");
    gw_req_t *req;
    while ((req = gw_reqs_oldest (self->reqs, false))) {
        if (req->ids && strcmp (req->reply_type, "shutdown_reply") == 0 && !req->replied) {
            if (!req->busy)
                gw_out_status (self->out, req->header, "busy");
            json_t *reply = json_pack ("{s:s, s:b}", "status", "ok", "restart", req->restart);
            gw_out_new_msg (self->out, req->channel, req->ids, "shutdown_reply", req->header,
                            &reply);
            req->busy = req->replied = true;
        }
        s_fail_request (self, req, "KernelShutdown", "The kernel was shut down.", false);
    }
    zlistx_purge (self->held);
    self->finished = true;
    gw_log (GW_LOG_INFO, "session.finished", "exit_code=%d", self->exit_code);
}

//  The kernel cannot be started: say so to everyone waiting, then stop.
static void
s_give_up (gw_session_t *self, const char *why)
{
    char text [512];
    snprintf (text, sizeof text, "The kernel could not be started (%d attempts in a row; "
              "last: %s). The gateway has stopped: fix the cause, then start the kernel "
              "again from your client.", self->failures, why);
    ch_text_printable (text, NULL);
    snprintf (self->gave_up, sizeof self->gave_up, "%s", text);
    gw_log (GW_LOG_ERROR, "session.give_up", "failures=%d", self->failures);
    gw_files_abort (self->files, "the kernel could not be started");
    gw_req_t *req;
    while ((req = gw_reqs_oldest (self->reqs, false)))
        s_fail_request (self, req, "KernelStartFailed", text, true);
    zlistx_purge (self->held);
    gw_out_status (self->out, NULL, "dead");
    self->exit_code = 1;
    self->finished = true;
}

static void s_restart (gw_session_t *self);

//  A failed start or an early death: try again (at once the first time),
//  later, or give up.
static void
s_schedule_restart (gw_session_t *self, const char *why)
{
    if (self->failures >= self->opts.restart_limit) {
        s_give_up (self, why);
        return;
    }
    int64_t backoff = self->failures <= 1 ? 0 : 250LL << (self->failures - 2);
    if (backoff > 5000)
        backoff = 5000;
    self->restart_at = ch_clock_mono_ms () + backoff;
    self->restart_pending = true;
    if (backoff == 0)                           //  now, so `starting` follows `restarting`
        s_restart (self);
}

static void
s_restart (gw_session_t *self)
{
    char err [256];
    if (gw_session__start_kernel (self, false, err, sizeof err) == 0)
        return;
    self->failures++;
    s_schedule_restart (self, err);
}

//  The kernel died between cells: say why on stderr, with no parent, as a
//  session's end does, or a client sees only `restarting`.
static void
s_say_idle_death (gw_session_t *self, const char *text)
{
    char line [900];
    snprintf (line, sizeof line, "cellvm: the kernel died between cells: %s\n", text);
    json_t *stream = json_pack ("{s:s, s:s}", "name", "stderr", "text", line);
    gw_out_new_msg (self->out, CH_IOPUB, NULL, "stream", NULL, &stream);
}

static void
s_kernel_ended (gw_session_t *self, const gw_exit_t *ex)
{
    gw_chan_destroy (&self->chan);
    self->state = GW_SESSION_NONE;
    gw_session__share_stop (self);
    //  Held replies go out first (with what was copied), then the errors.
    gw_files_abort (self->files, "the kernel ended before this transfer finished");
    if (self->shutting_down) {
        s_finish (self);
        return;
    }
    char text [800];
    s_describe (self, ex, text, sizeof text);
    gw_log (GW_LOG_WARN, "kernel.died", "exit_code=%d signal=%d ready=%s",
            ex->exit_code, ex->signal, self->hello ? "yes" : "no");
    if (self->hello && !gw_reqs_running_cell (self->reqs))
        s_say_idle_death (self, text);          //  no cell's error to carry the words
    s_fail_outstanding (self, text);
    gw_out_status (self->out, NULL, "restarting");
    self->failures = self->hello ? 0 : self->failures + 1;
    s_schedule_restart (self, self->end_reason [0] ? self->end_reason : "it exited");
}

//  --------------------------------------------------------------------------
//  Shutdown and timers.

//  Shut down: the kernel gets S_SHUTDOWN_MS to go on its own, then is
//  stopped. A kernel that is not ready has nothing to lose: stop it now.
void
gw_session__begin_shutdown (gw_session_t *self, bool own_request)
{
    self->shutting_down = true;
    self->shutdown_at = ch_clock_mono_ms () + S_SHUTDOWN_MS;
    gw_session__share_stop (self);
    gw_log (GW_LOG_INFO, "session.shutdown", "by=%s state=%d",
            own_request ? "signal" : "client", (int) self->state);
    if (self->state == GW_SESSION_READY && own_request)
        s_own_request (self, "shutdown_request", json_pack ("{s:b}", "restart", 0));
    else if (self->state == GW_SESSION_STARTING)
        s_stop_kernel (self, "The kernel was shut down before it was ready");
    else if (self->state == GW_SESSION_NONE)
        s_finish (self);
}

//  Per-cell time limit: interrupt first, then stop the kernel.
static void
s_check_cell_timeout (gw_session_t *self, int64_t now)
{
    gw_req_t *req = self->opts.cell_timeout > 0 ? gw_reqs_running_cell (self->reqs) : NULL;
    if (!req || !req->busy || now - req->busy_at < (int64_t) (self->opts.cell_timeout * 1000))
        return;
    char text [300];
    if (!req->interrupted) {
        req->interrupted = true;
        req->interrupted_at = now;
        gw_log (GW_LOG_WARN, "cell.timeout", "limit_s=%g action=interrupt", self->opts.cell_timeout);
        snprintf (text, sizeof text, "cellvm: this cell ran longer than its %g s time limit "
                  "and is being interrupted.\n", self->opts.cell_timeout);
        json_t *stream = json_pack ("{s:s, s:s}", "name", "stderr", "text", text);
        gw_out_new_msg (self->out, CH_IOPUB, NULL, "stream", req->header, &stream);
        s_own_request (self, "interrupt_request", NULL);
    }
    else if (now - req->interrupted_at >= S_INTERRUPT_GRACE_MS) {
        gw_log (GW_LOG_WARN, "cell.timeout", "limit_s=%g action=stop", self->opts.cell_timeout);
        snprintf (text, sizeof text, "The cell ran longer than its %g s time limit and did not "
                  "stop when interrupted, so the kernel was stopped", self->opts.cell_timeout);
        s_stop_kernel (self, text);
    }
}

static void
s_try_reap (gw_session_t *self, int64_t now)
{
    gw_exit_t ex = { .exit_code = -1 };
    int rc = gw_backend_reap (self->backend, &ex);
    if (rc == 0 || (rc == -ECHILD && self->state != GW_SESSION_NONE))
        s_kernel_ended (self, &ex);
    else if (self->state == GW_SESSION_DYING && now >= self->deadline) {
        if (!self->killed)                      //  closed its channel, still alive
            s_stop_kernel (self, "The kernel closed its channel without exiting and was stopped");
        else {
            gw_log (GW_LOG_ERROR, "kernel.unreaped", "action=forget");
            s_kernel_ended (self, &ex);
        }
    }
}

//  A kernel that stopped reading its channel, or stopped mid-message, is
//  stopped as a frozen guest is, or every request after it would wait for
//  ever: its channel says how long (gw_chan_stalled).
static void
s_check_stall (gw_session_t *self)
{
    char why [200], reason [300];
    if (self->chan && (self->snapshotting || self->pausing))
        gw_chan_stall_reset (self->chan);       //  a save stops the VM a while
    if (!self->chan || gw_chan_stalled (self->chan, why, sizeof why) < gw_watch_stall_ms ())
        return;
    gw_log (GW_LOG_ERROR, "kernel.stalled", "reason=\"%s\" action=stop", why);
    snprintf (reason, sizeof reason, "The kernel stopped answering (%s) and was stopped", why);
    s_stop_kernel (self, reason);
}

void
gw_session_tick (gw_session_t *self)
{
    assert (self);
    int64_t now = ch_clock_mono_ms ();
    if (self->finished)
        return;
    if (self->state != GW_SESSION_NONE)
        s_try_reap (self, now);
    if (self->state == GW_SESSION_STARTING && !self->chan)
        s_try_connect (self);
    if (self->state == GW_SESSION_STARTING && now >= self->deadline) {
        char reason [128];
        snprintf (reason, sizeof reason, "The kernel did not become ready within %g s",
                  self->opts.ready_timeout);
        s_stop_kernel (self, reason);
    }
    if (self->state == GW_SESSION_READY)
        s_check_cell_timeout (self, now);
    if (self->state == GW_SESSION_READY)
        s_check_stall (self);
    gw_session__life_tick (self, now);
    if (self->shutting_down && now >= self->shutdown_at && self->state != GW_SESSION_NONE)
        s_stop_kernel (self, "The kernel did not exit after shutdown_request");
    if (self->state == GW_SESSION_NONE && self->restart_pending && now >= self->restart_at
    &&  !self->finished)
        s_restart (self);
}

//  --------------------------------------------------------------------------
//  Requests from clients.

//  The checks wire decoding cannot make: does this session accept it now?
static int
s_admit (gw_session_t *self, const ch_msg_t *msg)
{
    ch_channel_t ch = ch_msg_channel (msg);
    const char *type = ch_msg_type (msg), *why = NULL;
    size_t id_len = strlen (ch_msg_id (msg));
    int rc = 0;
    if (self->finished || self->shutting_down)
        why = "shutting down", rc = -ESHUTDOWN;
    else if (!gw_check_client_type (ch, type))
        why = "msg_type not accepted on this channel", rc = -EPROTONOSUPPORT;
    else if (id_len == 0 || id_len > S_MSG_ID_MAX)
        why = "header.msg_id empty or too long", rc = -EINVAL;
    else if (ch != CH_STDIN && gw_reqs_find (self->reqs, ch_msg_id (msg)))
        why = "msg_id already outstanding", rc = -EEXIST;
    else if (gw_reqs_size (self->reqs) >= S_MAX_OUTSTANDING
             || zlistx_size (self->held) >= S_MAX_HELD)
        why = "too many outstanding requests", rc = -EBUSY;
    if (rc < 0)
        gw_log (GW_LOG_WARN, "client.drop", "channel=%s msg_type=%.64s reason=\"%s\"",
                ch_channel_name (ch), type, why);
    return rc;
}

//  A client's restart, on a backend that keeps /workspace from a live kernel:
//  the gateway answers the shutdown itself and ends, and the kernel is
//  frozen with its VM's /workspace as the workspace is kept (gw_persist_end).
//  The kernel would only have _exit()ed (no finalisation either way), and its
//  exit costs ~0.2 s under TCG. True when done so.
static bool
s_restart_in_place (gw_session_t *self)
{
    if (!self->restart_requested || !self->backend->keep_live
    ||  self->state != GW_SESSION_READY || self->shutting_down)
        return false;
    self->shutting_down = true;
    gw_log (GW_LOG_INFO, "session.shutdown", "by=client state=%d kernel=\"frozen with its VM\"",
            (int) self->state);
    s_finish (self);
    return true;
}

int
gw_session_request (gw_session_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p)
{
    assert (self && ids_p && msg_p && *msg_p);
    ch_msg_t *msg = *msg_p;
    *msg_p = NULL;
    int rc = s_admit (self, msg);
    if (rc < 0)
        goto done;
    if (gw_log_enabled (GW_LOG_DEBUG))
        gw_log (GW_LOG_DEBUG, "client.msg", "channel=%s msg_type=%s msg_id=%s",
                ch_channel_name (ch_msg_channel (msg)), ch_msg_type (msg), ch_msg_id (msg));
    //  A shutdown does not wake a paused VM just to stop it.
    gw_session__activity (self, strcmp (ch_msg_type (msg), "shutdown_request") != 0);
    if (gw_files_is_request (ch_msg_type (msg))) {
        gw_session__file_request (self, msg, ids_p);
        goto done;
    }
    if (gw_session__own_request (self, msg, ids_p))     //  answered by the gateway
        goto done;
    if (ch_msg_channel (msg) != CH_STDIN)
        gw_reqs_add (self->reqs, msg, ids_p);
    bool shutdown = strcmp (ch_msg_type (msg), "shutdown_request") == 0;
    if (shutdown && json_is_true (json_object_get (ch_msg_content (msg), "restart")))
        self->restart_requested = true;
    if (shutdown && s_restart_in_place (self))
        goto done;
    s_deliver (self, &msg);
    if (shutdown)
        gw_session__begin_shutdown (self, false);
done:
    ch_msg_destroy (&msg);
    gw_frames_destroy (ids_p);
    return rc;
}

void
gw_session_refuse (gw_session_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p, const char *why)
{
    assert (self && ids_p && msg_p && *msg_p && why);
    ch_msg_t *msg = *msg_p;
    char rtype [64];
    ch_msg_reply_type (ch_msg_type (msg), rtype, sizeof rtype);
    gw_log (GW_LOG_WARN, "client.refused", "channel=%s msg_type=%.64s reason=\"%s\"",
            ch_channel_name (ch_msg_channel (msg)), ch_msg_type (msg), why);
    if (rtype [0] && ch_msg_channel (msg) != CH_STDIN && !self->finished) {
        json_t *parent = ch_msg_header (msg);
        gw_out_status (self->out, parent, "busy");
        json_t *reply = json_pack ("{s:s, s:s, s:s, s:[s]}", "status", "error",
                                   "ename", "RequestTooLarge", "evalue", why, "traceback", why);
        gw_out_new_msg (self->out, ch_msg_channel (msg), *ids_p, rtype, parent, &reply);
        gw_out_status (self->out, parent, "idle");
    }
    ch_msg_destroy (msg_p);
    gw_frames_destroy (ids_p);
}

//  --------------------------------------------------------------------------
//  The rest of the public API.

gw_session_t *
gw_session_new (gw_backend_t **backend_p, const gw_session_opts_t *opts,
                gw_session_emit_fn *emit, void *emit_arg)
{
    assert (backend_p && *backend_p);
    gw_session_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->backend = *backend_p;
    *backend_p = NULL;
    if (opts)
        self->opts = *opts;
    if (!self->opts.max_frame)
        self->opts.max_frame = CH_FRAME_MAX_DEFAULT;
    if (!self->opts.max_msg)
        self->opts.max_msg = GW_WIRE_MAX_DEFAULT;
    if (self->opts.ready_timeout <= 0)
        self->opts.ready_timeout = 60;
    if (self->opts.restart_limit <= 0)
        self->opts.restart_limit = 5;
    ch_uuid4 (self->session);
    self->out = gw_out_new (emit, emit_arg, self->session);
    self->worker = gw_worker_new ();
    self->files = gw_files_new (self->backend, self->worker, self->opts.artifacts_dir,
                                self->session, self->opts.artifact_max_file,
                                self->opts.artifact_max_session);
    if (self->opts.share_dir)
        self->share = gw_share_new (self->opts.share_dir, self->opts.share_max, self->backend,
                                    self->worker);
    self->reqs = gw_reqs_new ();
    self->held = zlistx_new ();
    zlistx_set_destructor (self->held, s_held_free);
    self->deferred = zlistx_new ();
    zlistx_set_destructor (self->deferred, s_held_free);
    gw_session__env (self);
    self->ipython = json_array ();
    for (size_t i = 0; i < self->opts.n_ipython_options; i++)
        json_array_append_new (self->ipython, json_string (self->opts.ipython_options [i]));
    return self;
}

void
gw_session_destroy (gw_session_t **self_p)
{
    assert (self_p);
    gw_session_t *self = *self_p;
    if (!self)
        return;
    gw_chan_destroy (&self->chan);
    gw_share_destroy (&self->share);
    gw_files_destroy (&self->files);
    gw_worker_destroy (&self->worker);
    gw_backend_destroy (&self->backend);       //  kills and reaps a kernel still running
    gw_reqs_destroy (&self->reqs);
    gw_out_destroy (&self->out);
    zlistx_destroy (&self->held);
    zlistx_destroy (&self->deferred);
    json_decref (self->env);
    json_decref (self->ipython);
    free (self);
    *self_p = NULL;
}

int
gw_session_start (gw_session_t *self, char *err, size_t errlen)
{
    assert (self && self->state == GW_SESSION_NONE && self->starts == 0);
    self->started_at = self->last_activity = self->checkpoint_at = ch_clock_mono_ms ();
    return gw_session__start_kernel (self, false, err, errlen);
}

void
gw_session_shutdown (gw_session_t *self)
{
    assert (self);
    if (!self->finished && !self->shutting_down)
        gw_session__begin_shutdown (self, true);
}

int
gw_session_fd (const gw_session_t *self)
{
    assert (self);
    return self->chan ? gw_chan_fd (self->chan) : -1;
}

bool
gw_session_wants_write (const gw_session_t *self)
{
    assert (self);
    return self->chan && gw_chan_wants_write (self->chan);
}

void
gw_session_readable (gw_session_t *self)
{
    assert (self);
    if (!self->chan)
        return;
    const char *why = NULL;
    int rc = gw_chan_read (self->chan, gw_session__on_kernel_msg, self, &why);
    if (rc == -EPIPE)
        s_lost_channel (self, why);
    else if (rc == 1)
        gw_session__violation (self, self->why);
    else if (rc < 0)
        gw_session__violation (self, why);
}

int
gw_session_backend_fd (const gw_session_t *self)
{
    assert (self);
    return gw_backend_event_fd (self->backend);
}

void
gw_session_backend_event (gw_session_t *self)
{
    assert (self);
    if (gw_backend_on_event (self->backend) > 0 || (self->state == GW_SESSION_STARTING && !self->chan))
        gw_session_tick (self);                 //  a death to reap, or a channel to connect
}

int
gw_session_worker_fd (const gw_session_t *self)
{
    assert (self);
    return gw_worker_fd (self->worker);
}

void
gw_session_worker_event (gw_session_t *self)
{
    assert (self);
    gw_worker_drain (self->worker);
}

void
gw_session_writable (gw_session_t *self)
{
    assert (self);
    if (self->chan && gw_chan_flush (self->chan) == -EPIPE)
        s_lost_channel (self, "write failed");
}

bool
gw_session_finished (const gw_session_t *self)
{
    assert (self);
    return self->finished;
}

int
gw_session_exit_code (const gw_session_t *self)
{
    assert (self);
    return self->exit_code;
}

const char *
gw_session_id (const gw_session_t *self)
{
    assert (self);
    return self->session;
}
