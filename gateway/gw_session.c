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
#include "gw_session.h"
#include "gw_chan.h"
#include "gw_check.h"
#include "gw_log.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#define S_MAX_OUTSTANDING 1024                  //  requests in flight per session
#define S_MAX_HELD 1024                         //  messages waiting for a hello
#define S_RECENT_MAX 64                         //  retired requests kept for late output
#define S_EXIT_GRACE_MS 1000                    //  channel closed -> kill if still alive
#define S_KILL_WAIT_MS 3000                     //  kill sent -> stop waiting for the reap
#define S_SHUTDOWN_MS 800                       //  shutdown_request -> kill if still alive
#define S_INTERRUPT_GRACE_MS 5000               //  cell timeout: interrupt -> kill
#define S_MSG_ID_MAX 256

typedef enum { S_NONE, S_STARTING, S_READY, S_DYING } s_state_t;

//  One client (or gateway) request on shell or control.
typedef struct {
    char *msg_id;                               //  the request's header.msg_id
    kn_channel_t channel;                       //  shell or control
    gw_frames_t *ids;                           //  client identities, NULL = our own
    json_t *header;                             //  as the client sent it: every parent_header
    char reply_type [64];                       //  expected reply, "" for none (comm_*)
    bool execute;                               //  an execute_request
    bool allow_stdin;                           //  content.allow_stdin
    bool restart;                               //  shutdown_request content.restart
    bool sent;                                  //  handed to the current kernel
    bool busy;                                  //  its busy has gone out
    bool replied;                               //  its reply has gone out
    bool interrupted;                           //  the cell timeout interrupted it
    int64_t busy_at, interrupted_at;            //  zclock_mono ms
} s_req_t;

struct _gw_session_t {
    gw_backend_t *backend;                      //  owned
    gw_session_opts_t opts;                     //  with defaults filled in
    gw_session_emit_fn *emit;                   //  to clients
    void *emit_arg;
    char session [37];                          //  header.session we sign with
    s_state_t state;
    gw_chan_t *chan;                            //  the kernel's channel, NULL unless STARTING/READY
    zlistx_t *reqs;                             //  s_req_t, outstanding, oldest first
    zlistx_t *recent;                           //  s_req_t, retired, for late output
    zlistx_t *held;                             //  kn_msg_t, waiting for the hello
    int64_t deadline;                           //  STARTING: hello by; DYING: escalate at
    int64_t restart_at;                         //  NONE: start the next kernel at
    bool restart_pending;                       //  NONE: a restart is scheduled
    bool hello;                                 //  this kernel said hello
    bool killed;                                //  we killed this kernel
    char end_reason [320];                      //  why we ended it ("" = it died)
    int starts;                                 //  kernels started
    int failures;                               //  starts in a row without a hello
    int exec_count;                             //  last execution_count seen
    bool shutting_down;
    int64_t shutdown_at;                        //  kill the kernel if still there
    bool finished;
    int exit_code;
    char why [256];                             //  reason of a kernel violation
};

//  --------------------------------------------------------------------------
//  Requests.

static void
s_req_destroy (s_req_t **self_p)
{
    s_req_t *self = *self_p;
    if (!self)
        return;
    free (self->msg_id);
    gw_frames_destroy (&self->ids);
    json_decref (self->header);
    free (self);
    *self_p = NULL;
}

static void
s_req_free (void **item)
{
    s_req_destroy ((s_req_t **) item);
}

static void
s_held_free (void **item)
{
    kn_msg_destroy ((kn_msg_t **) item);
}

//  Build the entry for a shell/control request; takes *ids_p.
static s_req_t *
s_req_new (const kn_msg_t *msg, gw_frames_t **ids_p)
{
    s_req_t *self = calloc (1, sizeof *self);
    if (!self || !(self->msg_id = strdup (kn_msg_id (msg))))
        abort ();
    json_t *content = kn_msg_content (msg);
    self->channel = kn_msg_channel (msg);
    self->ids = ids_p ? *ids_p : NULL;
    if (ids_p)
        *ids_p = NULL;
    self->header = json_deep_copy (kn_msg_header (msg));
    gw_check_reply_type (kn_msg_type (msg), self->reply_type, sizeof self->reply_type);
    self->execute = strcmp (kn_msg_type (msg), "execute_request") == 0;
    self->allow_stdin = json_is_true (json_object_get (content, "allow_stdin"));
    self->restart = json_is_true (json_object_get (content, "restart"));
    return self;
}

