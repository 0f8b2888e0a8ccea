/*  kn_kernel - the kernel's protocol core. */
#include "kn_kernel_int.h"
#include "ch_hello.h"
#include "ch_jfast.h"
#include "kn_log.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_RESEED_IDLE_MS 150        //  an empty queue this long pays for the reseed
#define KN_WORKSPACE "/workspace"   //  the guest's; init may mount it after a restore

kn_kernel_t *
kn_kernel_new (kn_chan_t *chan, const kn_kernel_config_t *config)
{
    assert (chan && config);
    kn_kernel_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->chan = chan;
    self->pid = getpid ();
    ch_uuid4 (self->session);
    pthread_mutex_init (&self->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init (&attr);
    pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
    pthread_cond_init (&self->cond, &attr);
    pthread_condattr_destroy (&attr);
    if (config->outdir) {
        self->outdir = strdup (config->outdir);
        size_t n = strlen (KN_WORKSPACE);
        self->in_workspace = strncmp (config->outdir, KN_WORKSPACE, n) == 0
                          && (config->outdir [n] == '/' || !config->outdir [n]);
        self->outfiles = kn_outfiles_new (config->outdir, KN_OUTFILES_CAP);
        if (!self->outfiles) {
            kn_log (CH_LOG_ERROR, "outdir.fail", "dir=\"%s\" reason=\"%s\"",
                    config->outdir, strerror (errno));
            kn_kernel_destroy (&self);
        }
    }
    return self;
}

void
kn_kernel_destroy (kn_kernel_t **self_p)
{
    assert (self_p);
    kn_kernel_t *self = *self_p;
    if (!self)
        return;
    kn_jobq_destroy (&self->debugq);
    while (self->head) {
        s_item_t *it = self->head;
        self->head = it->next;
        ch_msg_destroy (&it->msg);
        free (it);
    }
    ch_msg_destroy (&self->reseed);
    kn_outfiles_destroy (&self->outfiles);
    json_decref (self->info);
    json_decref (self->parent);
    free (self->parent_json);
    free (self->outdir);
    free (self->input_value);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->cond);
    free (self);
    *self_p = NULL;
}

void
kn_kernel_set_interp (kn_kernel_t *self, const kn_interp_t *interp)
{
    assert (self && interp);
    self->interp = *interp;
}

void
kn_kernel_set_flush (kn_kernel_t *self, void (*flush) (void *arg), void *arg)
{
    self->flush = flush;
    self->flush_arg = arg;
}

void
kn_kernel_flush (kn_kernel_t *self)
{
    if (self->flush)
        self->flush (self->flush_arg);
}

const char *
kn_kernel_session (const kn_kernel_t *self)
{
    return self->session;
}

//  ---------------------------------------------------------------------------
//  Sending

static void
s_send (kn_kernel_t *self, ch_channel_t ch, const char *type, const json_t *parent,
        json_t **content_p)
{
    ch_msg_t *msg = ch_msg_new (ch, type, parent, content_p, self->session);
    if (kn_chan_send (self->chan, &msg) == -EPIPE)
        kn_log (CH_LOG_DEBUG, "chan.closed", "msg_type=%s", type);
}

static void
s_status (kn_kernel_t *self, const json_t *parent, const char *state)
{
    json_t *c = json_pack ("{s:s}", "execution_state", state);
    s_send (self, CH_IOPUB, "status", parent, &c);
}


static json_t *
s_error_content (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback");
}

static void
s_reply (kn_kernel_t *self, const ch_msg_t *req, json_t **content_p)
{
    char rtype [256];
    if (!ch_msg_reply_type (ch_msg_type (req), rtype, sizeof rtype)) {
        json_decref (*content_p);
        *content_p = NULL;
        return;
    }
    s_send (self, ch_msg_channel (req), rtype, ch_msg_header (req), content_p);
}

//  ---------------------------------------------------------------------------
//  stdin

//  ms from now on self->cond's clock.
static struct timespec
s_deadline (int ms)
{
    struct timespec until;
    clock_gettime (CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long) ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    return until;
}

