/*  mc_op - one tool call on a session: what it sends, what it waits for,
    and the result it makes. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_clip.h"
#include "mc_fileres.h"
#include "mc_op.h"
#include "ch_clock.h"

//  One cellvm_put_request carries at most this much (the gateway's default
//  --max-msg is 64 MiB; docs/files.md).
#define PUT_PART (32u << 20)
//  A listing's stdout is read whole up to this.
#define LIST_OUT_MAX (4u << 20)

struct _mc_op_t {
    mc_call_t *call;
    json_t *rpc_id;
    json_t *token;
    bool as_resource;
    const mc_options_t *opts;
    mc_shape_opts_t shape_opts;
    char *session;
    char msg_id [37];           //  the request in flight
    mc_shape_t *shape;          //  run_python, list_files
    char *list_out;             //  list_files: stdout so far
    size_t list_len;
    bool got_reply, got_idle;
    json_t *reply;              //  the reply's content
    uint8_t *data;              //  download: the bytes
    size_t data_len;
    size_t sent;                //  upload: bytes sent so far
    int64_t start_ms, deadline_ms, grace_ms, next_progress_ms;
    double limit_s;
    bool interrupted, cancelled, done;
    json_t *result;             //  set when the op ended early (errors, lost)
};

mc_op_t *
mc_op_new (mc_call_t **call_p, json_t *rpc_id, json_t *token, bool as_resource,
           const mc_options_t *opts, const mc_shape_opts_t *shape, const char *session)
{
    assert (call_p && *call_p && opts && shape && session);
    mc_op_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->call = *call_p;
    *call_p = NULL;
    self->rpc_id = json_incref (rpc_id);
    self->token = json_incref (token);
    self->as_resource = as_resource;
    self->opts = opts;
    self->shape_opts = *shape;
    self->session = strdup (session);
    if (!self->session)
        abort ();
    return self;
}

void
mc_op_destroy (mc_op_t **self_p)
{
    assert (self_p);
    mc_op_t *self = *self_p;
    if (!self)
        return;
    mc_call_destroy (&self->call);
    json_decref (self->rpc_id);
    json_decref (self->token);
    json_decref (self->reply);
    json_decref (self->result);
    mc_shape_destroy (&self->shape);
    free (self->list_out);
    free (self->data);
    free (self->session);
    free (self);
    *self_p = NULL;
}

mc_tool_t
mc_op_tool (const mc_op_t *self)
{
    assert (self);
    return self->call->tool;
}

const char *
mc_op_msg_id (const mc_op_t *self)
{
    assert (self);
    return self->msg_id;
}

json_t *
mc_op_rpc_id (const mc_op_t *self)
{
    assert (self);
    return self->rpc_id;
}

json_t *
mc_op_token (const mc_op_t *self)
{
    assert (self);
    return self->token;
}

bool
mc_op_cancelled (const mc_op_t *self)
{
    assert (self);
    return self->cancelled;
}

json_t *
mc_op_text_result (const char *text, bool is_error)
{
    return json_pack ("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
                      "isError", is_error);
}

//  run_python and list_files: one execute_request.
static int
s_begin_execute (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms)
{
    bool run = self->call->tool == MC_TOOL_RUN_PYTHON;
    char *code = run ? strdup (self->call->code) : mc_fileres_list_code (self->call->path);
    json_t *content = json_pack ("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 0,
                                 "store_history", run, "user_expressions", "allow_stdin", 0,
                                 "stop_on_error", 1);
    free (code);
    if (!content)
        return -EINVAL;
    self->limit_s = self->call->timeout_s > 0 ? self->call->timeout_s : self->opts->cell_timeout_s;
    if (!run)
        self->limit_s = 60;
    self->deadline_ms = now_ms + (int64_t) (self->limit_s * 1000);
    self->next_progress_ms = now_ms + (int64_t) (self->opts->progress_s * 1000);
    self->shape = mc_shape_new (&self->shape_opts, self->session);
    return send (ctx, CH_SHELL, "execute_request", &content, NULL, 0, self->msg_id);
}

//  upload_file: the next part (append after the first).
static int
s_send_part (mc_op_t *self, mc_send_fn *send, void *ctx)
{
    size_t n = self->call->len - self->sent;
    if (n > PUT_PART)
        n = PUT_PART;
    json_t *content = json_pack ("{s:s, s:b}", "path", self->call->path, "append", self->sent > 0);
    int rc = send (ctx, CH_CONTROL, "cellvm_put_request", &content,
                   self->call->data ? self->call->data + self->sent : (const uint8_t *) "", n,
                   self->msg_id);
    self->sent += n;
    return rc;
}

int
mc_op_begin (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms)
{
    assert (self && send);
    self->start_ms = now_ms;
    json_t *content;
    int rc = -EINVAL;
    switch (self->call->tool) {
        case MC_TOOL_RUN_PYTHON:
        case MC_TOOL_LIST_FILES:
            rc = s_begin_execute (self, send, ctx, now_ms);
            break;
        case MC_TOOL_UPLOAD_FILE:
            rc = s_send_part (self, send, ctx);
            break;
        case MC_TOOL_DOWNLOAD_FILE:
            content = json_pack ("{s:s}", "path", self->call->path);
            rc = send (ctx, CH_CONTROL, "cellvm_get_request", &content, NULL, 0, self->msg_id);
            break;
        default:
            break;
    }
    if (rc != 0)
        mc_op_end (self, MC_END_LOST, "The request could not be sent to the session's gateway.",
                   now_ms);
    return rc;
}

//  list_files keeps its stdout whole (up to LIST_OUT_MAX) to parse it.
static void
s_list_stream (mc_op_t *self, const json_t *content)
{
    const char *name = json_string_value (json_object_get (content, "name"));
    json_t *text = json_object_get (content, "text");
    size_t n = json_string_length (text);
    if (!name || strcmp (name, "stdout") != 0 || !json_is_string (text)
        || self->list_len + n > LIST_OUT_MAX)
        return;
    self->list_out = realloc (self->list_out, self->list_len + n + 1);
    if (!self->list_out)
        abort ();
    memcpy (self->list_out + self->list_len, json_string_value (text), n);
    self->list_len += n;
    self->list_out [self->list_len] = 0;
}

static mc_op_step_t
s_execute_msg (mc_op_t *self, const ch_msg_t *msg)
{
    const char *type = ch_msg_type (msg);
    json_t *content = ch_msg_content (msg);
    if (ch_msg_channel (msg) == CH_SHELL && strcmp (type, "execute_reply") == 0) {
        self->got_reply = true;
        mc_shape_reply (self->shape, content);
        json_decref (self->reply);
        self->reply = json_incref (content);
    }
    else if (ch_msg_channel (msg) == CH_IOPUB && strcmp (type, "status") == 0) {
        const char *state = json_string_value (json_object_get (content, "execution_state"));
        self->got_idle = self->got_idle || (state && strcmp (state, "idle") == 0);
    }
    else if (ch_msg_channel (msg) == CH_IOPUB) {
        mc_shape_iopub (self->shape, type, content);
        if (self->call->tool == MC_TOOL_LIST_FILES && strcmp (type, "stream") == 0)
            s_list_stream (self, content);
    }
    return self->got_reply && self->got_idle ? MC_OP_DONE : MC_OP_WAIT;
}

static bool
s_ok (const json_t *content)
{
    const char *status = json_string_value (json_object_get (content, "status"));
    return status && strcmp (status, "ok") == 0;
}

//  upload and download: the control reply.
static mc_op_step_t
s_file_msg (mc_op_t *self, const ch_msg_t *msg, mc_send_fn *send, void *ctx)
{
    const char *type = ch_msg_type (msg);
    if (ch_msg_channel (msg) != CH_CONTROL || !strstr (type, "_reply"))
        return MC_OP_WAIT;
    json_t *content = ch_msg_content (msg);
    json_decref (self->reply);
    self->reply = json_incref (content);
    if (self->call->tool == MC_TOOL_UPLOAD_FILE) {
        if (s_ok (content) && self->sent < self->call->len && send
            && s_send_part (self, send, ctx) == 0)
            return MC_OP_WAIT;
        return MC_OP_DONE;
    }
    size_t len = 0;
    const uint8_t *buf = ch_msg_nbuffers (msg) ? ch_msg_buffer (msg, 0, &len) : NULL;
    free (self->data);
    self->data = malloc (len ? len : 1);
    if (!self->data)
        abort ();
    if (buf)
        memcpy (self->data, buf, len);
    self->data_len = buf ? len : 0;
    return MC_OP_DONE;
}

mc_op_step_t
mc_op_on_msg (mc_op_t *self, const ch_msg_t *msg, mc_send_fn *send, void *ctx, int64_t now_ms)
{
    assert (self && msg);
    (void) now_ms;
    if (self->done)
        return MC_OP_DONE;
    mc_op_step_t step = self->shape ? s_execute_msg (self, msg) : s_file_msg (self, msg, send, ctx);
    if (step == MC_OP_DONE)
        self->done = true;
    return step;
}

static void
s_interrupt (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms)
{
    char id [37];
    json_t *content = json_object ();
    send (ctx, CH_CONTROL, "interrupt_request", &content, NULL, 0, id);
    self->interrupted = true;
    self->grace_ms = now_ms + (int64_t) (self->opts->interrupt_grace_s * 1000);
}

mc_op_step_t
mc_op_tick (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms, char **progress_p,
            double *elapsed_p)
{
    assert (self && progress_p && elapsed_p);
    *progress_p = NULL;
    *elapsed_p = (double) (now_ms - self->start_ms) / 1000.0;
    if (self->done || !self->shape)
        return self->done ? MC_OP_DONE : MC_OP_WAIT;
    if (!self->interrupted && now_ms >= self->deadline_ms)
        s_interrupt (self, send, ctx, now_ms);
    else if (self->interrupted && now_ms >= self->grace_ms)
        return MC_OP_RESTART;
    if (self->token && now_ms >= self->next_progress_ms && !self->cancelled) {
        char num [32];
        if (asprintf (progress_p, "running for %.0f s; %s bytes of stdout so far", *elapsed_p,
                      mc_clip_fmt_bytes (mc_shape_stdout_bytes (self->shape), num)) < 0)
            *progress_p = NULL;
        self->next_progress_ms = now_ms + (int64_t) (self->opts->progress_s * 1000);
    }
    return MC_OP_WAIT;
}

void
mc_op_cancel (mc_op_t *self, mc_send_fn *send, void *ctx)
{
    assert (self);
    self->cancelled = true;
    if (self->shape && !self->done && !self->interrupted && send && self->msg_id [0])
        s_interrupt (self, send, ctx, self->start_ms);
}

void
mc_op_end (mc_op_t *self, mc_end_t end, const char *words, int64_t now_ms)
{
    assert (self);
    self->done = true;
    json_decref (self->result);
    if (self->call->tool == MC_TOOL_RUN_PYTHON) {
        if (!self->shape) {     //  never begun: the session ended first
            self->shape = mc_shape_new (&self->shape_opts, self->session);
            self->start_ms = now_ms;
        }
        mc_shape_elapsed (self->shape, (double) (now_ms - self->start_ms) / 1000.0);
        mc_shape_end (self->shape, end, self->limit_s, words);
        self->result = mc_shape_result (self->shape);
    }
    else
        self->result = mc_op_text_result (words ? words : "The operation did not finish.", true);
}

json_t *
mc_op_ended_result (mc_op_t *self, const char *words, int64_t now_ms)
{
    assert (self && words);
    if (self->call->tool == MC_TOOL_CLOSE) {
        self->done = true;
        return mc_op_text_result (words, false);
    }
    mc_op_end (self, MC_END_LOST, words, now_ms);
    return mc_op_result (self);
}

static json_t *
s_file_result (mc_op_t *self)
{
    const char *path = self->call->path;
    bool sc = self->shape_opts.structured;
    if (!s_ok (self->reply)) {
        char what [MC_PATH_MAX + 64];
        snprintf (what, sizeof what, "%s %s failed", mc_tools_name (self->call->tool), path);
        return mc_fileres_error (what, self->reply, sc);
    }
    if (self->call->tool == MC_TOOL_LIST_FILES)
        return mc_fileres_list_result (path, self->list_out, sc);
    if (self->call->tool == MC_TOOL_UPLOAD_FILE)
        return mc_fileres_upload (self->reply, self->call->len, sc);
    mc_download_opts_t d = { self->opts->image_cap, self->opts->max_download, sc,
                             self->as_resource };
    return mc_fileres_download (self->reply, self->data, self->data_len, self->session, path, &d);
}

json_t *
mc_op_result (mc_op_t *self)
{
    assert (self);
    if (self->result)
        return json_incref (self->result);
    if (self->call->tool != MC_TOOL_RUN_PYTHON)
        return s_file_result (self);
    mc_shape_elapsed (self->shape, (double) (ch_clock_mono_ms () - self->start_ms) / 1000.0);
    if (self->interrupted && !self->cancelled)
        mc_shape_end (self->shape, MC_END_TIMEOUT, self->limit_s, NULL);
    return mc_shape_result (self->shape);
}