static s_req_t *
s_find_in (zlistx_t *list, const char *msg_id, void **handle_p)
{
    for (s_req_t *req = zlistx_first (list); req; req = zlistx_next (list))
        if (strcmp (req->msg_id, msg_id) == 0) {
            if (handle_p)
                *handle_p = zlistx_cursor (list);
            return req;
        }
    return NULL;
}

//  msg_id of a kernel message's parent_header ("" when it has none).
static const char *
s_parent_id (const kn_msg_t *msg)
{
    const char *id = json_string_value (json_object_get (kn_msg_parent (msg), "msg_id"));
    return id ? id : "";
}

//  The request is over: keep it a while for late output, then forget it.
static void
s_retire (gw_session_t *self, void *handle)
{
    s_req_t *req = zlistx_detach (self->reqs, handle);
    gw_frames_destroy (&req->ids);
    zlistx_add_end (self->recent, req);
    if (zlistx_size (self->recent) > S_RECENT_MAX)
        zlistx_delete (self->recent, NULL);     //  the oldest
}

//  --------------------------------------------------------------------------
//  Emitting to clients.

static gw_frames_t *
s_topic (const gw_session_t *self, const kn_msg_t *msg)
{
    char topic [128];
    const char *type = kn_msg_type (msg);
    if (strcmp (type, "stream") == 0)
        snprintf (topic, sizeof topic, "stream.%s",
                  json_string_value (json_object_get (kn_msg_content (msg), "name")));
    else
        snprintf (topic, sizeof topic, "kernel.%s.%s", self->session, type);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, topic, strlen (topic));
    return ids;
}

//  Send msg on channel; iopub gets its topic here.
static void
s_emit (gw_session_t *self, kn_channel_t ch, const gw_frames_t *ids, const kn_msg_t *msg)
{
    if (!self->emit)
        return;
    if (ch == KN_CH_IOPUB) {
        gw_frames_t *topic = s_topic (self, msg);
        self->emit (self->emit_arg, ch, topic, msg);
        gw_frames_destroy (&topic);
    }
    else if (ids)
        self->emit (self->emit_arg, ch, ids, msg);
}

//  A message of the gateway's own making; steals content.
static void
s_emit_new (gw_session_t *self, kn_channel_t ch, const gw_frames_t *ids, const char *type,
            const json_t *parent, json_t *content)
{
    kn_msg_t *msg = kn_msg_new (ch, type, parent, &content, self->session);
    s_emit (self, ch, ids, msg);
    kn_msg_destroy (&msg);
}

static void
s_status (gw_session_t *self, const json_t *parent, const char *state)
{
    s_emit_new (self, KN_CH_IOPUB, NULL, "status", parent,
                json_pack ("{s:s}", "execution_state", state));
}

//  Forward a validated kernel message, re-stamped: fresh header, our session
//  id, and parent_header = the stored request header (or {}).
static void
s_relay (gw_session_t *self, const kn_msg_t *kmsg, const gw_frames_t *ids, const json_t *parent)
{
    kn_channel_t ch = kn_msg_channel (kmsg);
    json_t *content = json_incref (kn_msg_content (kmsg));
    kn_msg_t *out = kn_msg_new (ch, kn_msg_type (kmsg), parent, &content, self->session);
    json_t *metadata = json_incref (kn_msg_metadata (kmsg));
    kn_msg_set_metadata (out, &metadata);
    for (size_t i = 0; i < kn_msg_nbuffers (kmsg); i++) {
        size_t len = 0;
        const uint8_t *data = kn_msg_buffer (kmsg, i, &len);
        uint8_t *copy = malloc (len ? len : 1);
        if (!copy)
            abort ();
        memcpy (copy, data, len);
        kn_msg_add_buffer (out, &copy, len);
    }
    s_emit (self, ch, ids, out);
    kn_msg_destroy (&out);
}

//  Close a request the kernel will never answer: busy (if not yet sent),
//  optionally an iopub error, an error reply, idle. Removes it.
static void
s_fail_request (gw_session_t *self, void *handle, const char *ename, const char *text,
                bool publish_error)
{
    s_req_t *req = zlistx_handle_item (handle);
    if (req->ids && !req->busy)
        s_status (self, req->header, "busy");
    json_t *tb = json_pack ("[s]", text);
    if (req->ids && publish_error)
        s_emit_new (self, KN_CH_IOPUB, NULL, "error", req->header,
                    json_pack ("{s:s, s:s, s:O}", "ename", ename, "evalue", text, "traceback", tb));
    if (req->ids && req->reply_type [0] && !req->replied) {
        json_t *content = json_pack ("{s:s, s:s, s:s, s:O}", "status", "error", "ename", ename,
                                     "evalue", text, "traceback", tb);
        if (req->execute)
            json_object_set_new (content, "execution_count", json_integer (self->exec_count));
        s_emit_new (self, req->channel, req->ids, req->reply_type, req->header, content);
    }
    json_decref (tb);
    if (req->ids)
        s_status (self, req->header, "idle");
    zlistx_delete (self->reqs, handle);
}