int
kn_kernel_input_begin (kn_kernel_t *self, const char *prompt, bool password)
{
    pthread_mutex_lock (&self->lock);
    free (self->input_value);
    self->input_value = NULL;
    self->input_waiting = true;
    json_t *parent = json_incref (self->parent);
    int closed = self->closed;
    pthread_mutex_unlock (&self->lock);
    if (!closed) {
        json_t *c = json_pack ("{s:s, s:b}", "prompt", prompt, "password", password);
        s_send (self, CH_STDIN, "input_request", parent, &c);
    }
    json_decref (parent);
    return closed ? -EPIPE : 0;
}

int
kn_kernel_input_wait (kn_kernel_t *self, int timeout_ms, char **value)
{
    struct timespec until = s_deadline (timeout_ms);
    int rc = 0;
    pthread_mutex_lock (&self->lock);
    while (!self->input_value && !self->closed && rc == 0)
        rc = pthread_cond_timedwait (&self->cond, &self->lock, &until);
    if (self->input_value) {
        *value = self->input_value;
        self->input_value = NULL;
        rc = 0;
    }
    else
        rc = self->closed ? -EPIPE : -ETIMEDOUT;
    pthread_mutex_unlock (&self->lock);
    return rc;
}

void
kn_kernel_input_end (kn_kernel_t *self)
{
    pthread_mutex_lock (&self->lock);
    self->input_waiting = false;
    free (self->input_value);
    self->input_value = NULL;
    pthread_mutex_unlock (&self->lock);
}

//  ---------------------------------------------------------------------------
//  The cellvm channel's own messages

static void
s_send_hello (kn_kernel_t *self)
{
    json_t *li = json_object_get (self->info, "language_info");
    json_t *c = json_pack ("{s:s, s:i, s:s, s:i, s:s, s:s, s:s, s:b, s:I, s:s?, s:s}",
        "protocol", CH_PROTO_CHANNEL, "version", CH_HELLO_VERSION, "role", "kernel",
        "pid", (int) getpid (), "implementation", "cellvm-kernel",
        "implementation_version", json_string_value (json_object_get (self->info,
                                                     "implementation_version")),
        "language_version", json_string_value (json_object_get (li, "version")),
        "ipython", self->ipython,
        "max_frame", (json_int_t) kn_chan_max_frame (self->chan),
        "outdir", self->outdir, "session", self->session);
    s_send (self, CH_CELLVM, "hello", NULL, &c);
}

static void
s_protocol_error (kn_kernel_t *self, const char *why, bool fatal)
{
    kn_log (fatal ? CH_LOG_ERROR : CH_LOG_WARN, "chan.bad_input",
            "fatal=%s reason=\"%s\"", fatal ? "true" : "false", why);
    json_t *c = json_pack ("{s:s, s:b}", "error", why, "fatal", fatal);
    s_send (self, CH_CELLVM, "protocol_error", NULL, &c);
}

static void s_enqueue (kn_kernel_t *self, ch_msg_t **msg_p);

//  Into /workspace on every driver hello, at once (not with the deferred
//  reseed: a cell may follow right away). A template's kernel waits in "/"
//  so init can unmount the disk; after a restore init mounts it again
//  before the driver's hello reaches us. A local kernel (outdir elsewhere)
//  keeps its cwd: the host's /workspace is none of its business.
//  A hello's "cwd" (cellvm-notebook: /notebook, the host's folder) comes first.
static void
s_enter_workspace (kn_kernel_t *self, const char *cwd)
{
    if (!self->in_workspace)
        return;
    if (cwd && cwd [0] == '/') {
        if (chdir (cwd) == 0)
            return;
        kn_log (CH_LOG_WARN, "kernel.chdir", "dir=%s reason=\"%s\"", cwd, strerror (errno));
    }
    if (chdir (KN_WORKSPACE) == 0)
        kn_log (CH_LOG_DEBUG, "kernel.chdir", "dir=%s", KN_WORKSPACE);
    else if (errno != ENOENT && errno != ENOTDIR)
        kn_log (CH_LOG_INFO, "kernel.chdir", "dir=%s reason=\"%s\"", KN_WORKSPACE,
                strerror (errno));
}

