/*  gw_session_kernel - the session's side of what the kernel sends, and of
    the files the gateway moves itself.

    Every kernel message is validated before anything else (gw_check), then
    handled by channel: the cellvm channel's own messages, replies, stdin,
    iopub. A reply whose output_files must be copied out is held (and so is
    everything with the same parent) until the copy is done. See
    gw_session.c for the lifecycle.
*/
#include "session/gw_session_int.h"
#include "session/gw_check.h"
#include "base/gw_log.h"
#include "session/gw_out.h"
#include "ch_text.h"
#include "ch_clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  cellvm_put/get_request: the gateway answers, through the backend, while
//  everything else goes on.
typedef struct {
    gw_session_t *session;
    gw_frames_t *ids;                           //  the client's
    json_t *header;                             //  the request's
    char rtype [64];                            //  its reply's msg_type
} s_file_job_t;

static void
s_file_replied (void *arg, json_t **content_p, uint8_t **data_p, size_t len)
{
    s_file_job_t *job = arg;
    gw_session_t *self = job->session;
    ch_msg_t *reply = ch_msg_new (CH_CONTROL, job->rtype, job->header, content_p, self->session);
    if (*data_p)
        ch_msg_add_buffer (reply, data_p, len);
    gw_out_send (self->out, CH_CONTROL, job->ids, reply);
    ch_msg_destroy (&reply);
    gw_out_status (self->out, job->header, "idle");
    gw_frames_destroy (&job->ids);
    json_decref (job->header);
    free (job);
}


void
gw_session__file_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p)
{
    s_file_job_t *job = calloc (1, sizeof *job);
    if (!job)
        abort ();
    job->session = self;
    job->ids = *ids_p;
    *ids_p = NULL;
    job->header = json_incref (ch_msg_header (msg));
    ch_msg_reply_type (ch_msg_type (msg), job->rtype, sizeof job->rtype);
    gw_out_status (self->out, job->header, "busy");
    gw_files_request (self->files, msg, s_file_replied, job);
}

//  --------------------------------------------------------------------------
//  Messages from the kernel. Each handler returns 0, or 1 after writing the
//  violation into self->why (the kernel is then stopped).

//  The gateway never sends a kernel bad input, so a kernel's protocol_error
//  notices are rare; past this many they are a flood (each is a log line),
//  and the kernel is stopped: nothing a guest sends is taken without a cap.
#define S_MAX_NOTICES 100