//  --------------------------------------------------------------------------
//  Talking to the kernel.

//  Hand msg to the current kernel and mark its request as sent. A request
//  that cannot be framed is answered with an error here and now.
static void
s_send (gw_session_t *self, const kn_msg_t *msg)
{
    void *handle = NULL;
    s_req_t *req = s_find_in (self->reqs, kn_msg_id (msg), &handle);
    if (kn_msg_channel (msg) == KN_CH_STDIN)
        req = NULL;
    int rc = gw_chan_send (self->chan, msg);
    if (req)
        req->sent = true;
    if (rc == -EMSGSIZE || rc == -ENOBUFS) {
        gw_log (GW_LOG_WARN, "kernel.send_failed", "msg_type=%.64s reason=\"%s\"",
                kn_msg_type (msg), rc == -EMSGSIZE ? "frame too large" : "kernel not reading");
        if (req)
            s_fail_request (self, handle, "RequestNotDelivered",
                            rc == -EMSGSIZE ? "The request is too large for the kernel's channel."
                                            : "The kernel is not reading its channel.", false);
    }
}

//  Send now when the kernel is ready, else hold until its hello. Takes *msg_p.
static void
s_deliver (gw_session_t *self, kn_msg_t **msg_p)
{
    if (self->state == S_READY) {
        s_send (self, *msg_p);
        kn_msg_destroy (msg_p);
    }
    else {
        zlistx_add_end (self->held, *msg_p);
        *msg_p = NULL;
    }
}

static void
s_flush_held (gw_session_t *self)
{
    kn_msg_t *msg;
    while (self->state == S_READY && (msg = zlistx_detach (self->held, NULL))) {
        s_send (self, msg);
        kn_msg_destroy (&msg);
    }
}

//  A request of the gateway's own (timeout interrupt, SIGTERM shutdown):
//  tracked like a client's, but nothing about it reaches a client.
static void
s_own_request (gw_session_t *self, const char *type, json_t *content)
{
    kn_msg_t *msg = kn_msg_new (KN_CH_CONTROL, type, NULL, &content, self->session);
    zlistx_add_end (self->reqs, s_req_new (msg, NULL));
    s_deliver (self, &msg);
}

static void
s_send_hello (gw_session_t *self)
{
    json_t *content = json_pack ("{s:s, s:i, s:s, s:s, s:f}", "protocol", "cellvm-channel",
                                 "version", 1, "role", "driver",
                                 "implementation", "cellvm-gateway",
                                 "time", (double) zclock_time () / 1000.0);
    kn_msg_t *hello = kn_msg_new (KN_CH_CELLVM, "hello", NULL, &content, self->session);
    gw_chan_send (self->chan, hello);
    kn_msg_destroy (&hello);
}

static int
s_start_kernel (gw_session_t *self, char *err, size_t errlen)
{
    assert (self->state == S_NONE && !self->chan);
    int fd = -1;
    self->restart_pending = false;
    int rc = self->backend->start (self->backend->ctx, &fd, err, errlen);
    if (rc < 0) {
        gw_log (GW_LOG_ERROR, "kernel.start_failed", "backend=%s reason=\"%s\"",
                self->backend->name, err);
        return rc;
    }
    if (self->starts++ > 0)
        kn_uuid4 (self->session);               //  a new kernel, a new session id
    self->chan = gw_chan_new (fd, self->opts.max_frame, self->opts.max_msg, 0);
    self->state = S_STARTING;
    self->hello = self->killed = false;
    self->end_reason [0] = 0;
    self->deadline = zclock_mono () + (int64_t) (self->opts.ready_timeout * 1000);
    int pid = self->backend->pid ? self->backend->pid (self->backend->ctx) : 0;
    gw_log (GW_LOG_INFO, "kernel.starting", "backend=%s pid=%d start=%d session=%s",
            self->backend->name, pid, self->starts, self->session);
    s_send_hello (self);
    return 0;
}

//  End the current kernel from outside; the reap completes the story.
static void
s_stop_kernel (gw_session_t *self, const char *reason)
{
    if (self->state == S_NONE || self->killed)
        return;
    if (reason && !self->end_reason [0])
        snprintf (self->end_reason, sizeof self->end_reason, "%s", reason);
    self->backend->kill (self->backend->ctx);
    self->killed = true;
    gw_chan_destroy (&self->chan);
    self->state = S_DYING;
    self->deadline = zclock_mono () + S_KILL_WAIT_MS;
}

