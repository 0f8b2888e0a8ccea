/*  mc_session - one cellvm session: a cellvm-gateway process, driven as a
    Jupyter client, and the tool calls queued on it. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <czmq.h>

#include "ch_clock.h"
#include "mc_kclient.h"
#include "mc_life.h"
#include "mc_log.h"
#include "mc_proc.h"
#include "mc_session.h"

//  A download is at most 256 MiB (docs/files.md); its reply's envelope more.
#define MAX_RECV ((size_t) 272 << 20)
#define PROBE_RESEND_MS 2000
#define PROBE_IOPUB_MS 300
#define TERM_AFTER_MS 3000
#define KILL_AFTER_MS 6000

typedef enum { S_STARTING, S_READY, S_STOPPING, S_DEAD } state_t;
//  STOP_ENDED: the gateway said it is ending the session (--idle-timeout,
//  --ttl) and is on its way out; nothing is asked of it.
typedef enum { STOP_RESTART, STOP_TIMEOUT, STOP_CLOSE, STOP_SHUTDOWN, STOP_ENDED } stop_t;

struct _mc_session_t {
    char name [MC_SESSION_MAX + 1];
    char conn [PATH_MAX];
    char log [PATH_MAX];
    const mc_spec_t *spec;
    const mc_options_t *opts;
    mc_shape_opts_t shape;
    mc_sink_t sink;
    pid_t pid;                  //  the gateway, 0 when reaped
    mc_kclient_t *kc;
    state_t state;
    stop_t stop;
    int64_t state_ms;           //  when the state began
    bool term_sent;
    bool probe_reply, iopub_seen;
    int64_t probe_ms;
    int64_t restart_ms;         //  when a restart op began
    mc_op_t *op;                //  the call in progress
    zlist_t *queue;             //  mc_op_t *, waiting
    const char *extra [9];      //  the lifetime and egress options appended to the argv
    char life [2][32];          //  their values
    double limits [2];          //  --idle-timeout, --ttl in effect (0: none)
    char notice [512];          //  the gateway's notice that it ends the session, or ""
    char *why;                  //  why the session ended by itself; NULL when it did not
    char tail [1200];           //  the end of the gateway's log then
    bool heard;                 //  a call was told why
};

static int
s_send (void *ctx, ch_channel_t ch, const char *msg_type, json_t **content_p,
        const uint8_t *buf, size_t len, char msg_id [37])
{
    mc_session_t *self = ctx;
    if (!self->kc) {
        json_decref (*content_p);
        *content_p = NULL;
        return -ENOTCONN;
    }
    return mc_kclient_send (self->kc, ch, msg_type, content_p, buf, len, msg_id);
}

static void
s_probe (mc_session_t *self, int64_t now_ms)
{
    char id [37];
    json_t *content = json_object ();
    s_send (self, CH_SHELL, "kernel_info_request", &content, NULL, 0, id);
    self->probe_ms = now_ms;
}

static void
s_set_state (mc_session_t *self, state_t state, int64_t now_ms)
{
    self->state = state;
    self->state_ms = now_ms;
    self->term_sent = false;
}

//  Start the gateway on the session's connection file and connect to it.
static int
s_launch (mc_session_t *self, int64_t now_ms, char *err, size_t errlen)
{
    mc_kclient_destroy (&self->kc);
    self->notice [0] = 0;
    pid_t pid = mc_proc_spawn (self->spec, self->conn, self->extra, self->log, err, errlen);
    if (pid < 0)
        return (int) pid;
    self->pid = pid;
    self->kc = mc_kclient_new (self->conn, MAX_RECV, err, errlen);
    if (!self->kc)
        return -EIO;
    self->probe_reply = self->iopub_seen = false;
    s_set_state (self, S_STARTING, now_ms);
    s_probe (self, now_ms);
    mc_log (CH_LOG_INFO, "session.start", "session=%s pid=%d idle_timeout_s=%g ttl_s=%g",
            self->name, (int) pid, self->limits [0], self->limits [1]);
    return 0;
}

//  --idle-timeout and --ttl for the gateway: ours, else the spec's own, else
//  the default (docs/mcp.md, "Lifetimes").
static void
s_life_args (mc_session_t *self)
{
    static const char *const names [2] = { "--idle-timeout", "--ttl" };
    const double ours [2] = { self->opts->idle_timeout_s, self->opts->ttl_s };
    const double fallback [2] = { MC_LIFE_IDLE_DEFAULT, 0 };
    size_t k = 0;
    for (int i = 0; i < 2; i++) {
        bool append;
        self->limits [i] = mc_spec_lifetime (self->spec, names [i], ours [i], fallback [i],
                                             &append);
        if (!append)
            continue;
        snprintf (self->life [i], sizeof self->life [i], "%.15g", self->limits [i]);
        self->extra [k++] = names [i];
        self->extra [k++] = self->life [i];
    }
    //  The gateway reads the last of each: ours win over the kernelspec's.
    if (self->opts->egress_allow [0]) {
        self->extra [k++] = "--egress-allow";
        self->extra [k++] = self->opts->egress_allow;
    }
    if (self->opts->egress_deny [0]) {
        self->extra [k++] = "--egress-deny";
        self->extra [k++] = self->opts->egress_deny;
    }
    self->extra [k] = NULL;
}

mc_session_t *
mc_session_new (const char *name, const char *dir, const mc_spec_t *spec,
                const mc_options_t *opts, const mc_shape_opts_t *shape,
                const mc_sink_t *sink, char *err, size_t errlen)
{
    assert (name && dir && spec && opts && shape && sink);
    mc_session_t *self = calloc (1, sizeof *self);
    if (!self || !(self->queue = zlist_new ()))
        abort ();
    snprintf (self->name, sizeof self->name, "%s", name);
    snprintf (self->conn, sizeof self->conn, "%s/%s.json", dir, name);
    snprintf (self->log, sizeof self->log, "%s/%s.log", dir, name);
    self->spec = spec;
    self->opts = opts;
    self->shape = *shape;
    self->sink = *sink;
    s_life_args (self);
    unlink (self->conn);
    if (mc_kclient_write_conn (self->conn, err, errlen) != 0
        || s_launch (self, ch_clock_mono_ms (), err, errlen) != 0)
        goto fail;
    return self;
fail:
    mc_session_destroy (&self);
    return NULL;
}

//  Kill what is left of the gateway and reap it (blocking: it is dying).
static void
s_kill (mc_session_t *self)
{
    if (self->pid <= 0)
        return;
    kill (self->pid, SIGKILL);
    waitpid (self->pid, NULL, 0);
    self->pid = 0;
}

void
mc_session_destroy (mc_session_t **self_p)
{
    assert (self_p);
    mc_session_t *self = *self_p;
    if (!self)
        return;
    s_kill (self);
    mc_kclient_destroy (&self->kc);
    mc_op_destroy (&self->op);
    mc_op_t *op;
    while ((op = zlist_pop (self->queue)))
        mc_op_destroy (&op);
    zlist_destroy (&self->queue);
    unlink (self->conn);
    unlink (self->log);
    free (self->why);
    free (self);
    *self_p = NULL;
}

const char *
mc_session_name (const mc_session_t *self)
{
    assert (self);
    return self->name;
}

bool
mc_session_dead (const mc_session_t *self)
{
    assert (self);
    return self->state == S_DEAD;
}

bool
mc_session_unheard (const mc_session_t *self, const char **why_p, const char **tail_p)
{
    assert (self && why_p && tail_p);
    if (self->state != S_DEAD || !self->why || self->heard)
        return false;
    *why_p = self->why;
    *tail_p = self->tail;
    return true;
}

void
mc_session_submit (mc_session_t *self, mc_op_t **op_p)
{
    assert (self && op_p && *op_p);
    zlist_append (self->queue, *op_p);
    *op_p = NULL;
}

//  Send the op's result (unless cancelled) and drop it.
static void
s_finish (mc_session_t *self, mc_op_t **op_p)
{
    mc_op_t *op = *op_p;
    if (!mc_op_cancelled (op)) {
        json_t *result = mc_op_result (op);
        self->sink.result (self->sink.ctx, mc_op_rpc_id (op), &result);
        json_decref (result);
    }
    mc_op_destroy (op_p);
}

//  The current op (a restart or a close) done: with words.
static void
s_finish_text (mc_session_t *self, const char *text, bool is_error)
{
    if (!self->op)
        return;
    mc_op_end (self->op, MC_END_LOST, text, ch_clock_mono_ms ());
    json_t *result = mc_op_text_result (text, is_error);
    if (!mc_op_cancelled (self->op))
        self->sink.result (self->sink.ctx, mc_op_rpc_id (self->op), &result);
    json_decref (result);
    mc_op_destroy (&self->op);
}

//  Tell the op why the session ended, and drop it.
static void
s_tell (mc_session_t *self, mc_op_t **op_p, mc_life_when_t when, int64_t now_ms)
{
    char *words = mc_life_words (self->name, when, mc_op_tool (*op_p), self->why, self->tail);
    json_t *result = mc_op_ended_result (*op_p, words, now_ms);
    if (!mc_op_cancelled (*op_p)) {
        self->sink.result (self->sink.ctx, mc_op_rpc_id (*op_p), &result);
        self->heard = true;
    }
    json_decref (result);
    free (words);
    mc_op_destroy (op_p);
}

//  The session is over by itself (what: how, unless the gateway said why):
//  every call is told why; if none is, the server tells the next one.
static void
s_lost (mc_session_t *self, const char *what)
{
    free (self->why);
    self->why = mc_life_why (self->notice, what);
    self->tail [0] = 0;
    if (!self->notice [0])
        mc_proc_log_tail (self->log, self->tail, sizeof self->tail);
    mc_log (CH_LOG_WARN, "session.lost", "session=%s why=\"%s\"", self->name,
            self->notice [0] ? self->notice : what ? what : "?");
    s_kill (self);
    int64_t now = ch_clock_mono_ms ();
    if (self->op)
        s_tell (self, &self->op, MC_LIFE_DURING, now);
    while ((self->op = zlist_pop (self->queue)))
        s_tell (self, &self->op, MC_LIFE_BEFORE, now);
    mc_kclient_destroy (&self->kc);
    s_set_state (self, S_DEAD, now);
}

//  The gateway says it is ending the session: no new call is begun, and
//  once it has exited, every call is told its words.
static void
s_on_notice (mc_session_t *self, const char *notice, int64_t now_ms)
{
    snprintf (self->notice, sizeof self->notice, "%s", notice);
    mc_log (CH_LOG_INFO, "session.ending", "session=%s notice=\"%s\"", self->name, notice);
    if (self->state != S_READY)
        return;                 //  starting: its exit is seen; stopping: it goes anyway
    self->stop = STOP_ENDED;
    s_set_state (self, S_STOPPING, now_ms);
}

//  Ask the gateway to shut down (restart: it keeps /workspace for the next).
static void
s_stop (mc_session_t *self, stop_t stop, int64_t now_ms)
{
    char id [37];
    json_t *content = json_pack ("{s:b}", "restart", stop == STOP_RESTART || stop == STOP_TIMEOUT);
    s_send (self, CH_CONTROL, "shutdown_request", &content, NULL, 0, id);
    self->stop = stop;
    s_set_state (self, S_STOPPING, now_ms);
    mc_log (CH_LOG_INFO, "session.stop", "session=%s restart=%s", self->name,
            stop == STOP_RESTART || stop == STOP_TIMEOUT ? "yes" : "no");
}

bool
mc_session_cancel (mc_session_t *self, const json_t *rpc_id)
{
    assert (self && rpc_id);
    if (self->op && json_equal (mc_op_rpc_id (self->op), (json_t *) rpc_id)) {
        mc_op_cancel (self->op, s_send, self);
        return true;
    }
    for (mc_op_t *op = zlist_first (self->queue); op; op = zlist_next (self->queue))
        if (json_equal (mc_op_rpc_id (op), (json_t *) rpc_id)) {
            zlist_remove (self->queue, op);
            mc_op_destroy (&op);
            return true;
        }
    return false;
}

size_t
mc_session_pollitems (mc_session_t *self, zmq_pollitem_t *items)
{
    assert (self && items);
    if (!self->kc)
        return 0;
    const ch_channel_t chans [MC_SESSION_POLLITEMS] = { CH_SHELL, CH_CONTROL, CH_IOPUB };
    for (size_t i = 0; i < MC_SESSION_POLLITEMS; i++)
        items [i] = (zmq_pollitem_t) { mc_kclient_handle (self->kc, chans [i]), 0, ZMQ_POLLIN, 0 };
    return MC_SESSION_POLLITEMS;
}

//  One message from the gateway.
static void
s_on_msg (mc_session_t *self, ch_msg_t *msg, int64_t now_ms)
{
    char notice [sizeof self->notice];
    if (ch_msg_channel (msg) == CH_IOPUB)
        self->iopub_seen = true;
    if (mc_life_notice (msg, notice, sizeof notice)) {
        s_on_notice (self, notice, now_ms);
        return;
    }
    if (strcmp (ch_msg_type (msg), "kernel_info_reply") == 0)
        self->probe_reply = true;
    if (!self->op || self->state != S_READY || mc_op_tool (self->op) == MC_TOOL_RESTART
        || mc_op_tool (self->op) == MC_TOOL_CLOSE
        || strcmp (ch_msg_parent_id (msg), mc_op_msg_id (self->op)) != 0)
        return;
    if (mc_op_on_msg (self->op, msg, s_send, self, now_ms) == MC_OP_DONE)
        s_finish (self, &self->op);
}

void
mc_session_on_poll (mc_session_t *self, const zmq_pollitem_t *items, int64_t now_ms)
{
    assert (self && items);
    const ch_channel_t chans [MC_SESSION_POLLITEMS] = { CH_SHELL, CH_CONTROL, CH_IOPUB };
    for (size_t i = 0; i < MC_SESSION_POLLITEMS && self->kc; i++) {
        if (!(items [i].revents & ZMQ_POLLIN))
            continue;
        ch_msg_t *msg;
        const char *why;
        int rc;
        //  Bounded, so one busy session cannot starve the others.
        for (int n = 0; n < 256 && self->kc
             && (rc = mc_kclient_recv (self->kc, chans [i], &msg, &why)) != -EAGAIN; n++) {
            if (rc != 0) {
                mc_log (CH_LOG_WARN, "gateway.drop", "session=%s why=\"%s\"", self->name, why);
                continue;
            }
            s_on_msg (self, msg, now_ms);
            ch_msg_destroy (&msg);
        }
    }
}

//  Has the gateway exited? Describes how into what.
static bool
s_exited (mc_session_t *self, char *what, size_t cap)
{
    int status;
    if (self->pid <= 0 || mc_proc_reap (self->pid, &status) == 0)
        return false;
    self->pid = 0;
    char how [96];
    mc_proc_describe (status, how, sizeof how);
    snprintf (what, cap, "its gateway process %s", how);
    return true;
}

static void
s_tick_starting (mc_session_t *self, int64_t now_ms)
{
    char what [160];
    if (s_exited (self, what, sizeof what)) {
        s_lost (self, what);
        return;
    }
    if (self->probe_reply && self->iopub_seen) {
        s_set_state (self, S_READY, now_ms);
        mc_log (CH_LOG_INFO, "session.ready", "session=%s", self->name);
        if (self->op && mc_op_tool (self->op) == MC_TOOL_RESTART) {
            char text [256];
            snprintf (text, sizeof text, "Restarted session \"%s\" in %.1f s: a fresh Python "
                      "interpreter (every variable is gone); the files in /workspace are kept.",
                      self->name, (double) (now_ms - self->restart_ms) / 1000.0);
            s_finish_text (self, text, false);
        }
        return;
    }
    if (now_ms - self->state_ms > (int64_t) (self->opts->start_timeout_s * 1000)) {
        snprintf (what, sizeof what, "it did not start within %g s (--start-timeout)",
                  self->opts->start_timeout_s);
        s_lost (self, what);
    }
    else if (now_ms - self->probe_ms > (self->probe_reply ? PROBE_IOPUB_MS : PROBE_RESEND_MS))
        s_probe (self, now_ms);
}

//  The gateway is gone after a stop (what: how it ended; NULL when killed):
//  relaunch, or the session is over.
static void
s_stopped (mc_session_t *self, const char *what, int64_t now_ms)
{
    if (self->stop == STOP_ENDED) {
        s_lost (self, what ? what : "its gateway process did not exit after it said it was "
                "ending the session, and was killed");
        return;
    }
    mc_kclient_destroy (&self->kc);
    if (self->stop == STOP_RESTART || self->stop == STOP_TIMEOUT) {
        char err [512];
        if (s_launch (self, now_ms, err, sizeof err) != 0)
            s_lost (self, err);
        return;
    }
    s_set_state (self, S_DEAD, now_ms);
    mc_log (CH_LOG_INFO, "session.closed", "session=%s", self->name);
    if (self->stop == STOP_CLOSE) {
        char text [256];
        snprintf (text, sizeof text, "Closed session \"%s\": its VM, its variables and its "
                  "/workspace are gone.", self->name);
        s_finish_text (self, text, false);
    }
}

static void
s_tick_stopping (mc_session_t *self, int64_t now_ms)
{
    char what [160];
    if (s_exited (self, what, sizeof what)) {
        s_stopped (self, what, now_ms);
        return;
    }
    int64_t waited = now_ms - self->state_ms;
    if (waited > KILL_AFTER_MS) {
        mc_log (CH_LOG_WARN, "session.kill", "session=%s", self->name);
        s_kill (self);
        s_stopped (self, NULL, now_ms);
    }
    else if (waited > TERM_AFTER_MS && !self->term_sent) {
        kill (self->pid, SIGTERM);
        self->term_sent = true;
    }
}

//  The next queued call, when the session is ready for it.
static void
s_next (mc_session_t *self, int64_t now_ms)
{
    if (self->op || !(self->op = zlist_pop (self->queue)))
        return;
    mc_tool_t tool = mc_op_tool (self->op);
    if (tool == MC_TOOL_RESTART) {
        self->restart_ms = now_ms;
        s_stop (self, STOP_RESTART, now_ms);
    }
    else if (tool == MC_TOOL_CLOSE)
        s_stop (self, STOP_CLOSE, now_ms);
    else if (mc_op_begin (self->op, s_send, self, now_ms) != 0)
        s_finish (self, &self->op);
}

static void
s_tick_ready (mc_session_t *self, int64_t now_ms)
{
    char what [160], *progress;
    double elapsed;
    if (s_exited (self, what, sizeof what)) {
        s_lost (self, what);
        return;
    }
    if (!self->op) {
        s_next (self, now_ms);
        return;
    }
    mc_op_step_t step = mc_op_tick (self->op, s_send, self, now_ms, &progress, &elapsed);
    if (progress && self->sink.progress)
        self->sink.progress (self->sink.ctx, mc_op_token (self->op), elapsed, progress);
    free (progress);
    if (step == MC_OP_DONE)
        s_finish (self, &self->op);
    else if (step == MC_OP_RESTART) {
        mc_op_end (self->op, MC_END_TIMEOUT_RESTART, NULL, now_ms);
        s_finish (self, &self->op);
        s_stop (self, STOP_TIMEOUT, now_ms);
    }
}

void
mc_session_tick (mc_session_t *self, int64_t now_ms)
{
    assert (self);
    if (self->state == S_STARTING)
        s_tick_starting (self, now_ms);
    else if (self->state == S_READY)
        s_tick_ready (self, now_ms);
    else if (self->state == S_STOPPING)
        s_tick_stopping (self, now_ms);
}

void
mc_session_shutdown (mc_session_t *self, int64_t now_ms)
{
    assert (self);
    if (self->op) {
        mc_op_cancel (self->op, NULL, NULL);
        mc_op_destroy (&self->op);
    }
    mc_op_t *op;
    while ((op = zlist_pop (self->queue)))
        mc_op_destroy (&op);
    if (self->state == S_DEAD || (self->state == S_STOPPING && self->stop == STOP_SHUTDOWN))
        return;
    if (self->pid <= 0) {
        s_set_state (self, S_DEAD, now_ms);
        return;
    }
    bool starting = self->state == S_STARTING;
    s_stop (self, STOP_SHUTDOWN, now_ms);
    if (starting) {             //  requests wait for the kernel: a signal does not
        kill (self->pid, SIGTERM);
        self->term_sent = true;
    }
}