static void
s_on_cellvm (kn_kernel_t *self, ch_msg_t **msg_p)
{
    const ch_msg_t *msg = *msg_p;
    json_t *c = ch_msg_content (msg);
    if (strcmp (ch_msg_type (msg), "hello") != 0) {
        s_protocol_error (self, "unknown cellvm message type", false);
        return;
    }
    char why [128];
    if (ch_hello_check (c, CH_PROTO_CHANNEL, NULL, why, sizeof why) < 0) {
        s_protocol_error (self, why, true);
        _exit (3);
    }
    s_enter_workspace (self, json_string_value (json_object_get (c, "cwd")));
    s_send_hello (self);
    //  After a snapshot restore the driver sends fresh entropy, and a client
    //  may pass environment variables: the main thread applies both to Python
    //  before the next request that enters it.
    if (json_is_string (json_object_get (c, "entropy"))
    ||  json_is_object (json_object_get (c, "env"))
    ||  json_is_array (json_object_get (c, "ipython_options")))
        s_enqueue (self, msg_p);
}

//  ---------------------------------------------------------------------------
//  Control and stdin, on the reader thread

static void
s_shutdown (kn_kernel_t *self, const ch_msg_t *req)
{
    json_t *restart = json_object_get (ch_msg_content (req), "restart");
    bool again = json_is_true (restart);
    json_t *c = json_pack ("{s:s, s:b}", "status", "ok", "restart", again);
    s_reply (self, req, &c);
    s_status (self, ch_msg_header (req), "idle");
    kn_kernel_flush (self);
    c = json_pack ("{s:s, s:b, s:i}", "reason", "shutdown_request", "restart", again,
                   "status", 0);
    s_send (self, CH_CELLVM, "exiting", NULL, &c);
    kn_log (CH_LOG_INFO, "kernel.exit", "reason=shutdown_request restart=%s",
            again ? "true" : "false");
    //  Python may be mid-cell on the main thread: leave without finalising it.
    _exit (0);
}

//  A debug_request's reply: the interpreter's (it talks to the debugger,
//  which also answers while a cell is stopped in it). Without a debugger,
//  or when it gives no object: a failed DAP response.
static json_t *
s_debug (kn_kernel_t *self, const ch_msg_t *msg)
{
    json_t *content = ch_msg_content (msg);
    json_t *c = self->interp.debug
              ? self->interp.debug (self->interp.ctx, ch_msg_header (msg), content) : NULL;
    if (json_is_object (c))
        return c;
    json_decref (c);
    json_t *seq = json_object_get (content, "seq");
    json_t *cmd = json_object_get (content, "command");
    return json_pack ("{s:s, s:i, s:I, s:b, s:s, s:s}", "type", "response", "seq", 0,
                      "request_seq", json_is_integer (seq) ? json_integer_value (seq) : 0,
                      "success", 0, "command", json_is_string (cmd) ? json_string_value (cmd)
                      : "", "message", self->interp.debug ? "the debugger gave no reply"
                      : "this kernel has no debugger");
}

static void
s_on_control (kn_kernel_t *self, const ch_msg_t *msg)
{
    const char *type = ch_msg_type (msg);
    json_t *parent = ch_msg_header (msg);
    json_t *c = NULL;
    s_status (self, parent, "busy");
    if (strcmp (type, "shutdown_request") == 0)
        s_shutdown (self, msg);     //  does not return
    if (strcmp (type, "interrupt_request") == 0) {
        pthread_mutex_lock (&self->lock);
        if (self->executing)
            pthread_kill (self->main_thread, SIGINT);
        pthread_mutex_unlock (&self->lock);
        c = json_pack ("{s:s}", "status", "ok");
    }
    else if (strcmp (type, "kernel_info_request") == 0)
        c = json_deep_copy (self->info);
    else if (strcmp (type, "debug_request") == 0)
        c = s_debug (self, msg);
    else {
        char why [300];
        snprintf (why, sizeof why, "%s is not handled on the control channel", type);
        c = s_error_content ("UnknownMessageType", why);
        kn_log (CH_LOG_WARN, "control.unknown", "msg_type=\"%.100s\"", type);
    }
    s_reply (self, msg, &c);
    s_status (self, parent, "idle");
}

//  A debug_request on the debug queue's thread: it may wait for the GIL and
//  for the debugger while the reader goes on serving control and stdin.
static void
s_debug_job (void *arg, ch_msg_t **msg_p)
{
    kn_kernel_t *self = arg;
    json_t *c = s_debug (self, *msg_p);
    s_reply (self, *msg_p, &c);
    s_status (self, ch_msg_header (*msg_p), "idle");
}