static void
s_violation (gw_session_t *self, const char *why)
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
    self->state = S_DYING;
    self->deadline = zclock_mono () + S_EXIT_GRACE_MS;
}

//  --------------------------------------------------------------------------
//  When a kernel ends.

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

//  How the kernel ended, in words, and what to do about it.
static void
s_describe (const gw_session_t *self, const gw_exit_t *ex, char *out, size_t cap)
{
    char how [400];
    int sig = ex->signal ? ex->signal
            : ex->exit_code > 128 && ex->exit_code < 128 + 65 ? ex->exit_code - 128 : 0;
    const char *abbrev = sig ? sigabbrev_np (sig) : NULL;
    if (self->end_reason [0])
        snprintf (how, sizeof how, "%s", self->end_reason);
    else if (ex->oom_killed)
        snprintf (how, sizeof how, "The kernel ran out of memory and was killed");
    else if (ex->signal)
        snprintf (how, sizeof how, "The kernel process was killed by signal %d (SIG%s, %s)%s%s",
                  sig, abbrev ? abbrev : "?", strsignal (sig), s_signal_hint (sig),
                  ex->core_dumped ? "; it dumped core" : "");
    else if (sig)
        snprintf (how, sizeof how, "The kernel process exited with status %d, "
                  "which means signal %d (SIG%s)%s", ex->exit_code, sig,
                  abbrev ? abbrev : "?", s_signal_hint (sig));
    else if (ex->exit_code >= 0)
        snprintf (how, sizeof how, "The kernel process exited unexpectedly with status %d",
                  ex->exit_code);
    else
        snprintf (how, sizeof how, "The kernel process ended");
    snprintf (out, cap, "%s. Everything it held in memory (variables, imports) is lost. "
              "A new kernel is being started: re-run the cells this one depends on.", how);
}

//  Fail every request the dead kernel had: the running cell (the oldest
//  execute_request without a reply) also gets the iopub error.
static void
s_fail_outstanding (gw_session_t *self, const char *text)
{
    bool running_done = false;
    for (;;) {
        s_req_t *req = zlistx_first (self->reqs);
        while (req && !req->sent)
            req = zlistx_next (self->reqs);
        if (!req)
            break;
        bool running = !running_done && req->execute && !req->replied;
        running_done |= running;
        s_fail_request (self, zlistx_cursor (self->reqs), "KernelDied", text, running);
    }
}

//  Shutdown is complete: answer whatever is left and let the gateway exit.
static void
s_finish (gw_session_t *self)
{
    s_req_t *req;
    while ((req = zlistx_first (self->reqs))) {
        void *handle = zlistx_cursor (self->reqs);
        if (req->ids && strcmp (req->reply_type, "shutdown_reply") == 0 && !req->replied) {
            if (!req->busy)
                s_status (self, req->header, "busy");
            s_emit_new (self, req->channel, req->ids, "shutdown_reply", req->header,
                        json_pack ("{s:s, s:b}", "status", "ok", "restart", req->restart));
            req->busy = req->replied = true;
        }
        s_fail_request (self, handle, "KernelShutdown", "The kernel was shut down.", false);
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
    gw_log (GW_LOG_ERROR, "session.give_up", "failures=%d", self->failures);
    s_req_t *req;
    while ((req = zlistx_first (self->reqs)))
        s_fail_request (self, zlistx_cursor (self->reqs), "KernelStartFailed", text, true);
    zlistx_purge (self->held);
    s_status (self, NULL, "dead");
    self->exit_code = 1;
    self->finished = true;
}

//  A failed start or an early death: try again later, or give up.
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
    self->restart_at = zclock_mono () + backoff;
    self->restart_pending = true;
}

static void
s_kernel_ended (gw_session_t *self, const gw_exit_t *ex)
{
    gw_chan_destroy (&self->chan);
    self->state = S_NONE;
    if (self->shutting_down) {
        s_finish (self);
        return;
    }
    char text [800];
    s_describe (self, ex, text, sizeof text);
    gw_log (GW_LOG_WARN, "kernel.died", "exit_code=%d signal=%d ready=%s",
            ex->exit_code, ex->signal, self->hello ? "yes" : "no");
    s_fail_outstanding (self, text);
    s_status (self, NULL, "restarting");
    self->failures = self->hello ? 0 : self->failures + 1;
    if (!self->hello && self->failures == 0)
        self->failures = 1;
    s_schedule_restart (self, self->end_reason [0] ? self->end_reason : "it exited");
}