static int
s_bad (gw_session_t *self, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

static int
s_bad (gw_session_t *self, const char *fmt, ...)
{
    va_list args;
    va_start (args, fmt);
    vsnprintf (self->why, sizeof self->why, fmt, args);
    va_end (args);
    return 1;
}

static void s_share_start (gw_session_t *self);

static int
s_on_cellvm (gw_session_t *self, ch_msg_t *msg)
{
    const char *type = ch_msg_type (msg);
    json_t *content = ch_msg_content (msg);
    if (strcmp (type, "protocol_error") == 0 && ++self->notices > S_MAX_NOTICES)
        return s_bad (self, "more than %d protocol_error notices (a flood)", S_MAX_NOTICES);
    if (strcmp (type, "protocol_error") == 0) {
        bool fatal = json_is_true (json_object_get (content, "fatal"));
        const char *error = json_string_value (json_object_get (content, "error"));
        gw_log (GW_LOG_WARN, "kernel.protocol_error", "fatal=%s error=\"%.200s\"",
                fatal ? "yes" : "no", error);
        if (fatal && !self->end_reason [0]) {   //  it is about to exit: say why
            snprintf (self->end_reason, sizeof self->end_reason,
                      "The kernel stopped on a channel error (%.200s)", error);
            ch_text_printable (self->end_reason, NULL);
        }
    }
    else if (strcmp (type, "exiting") == 0)
        gw_log (GW_LOG_INFO, "kernel.exiting", "reason=\"%.64s\"",
                json_string_value (json_object_get (content, "reason")));
    else if (self->state == GW_SESSION_STARTING) {           //  hello
        if (gw_check_hello (msg, self->why, sizeof self->why) < 0)
            return 1;
        self->state = GW_SESSION_READY;
        self->hello = true;
        self->failures = 0;
        const char *outdir = json_string_value (json_object_get (content, "outdir"));
        snprintf (self->outdir, sizeof self->outdir, "%s", outdir ? outdir : "");
        gw_log (GW_LOG_INFO, "kernel.ready", "start=%d ipython=%s held=%zu", self->starts,
                json_is_true (json_object_get (content, "ipython")) ? "yes" : "no",
                zlistx_size (self->held));
        s_share_start (self);
        gw_session__flush_held (self);
    }
    return 0;
}

//  An execute_reply whose output_files are being copied out.
typedef struct {
    gw_session_t *session;
    char *msg_id;                               //  its request's
    ch_msg_t *reply;                            //  the kernel's reply, held
} s_collect_job_t;

static int s_on_iopub (gw_session_t *self, ch_msg_t **msg_p);

//  The oldest deferred message with this parent, taken out; NULL when none.
static ch_msg_t *
s_take_deferred (gw_session_t *self, const char *parent_id)
{
    for (void *it = zlistx_first (self->deferred); it; it = zlistx_next (self->deferred))
        if (strcmp (ch_msg_parent_id (it), parent_id) == 0)
            return zlistx_detach (self->deferred, zlistx_cursor (self->deferred));
    return NULL;
}

//  The held reply goes out, then what waited behind it, in order.
static void
s_collected (void *arg)
{
    s_collect_job_t *job = arg;
    gw_session_t *self = job->session;
    gw_req_t *req = gw_reqs_find_any (self->reqs, job->msg_id);
    if (req && req->held) {
        req->held = false;
        if (req->ids)
            gw_out_relay (self->out, job->reply, req->ids, req->header);
    }
    ch_msg_t *msg;
    while ((msg = s_take_deferred (self, job->msg_id))) {
        if (s_on_iopub (self, &msg) && self->state == GW_SESSION_READY)
            gw_session__violation (self, self->why);
        ch_msg_destroy (&msg);
    }
    ch_msg_destroy (&job->reply);
    free (job->msg_id);
    free (job);
}

//  Copy the reply's output_files before it goes out: hold it meanwhile.
//  True when it is held (and *msg_p taken).
static bool
s_hold_for_artifacts (gw_session_t *self, gw_req_t *req, ch_msg_t **msg_p)
{
    json_t *files = json_object_get (ch_msg_content (*msg_p), "output_files");
    if (!req->execute || !self->outdir [0] || !json_array_size (files))
        return false;
    s_collect_job_t *job = calloc (1, sizeof *job);
    if (!job || !(job->msg_id = strdup (req->msg_id)))
        abort ();
    job->session = self;
    job->reply = *msg_p;
    req->held = true;
    if (!gw_files_collect (self->files, self->outdir, files, s_collected, job)) {
        req->held = false;
        free (job->msg_id);
        free (job);
        return false;
    }
    *msg_p = NULL;
    return true;
}

static int
s_on_reply (gw_session_t *self, ch_msg_t **msg_p)
{
    ch_msg_t *msg = *msg_p;
    const char *type = ch_msg_type (msg);
    gw_req_t *req = gw_reqs_find (self->reqs, ch_msg_parent_id (msg));
    if (!req || !req->sent || req->channel != ch_msg_channel (msg))
        return s_bad (self, "%.64s for a request it was not sent", type);
    if (req->replied || strcmp (type, req->reply_type) != 0)
        return s_bad (self, "unexpected %.64s", type);
    req->replied = true;
    json_t *count = json_object_get (ch_msg_content (msg), "execution_count");
    if (req->execute && json_is_integer (count))
        self->exec_count = (int) json_integer_value (count);
    if (!s_hold_for_artifacts (self, req, msg_p) && req->ids)
        gw_out_relay (self->out, msg, req->ids, req->header);
    return 0;
}

static int
s_on_input_request (gw_session_t *self, ch_msg_t *msg)
{
    gw_req_t *req = gw_reqs_find (self->reqs, ch_msg_parent_id (msg));
    if (!req || !req->execute || !req->sent || req->replied)
        return s_bad (self, "%s without a running execute_request", ch_msg_type (msg));
    if (!req->ids || !req->allow_stdin) {
        gw_log (GW_LOG_WARN, "kernel.drop", "msg_type=input_request reason=\"stdin not allowed\"");
        return 0;
    }
    gw_out_relay (self->out, msg, req->ids, req->header);
    return 0;
}

//  status: track busy/idle; idle retires the request.
static int
s_on_status (gw_session_t *self, ch_msg_t *msg)
{
    gw_req_t *req = gw_reqs_find (self->reqs, ch_msg_parent_id (msg));
    const char *state = json_string_value (json_object_get (ch_msg_content (msg),
                                                            "execution_state"));
    if (!req || !req->sent || strcmp (state, "starting") == 0) {
        gw_log (GW_LOG_DEBUG, "kernel.drop", "msg_type=status reason=\"no outstanding parent\"");
        return 0;                               //  we publish starting/restarting ourselves
    }
    bool busy = strcmp (state, "busy") == 0;
    if (busy && req->busy)
        return 0;
    if (!busy && req->reply_type [0] && !req->replied)
        return s_bad (self, "idle before the %s", req->reply_type);
    if (busy) {
        req->busy = true;
        req->busy_at = ch_clock_mono_ms ();
    }
    if (!req->own)
        gw_out_relay (self->out, msg, NULL, req->header);
    if (!busy)
        gw_reqs_retire (self->reqs, req);
    return 0;
}

static int
s_on_iopub (gw_session_t *self, ch_msg_t **msg_p)
{
    ch_msg_t *msg = *msg_p;
    gw_req_t *req = gw_reqs_find_any (self->reqs, ch_msg_parent_id (msg));   //  late output too
    if (req && req->held) {                     //  after its reply, which waits
        zlistx_add_end (self->deferred, *msg_p);
        *msg_p = NULL;
        return 0;
    }
    if (strcmp (ch_msg_type (msg), "status") == 0)
        return s_on_status (self, msg);
    json_t *count = json_object_get (ch_msg_content (msg), "execution_count");
    if (req && req->execute && json_is_integer (count))
        self->exec_count = (int) json_integer_value (count);
    if (req && req->own)
        return 0;                               //  output of our own request: nobody's
    gw_out_relay (self->out, msg, NULL, req ? req->header : NULL);
    return 0;
}

//  Every complete message from the kernel lands here first.
int
gw_session__on_kernel_msg (void *arg, ch_msg_t **msg_p)
{
    gw_session_t *self = (gw_session_t *) arg;
    ch_msg_t *msg = *msg_p;
    if (gw_check_kernel_msg (msg, self->why, sizeof self->why) < 0)
        return 1;
    if (gw_log_enabled (GW_LOG_DEBUG))
        gw_log (GW_LOG_DEBUG, "kernel.msg", "channel=%s msg_type=%s parent=%s",
                ch_channel_name (ch_msg_channel (msg)), ch_msg_type (msg), ch_msg_parent_id (msg));
    if (ch_msg_channel (msg) != CH_CELLVM && self->state != GW_SESSION_READY)
        return s_bad (self, "%.64s before hello", ch_msg_type (msg));
    switch (ch_msg_channel (msg)) {
        case CH_CELLVM: return s_on_cellvm (self, msg);
        case CH_IOPUB: return s_on_iopub (self, msg_p);
        case CH_STDIN: return s_on_input_request (self, msg);
        default: return s_on_reply (self, msg_p);
    }
}


//  ---------------------------------------------------------------------------
//  cellvm-notebook: the launch folder, copied in before any request (gw_share)

static void
s_shared (void *arg, const gw_share_stats_t *stats)
{
    gw_session_t *self = arg;
    self->sharing = false;
    //  Something the notebook may miss: a stream at start has no cell to show in.
    gw_share_summary (stats, self->share_notice, sizeof self->share_notice);
    gw_session__flush_held (self);
}

void
gw_session__share_notice (gw_session_t *self, const ch_msg_t *msg)
{
    if (!self->share_notice [0] || strcmp (ch_msg_type (msg), "execute_request") != 0)
        return;
    json_t *stream = json_pack ("{s:s, s:s}", "name", "stderr", "text", self->share_notice);
    gw_out_new_msg (self->out, CH_IOPUB, NULL, "stream", ch_msg_header (msg), &stream);
    self->share_notice [0] = 0;
}

//  The notebook folder's copy, after each hello: requests wait for it.
static void
s_share_start (gw_session_t *self)
{
    if (!self->share)
        return;
    self->sharing = true;
    gw_share_start (self->share, s_shared, self);
}

void
gw_session__share_stop (gw_session_t *self)
{
    if (self->share)
        gw_share_stop (self->share);
    self->sharing = false;
}