//  Control, on the reader thread: a debug_request goes to the debug queue
//  (busy now, its reply and idle from there), the rest is answered here.
static void
s_on_control_msg (kn_kernel_t *self, ch_msg_t **msg_p)
{
    if (self->debugq && strcmp (ch_msg_type (*msg_p), "debug_request") == 0) {
        s_status (self, ch_msg_header (*msg_p), "busy");
        kn_jobq_push (self->debugq, msg_p);
    }
    else
        s_on_control (self, *msg_p);
}

static void
s_on_stdin (kn_kernel_t *self, const ch_msg_t *msg)
{
    const char *value = json_string_value (json_object_get (ch_msg_content (msg), "value"));
    pthread_mutex_lock (&self->lock);
    bool take = self->input_waiting && value && strcmp (ch_msg_type (msg), "input_reply") == 0;
    if (take) {
        free (self->input_value);
        self->input_value = strdup (value);
        pthread_cond_broadcast (&self->cond);
    }
    pthread_mutex_unlock (&self->lock);
    if (!take)
        kn_log (CH_LOG_WARN, "stdin.drop", "reason=\"no input() is waiting for this reply\"");
}

static void
s_enqueue (kn_kernel_t *self, ch_msg_t **msg_p)
{
    s_item_t *it = calloc (1, sizeof *it);
    if (!it)
        abort ();
    it->msg = *msg_p;
    *msg_p = NULL;
    pthread_mutex_lock (&self->lock);
    if (self->tail)
        self->tail->next = it;
    else
        self->head = it;
    self->tail = it;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->lock);
}

static void *
s_reader (void *arg)
{
    kn_kernel_t *self = arg;
    while (1) {
        ch_msg_t *msg = NULL;
        char why [256] = "";
        int rc = kn_chan_recv (self->chan, &msg, why, sizeof why);
        if (rc == -EPROTO) {
            s_protocol_error (self, why, true);
            _exit (3);      //  the stream cannot be resynchronised
        }
        if (rc == -EPIPE)
            break;
        if (rc < 0) {
            s_protocol_error (self, why, false);
            continue;
        }
        switch (ch_msg_channel (msg)) {
            case CH_SHELL:   s_enqueue (self, &msg); break;
            case CH_CONTROL: s_on_control_msg (self, &msg); break;
            case CH_STDIN:   s_on_stdin (self, msg); break;
            case CH_CELLVM:  s_on_cellvm (self, &msg); break;
            default:            s_protocol_error (self, "the driver may not send on iopub", false);
        }
        ch_msg_destroy (&msg);
    }
    kn_log (CH_LOG_INFO, "chan.eof", "reason=\"the driver closed the channel\"");
    pthread_mutex_lock (&self->lock);
    self->closed = 1;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  ---------------------------------------------------------------------------
//  Shell, on the main thread

//  Take the whole queue: what is queued at the moment a cell fails.
static s_item_t *
s_detach_queue (kn_kernel_t *self)
{
    pthread_mutex_lock (&self->lock);
    s_item_t *list = self->head;
    self->head = self->tail = NULL;
    pthread_mutex_unlock (&self->lock);
    return list;
}

//  stop_on_error: every execute_request in list (detached when the cell
//  failed) gets an error reply; the others go back to the front of the queue.
static void
s_abort_queued (kn_kernel_t *self, s_item_t *list)
{
    s_item_t *keep = NULL, **kt = &keep, *tail = NULL;
    while (list) {
        s_item_t *it = list;
        list = it->next;
        it->next = NULL;
        if (strcmp (ch_msg_type (it->msg), "execute_request") != 0) {
            *kt = tail = it;
            kt = &it->next;
            continue;
        }
        s_status (self, ch_msg_header (it->msg), "busy");
        json_t *c = s_error_content ("ExecutionAborted", "Not run: an earlier cell raised "
                                     "an error and stop_on_error is set. Fix it and run again.");
        json_object_set_new (c, "execution_count", json_integer (self->last_count));
        s_reply (self, it->msg, &c);
        s_status (self, ch_msg_header (it->msg), "idle");
        ch_msg_destroy (&it->msg);
        free (it);
    }
    //  Put the survivors back in front of anything that arrived meanwhile.
    pthread_mutex_lock (&self->lock);
    if (keep) {
        tail->next = self->head;
        if (!self->head)
            self->tail = tail;
        self->head = keep;
    }
    pthread_mutex_unlock (&self->lock);
}

static void
s_set_current (kn_kernel_t *self, const ch_msg_t *msg, bool silent, bool executing)
{
    pthread_mutex_lock (&self->lock);
    json_decref (self->parent);
    self->parent = msg ? json_incref (ch_msg_header (msg)) : NULL;
    free (self->parent_json);
    self->parent_json = self->parent ? ch_jfast_dump (self->parent, JSON_COMPACT, NULL) : NULL;
    self->silent = silent;
    self->executing = executing;
    pthread_mutex_unlock (&self->lock);
}

//  Apply the pending entropy hello, if any: no busy/idle. Deferred from its
//  arrival so requests answered in C (kernel_info) do not wait ~0.1 s for
//  cold Python after a restore; executing is false, so no interrupt cuts it.
static void
s_reseed (kn_kernel_t *self)
{
    if (!self->reseed)
        return;
    json_t *r = self->interp.handle (self->interp.ctx, "cellvm_reseed_request",
                                     ch_msg_content (self->reseed));
    ch_msg_destroy (&self->reseed);
    const char *st = json_string_value (json_object_get (r, "status"));
    kn_log (st && !strcmp (st, "ok") ? CH_LOG_INFO : CH_LOG_ERROR, "kernel.reseed",
            "status=%s", st ? st : "?");
    json_decref (r);
}

//  Run an execute or other interpreter request; returns the reply content.
//  When stop_on_error applies, *aborted gets the queue as it was then.
static json_t *
s_run_interp (kn_kernel_t *self, const ch_msg_t *msg, s_item_t **aborted)
{
    const char *type = ch_msg_type (msg);
    json_t *content = ch_msg_content (msg);
    bool exec = strcmp (type, "execute_request") == 0;
    bool silent = exec && json_is_true (json_object_get (content, "silent"));
    s_reseed (self);    //  before any user-influenced Python runs
    if (exec && self->outfiles)
        kn_outfiles_snapshot (self->outfiles);
    s_set_current (self, msg, silent, true);
    json_t *reply = self->interp.handle (self->interp.ctx, type, content);
    if (getpid () != self->pid)
        _exit (0);      //  a fork the cell made, back from the cell: it is done
    s_set_current (self, msg, silent, false);
    if (self->interp.discard_interrupt)
        self->interp.discard_interrupt (self->interp.ctx);
    kn_kernel_flush (self);
    if (!reply)
        reply = s_error_content ("KernelError", "the interpreter gave no reply");
    if (exec) {
        json_t *count = json_object_get (reply, "execution_count");
        if (json_is_integer (count))
            self->last_count = json_integer_value (count);
        bool failed = strcmp (json_string_value (json_object_get (reply, "status"))
                              ? json_string_value (json_object_get (reply, "status")) : "", "ok");
        json_t *soe = json_object_get (content, "stop_on_error");
        if (failed && !silent && (!soe || json_is_true (soe)))
            *aborted = s_detach_queue (self);
    }
    if (exec && self->outfiles) {
        bool truncated = false;
        json_object_set_new (reply, "output_files",
                             kn_outfiles_changes (self->outfiles, &truncated));
        json_object_set_new (reply, "output_files_truncated", json_boolean (truncated));
    }
    return reply;
}

//  A comm message from the client goes to the interpreter whole and gets no
//  reply; its handlers run here, between cells, as ipykernel runs them.
//  Without comms a comm_open is closed at once, as with no target.
static void
s_run_comm (kn_kernel_t *self, const ch_msg_t *msg)
{
    if (!self->interp.comm) {
        if (strcmp (ch_msg_type (msg), "comm_open") == 0) {
            json_t *c = json_pack ("{s:O?, s:{}}", "comm_id",
                                   json_object_get (ch_msg_content (msg), "comm_id"), "data");
            kn_kernel_publish (self, "comm_close", &c);
        }
        return;
    }
    s_reseed (self);
    s_set_current (self, msg, false, true);     //  a handler can be interrupted
    self->interp.comm (self->interp.ctx, msg);
    if (getpid () != self->pid)
        _exit (0);      //  a fork a handler made, back from it: it is done
    s_set_current (self, msg, false, false);
    if (self->interp.discard_interrupt)
        self->interp.discard_interrupt (self->interp.ctx);
    kn_kernel_flush (self);
}

static void
s_on_shell (kn_kernel_t *self, ch_msg_t **msg_p)
{
    ch_msg_t *msg = *msg_p;
    if (ch_msg_channel (msg) == CH_CELLVM) {
        //  A hello with entropy or env: keep it for later. A newer one
        //  replaces it, but never drops what the older one still carried.
        if (self->reseed)
            json_object_update_missing (ch_msg_content (msg), ch_msg_content (self->reseed));
        ch_msg_destroy (&self->reseed);
        self->reseed = msg;
        *msg_p = NULL;
        return;
    }
    const char *type = ch_msg_type (msg);
    json_t *parent = ch_msg_header (msg);
    s_item_t *aborted = NULL;
    json_t *reply = NULL;
    s_set_current (self, msg, false, false);
    s_status (self, parent, "busy");
    if (strcmp (type, "kernel_info_request") == 0)
        reply = json_deep_copy (self->info);
    else if (strcmp (type, "shutdown_request") == 0)
        s_shutdown (self, msg);     //  does not return
    else if (strncmp (type, "comm_", 5) == 0 && strcmp (type, "comm_info_request") != 0)
        s_run_comm (self, msg);
    else
        reply = s_run_interp (self, msg, &aborted);
    if (reply)
        s_reply (self, msg, &reply);
    s_status (self, parent, "idle");
    s_set_current (self, NULL, false, false);
    if (aborted)
        s_abort_queued (self, aborted);
}

//  After an idle reseed (so only after a restore): a silent `pass` through
//  the interpreter, publishing nothing, so that QEMU has translated the cell
//  path before the first real cell (under TCG that costs ~0.3 s once).
static void
s_warm (kn_kernel_t *self)
{
    json_t *c = json_pack ("{s:s, s:b, s:b, s:{}, s:b}", "code", "pass", "silent", 1,
                           "store_history", 0, "user_expressions", "allow_stdin", 0);
    s_set_current (self, NULL, true, false);
    json_t *r = self->interp.handle (self->interp.ctx, "execute_request", c);
    kn_kernel_flush (self);
    s_set_current (self, NULL, false, false);
    json_decref (r);
    json_decref (c);
}

//  The next shell item, or NULL once the channel closed. A pending reseed
//  (and a warm-up) runs after S_RESEED_IDLE_MS of an empty queue, so the
//  first cell does not usually pay for them.
static s_item_t *
s_next (kn_kernel_t *self)
{
    struct timespec until = s_deadline (S_RESEED_IDLE_MS);
    pthread_mutex_lock (&self->lock);
    while (!self->head && !self->closed) {
        if (!self->reseed) {
            pthread_cond_wait (&self->cond, &self->lock);
            continue;
        }
        int rc = pthread_cond_timedwait (&self->cond, &self->lock, &until);
        if (rc != ETIMEDOUT || self->head || self->closed)
            continue;
        pthread_mutex_unlock (&self->lock);
        s_reseed (self);
        s_warm (self);
        pthread_mutex_lock (&self->lock);
    }
    s_item_t *it = self->head;
    if (it && !(self->head = it->next))
        self->tail = NULL;
    pthread_mutex_unlock (&self->lock);
    return it;
}

int
kn_kernel_run (kn_kernel_t *self)
{
    assert (self && self->interp.handle && self->interp.info);
    self->main_thread = pthread_self ();
    self->info = self->interp.info (self->interp.ctx);
    if (!self->info)
        return 1;
    self->ipython = json_is_true (json_object_get (self->info, "ipython"));
    json_object_del (self->info, "ipython");    //  not part of kernel_info_reply
    if (self->interp.debug)
        self->debugq = kn_jobq_new (s_debug_job, self);
    sigset_t all, old;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &old);     //  interrupts are for this thread
    int rc = pthread_create (&self->reader, NULL, s_reader, self);
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return 1;
    s_send_hello (self);
    kn_log (CH_LOG_INFO, "kernel.ready", "session=%s", self->session);
    s_item_t *it;
    while ((it = s_next (self))) {
        s_on_shell (self, &it->msg);
        ch_msg_destroy (&it->msg);
        free (it);
    }
    ch_msg_destroy (&self->reseed);    //  the channel is gone: no cell will run
    pthread_join (self->reader, NULL);
    return 0;
}
