/*  mc_server - the MCP server: JSON-RPC lines in, replies and notifications
    out, sessions behind the tools. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_clock.h"
#include "mc_clip.h"
#include "mc_life.h"
#include "mc_log.h"
#include "mc_op.h"
#include "mc_rpc.h"
#include "mc_server.h"
#include "mc_session.h"
#include "mc_tools.h"

const char *const mc_server_versions [] = {
    "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07", NULL };

#define DEFAULT_SESSION "default"
//  Sessions that ended by themselves with no call to hear why, remembered
//  for the next call on their name (the oldest is forgotten first).
#define MAX_ENDED 64

typedef struct {
    char name [MC_SESSION_MAX + 1];
    char *why;                  //  mc_life_why's clause
    char *tail;                 //  the end of the gateway's log, or ""
} ended_t;

struct _mc_server_t {
    const mc_options_t *opts;
    const mc_spec_t *spec;
    char dir [PATH_MAX];
    mc_write_fn *write;
    void *ctx;
    bool initialized;
    char version [16];
    mc_shape_opts_t shape;
    mc_session_t **sessions;
    size_t nsessions;
    size_t polled;              //  sessions whose sockets the last poll covered
    bool shutting_down;
    ended_t ended [MAX_ENDED];
    size_t nended;
};

static void
s_write (mc_server_t *self, char *line, size_t len)
{
    self->write (self->ctx, line, len);
    free (line);
}

static void
s_error (mc_server_t *self, json_t *id, int code, const char *message)
{
    size_t len;
    char *line = mc_rpc_error (id, code, message, &len);
    s_write (self, line, len);
}

static void
s_reply (mc_server_t *self, json_t *id, json_t **result_p)
{
    size_t len;
    char *line = mc_rpc_result (id, result_p, &len);
    s_write (self, line, len);
}

static void
s_sink_result (void *ctx, json_t *rpc_id, json_t **result_p)
{
    mc_server_t *self = ctx;
    if (!self->shutting_down)
        s_reply (self, rpc_id, result_p);
    json_decref (*result_p);
    *result_p = NULL;
}

static void
s_sink_progress (void *ctx, json_t *token, double progress, const char *message)
{
    mc_server_t *self = ctx;
    json_t *params = json_pack ("{s:O, s:f, s:s}", "progressToken", token, "progress", progress,
                                "message", message);
    size_t len;
    if (params && !self->shutting_down) {
        char *line = mc_rpc_notification ("notifications/progress", &params, &len);
        s_write (self, line, len);
    }
    json_decref (params);
}

//  Shape options for a negotiated revision: resource links and
//  structuredContent came with 2025-06-18.
static void
s_set_version (mc_server_t *self, const char *version)
{
    snprintf (self->version, sizeof self->version, "%s", version);
    mc_shape_opts_default (&self->shape);
    self->shape.stream_cap = self->opts->stream_cap;
    self->shape.text_cap = self->opts->text_cap;
    self->shape.image_cap = self->opts->image_cap;
    self->shape.max_images = self->opts->max_images;
    self->shape.links = self->shape.structured = strcmp (version, "2025-06-18") >= 0;
}

mc_server_t *
mc_server_new (const mc_options_t *opts, const mc_spec_t *spec, const char *dir,
               mc_write_fn *write, void *ctx)
{
    assert (opts && spec && dir && write);
    mc_server_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->opts = opts;
    self->spec = spec;
    snprintf (self->dir, sizeof self->dir, "%s", dir);
    self->write = write;
    self->ctx = ctx;
    s_set_version (self, mc_server_versions [0]);
    return self;
}

void
mc_server_destroy (mc_server_t **self_p)
{
    assert (self_p);
    mc_server_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->nsessions; i++)
        mc_session_destroy (&self->sessions [i]);
    free (self->sessions);
    for (size_t i = 0; i < self->nended; i++) {
        free (self->ended [i].why);
        free (self->ended [i].tail);
    }
    free (self);
    *self_p = NULL;
}

size_t
mc_server_sessions (const mc_server_t *self)
{
    assert (self);
    return self->nsessions;
}

static const char s_instructions [] =
    "cellvm runs Python in isolated microVMs (no network). Each session keeps its variables and "
    "its files in /workspace between calls: run_python builds on earlier cells. Files a cell "
    "writes under /workspace/out come back as resource links; fetch them with download_file. "
    "Use upload_file to give a cell data, list_files to look around, restart for a fresh "
    "interpreter (files kept), and the session argument for separate, isolated sessions.";

static void
s_initialize (mc_server_t *self, json_t *id, json_t *params)
{
    const char *asked = json_string_value (json_object_get (params, "protocolVersion"));
    if (!asked) {
        s_error (self, id, MC_RPC_INVALID_PARAMS, "initialize needs \"protocolVersion\" (a string)");
        return;
    }
    const char *version = mc_server_versions [0];
    for (int i = 0; mc_server_versions [i]; i++)
        if (strcmp (asked, mc_server_versions [i]) == 0)
            version = mc_server_versions [i];
    s_set_version (self, version);
    self->initialized = true;
    json_t *result = json_pack ("{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}",
                                "protocolVersion", version, "capabilities", "tools",
                                "listChanged", 0, "resources", "serverInfo", "name",
                                "cellvm-mcp", "title", "cellvm", "version", MC_VERSION,
                                "instructions", s_instructions);
    mc_log (CH_LOG_INFO, "mcp.initialize", "asked=%.32s version=%s", asked, version);
    s_reply (self, id, &result);
}

static mc_session_t *
s_find (mc_server_t *self, const char *name)
{
    for (size_t i = 0; i < self->nsessions; i++)
        if (!mc_session_dead (self->sessions [i])
            && strcmp (mc_session_name (self->sessions [i]), name) == 0)
            return self->sessions [i];
    return NULL;
}

//  The session name, started when new. NULL with why (a tool error).
static mc_session_t *
s_session (mc_server_t *self, const char *name, char *why, size_t cap)
{
    mc_session_t *session = s_find (self, name);
    if (session)
        return session;
    size_t live = 0;
    for (size_t i = 0; i < self->nsessions; i++)
        live += !mc_session_dead (self->sessions [i]);
    if (live >= self->opts->max_sessions) {
        snprintf (why, cap, "This client already has %zu sessions open, the most it may "
                  "(--max-sessions). Close one you no longer need (the close tool) and try "
                  "again.", live);
        return NULL;
    }
    mc_sink_t sink = { s_sink_result, s_sink_progress, self };
    char err [512];
    session = mc_session_new (name, self->dir, self->spec, self->opts, &self->shape, &sink,
                              err, sizeof err);
    if (!session) {
        snprintf (why, cap, "The session \"%s\" could not be started: %s", name, err);
        mc_log (CH_LOG_ERROR, "session.start_failed", "session=%s why=\"%s\"", name, err);
        return NULL;
    }
    self->sessions = realloc (self->sessions, (self->nsessions + 1) * sizeof *self->sessions);
    if (!self->sessions)
        abort ();
    self->sessions [self->nsessions++] = session;
    return session;
}

//  Forget the end of session i of the remembered ones.
static void
s_forget (mc_server_t *self, size_t i)
{
    free (self->ended [i].why);
    free (self->ended [i].tail);
    memmove (self->ended + i, self->ended + i + 1, (self->nended - i - 1) * sizeof *self->ended);
    self->nended--;
}

static ssize_t
s_find_ended (mc_server_t *self, const char *name)
{
    for (size_t i = 0; i < self->nended; i++)
        if (strcmp (self->ended [i].name, name) == 0)
            return (ssize_t) i;
    return -1;
}

//  A session that is over: if it ended by itself and no call heard why,
//  remember why for the next call on its name.
static void
s_remember (mc_server_t *self, const mc_session_t *session)
{
    const char *why, *tail;
    if (!mc_session_unheard (session, &why, &tail))
        return;
    ssize_t old = s_find_ended (self, mc_session_name (session));
    if (old >= 0)
        s_forget (self, (size_t) old);
    if (self->nended == MAX_ENDED)
        s_forget (self, 0);
    ended_t *e = &self->ended [self->nended++];
    snprintf (e->name, sizeof e->name, "%s", mc_session_name (session));
    e->why = strdup (why);
    e->tail = strdup (tail);
    if (!e->why || !e->tail)
        abort ();
}

//  A call on a session that ended by itself since the last call: told why
//  (once), and not run. The next call on the name starts a new session.
static bool
s_tell_ended (mc_server_t *self, json_t *id, mc_call_t **call_p, const char *name)
{
    ssize_t i = s_find_ended (self, name);
    if (i < 0 || s_find (self, name))
        return false;
    mc_tool_t tool = (*call_p)->tool;
    char *words = mc_life_words (name, MC_LIFE_BEFORE, tool, self->ended [i].why,
                                 self->ended [i].tail);
    mc_op_t *op = mc_op_new (call_p, id, NULL, false, self->opts, &self->shape, name);
    json_t *result = mc_op_ended_result (op, words, ch_clock_mono_ms ());
    mc_log (CH_LOG_INFO, "session.told", "session=%s tool=%s", name, mc_tools_name (tool));
    s_reply (self, id, &result);
    mc_op_destroy (&op);
    free (words);
    s_forget (self, (size_t) i);
    return true;
}

static void
s_tool_error (mc_server_t *self, json_t *id, const char *text)
{
    json_t *result = mc_op_text_result (text, true);
    s_reply (self, id, &result);
}

//  restart and close of a session that is not open: nothing to do.
static bool
s_not_open (mc_server_t *self, json_t *id, const mc_call_t *call, const char *name)
{
    if ((call->tool != MC_TOOL_CLOSE && call->tool != MC_TOOL_RESTART) || s_find (self, name))
        return false;
    char text [200];
    snprintf (text, sizeof text, "Session \"%s\" is not open; %s", name,
              call->tool == MC_TOOL_CLOSE ? "there is nothing to close."
              : "the next call on it starts a fresh one.");
    json_t *result = mc_op_text_result (text, false);
    s_reply (self, id, &result);
    return true;
}

static void
s_tools_call (mc_server_t *self, mc_rpc_t *msg)
{
    json_t *id = mc_rpc_id (msg);
    mc_call_t *call = NULL;
    char why [1024];
    int rc = mc_tools_parse (mc_rpc_params (msg), &call, why, sizeof why);
    if (rc == -EACCES)
        s_tool_error (self, id, why);
    if (rc != 0) {
        if (rc != -EACCES)
            s_error (self, id, MC_RPC_INVALID_PARAMS, why);
        return;
    }
    if (call->tool == MC_TOOL_RUN_PYTHON && call->timeout_s > self->opts->max_timeout_s) {
        snprintf (why, sizeof why, "run_python: \"timeout_s\" may be at most %g s here "
                  "(--max-timeout)", self->opts->max_timeout_s);
        s_error (self, id, MC_RPC_INVALID_PARAMS, why);
        mc_call_destroy (&call);
        return;
    }
    char name [MC_SESSION_MAX + 1];
    snprintf (name, sizeof name, "%s", call->session [0] ? call->session : DEFAULT_SESSION);
    mc_session_t *session = NULL;
    if (s_tell_ended (self, id, &call, name))
        return;
    if (!s_not_open (self, id, call, name) && !(session = s_session (self, name, why, sizeof why)))
        s_tool_error (self, id, why);
    if (session) {
        mc_op_t *op = mc_op_new (&call, id, mc_rpc_progress_token (msg), false, self->opts,
                                 &self->shape, name);
        mc_session_submit (session, &op);
    }
    mc_call_destroy (&call);
}

//  "%41%42" -> "AB" in place; false on a bad escape or a NUL.
static bool
s_unescape (char *s)
{
    char *o = s;
    for (; *s; s++) {
        unsigned v;
        if (*s == '%') {
            if (sscanf (s + 1, "%2x", &v) != 1 || !v || !s [1] || !s [2])
                return false;
            *o++ = (char) v;
            s += 2;
        }
        else
            *o++ = *s;
    }
    *o = 0;
    return true;
}

static void
s_resources_read (mc_server_t *self, mc_rpc_t *msg)
{
    json_t *id = mc_rpc_id (msg);
    const char *uri = json_string_value (json_object_get (mc_rpc_params (msg), "uri"));
    char name [MC_SESSION_MAX + 1], path [MC_PATH_MAX + 1], norm [MC_PATH_MAX + 16], why [512];
    mc_session_t *session = NULL;
    if (!uri || sscanf (uri, "cellvm://%64[A-Za-z0-9_-]%4096s", name, path) != 2
        || !s_unescape (path) || mc_tools_path (path, norm, sizeof norm, why, sizeof why) != 0
        || !(session = s_find (self, name))) {
        snprintf (why, sizeof why, "Resource not found: %.200s (cellvm-mcp serves "
                  "cellvm://SESSION/workspace/... for files of sessions that are open)",
                  uri ? uri : "(no \"uri\" given)");
        s_error (self, id, MC_RPC_RESOURCE_NOT_FOUND, why);
        return;
    }
    mc_call_t *call = calloc (1, sizeof *call);
    if (!call || !(call->path = strdup (norm)))
        abort ();
    call->tool = MC_TOOL_DOWNLOAD_FILE;
    snprintf (call->session, sizeof call->session, "%s", name);
    mc_op_t *op = mc_op_new (&call, id, NULL, true, self->opts, &self->shape, name);
    mc_session_submit (session, &op);
}

static void
s_cancelled (mc_server_t *self, mc_rpc_t *msg)
{
    json_t *rid = json_object_get (mc_rpc_params (msg), "requestId");
    for (size_t i = 0; rid && i < self->nsessions; i++)
        if (mc_session_cancel (self->sessions [i], rid))
            mc_log (CH_LOG_INFO, "mcp.cancelled", "session=%s",
                    mc_session_name (self->sessions [i]));
}

//  Requests that need initialize first; the rest of the methods.
static void
s_request (mc_server_t *self, mc_rpc_t *msg)
{
    const char *method = mc_rpc_method (msg);
    json_t *id = mc_rpc_id (msg), *result = NULL;
    char why [300];
    if (strcmp (method, "initialize") == 0)
        s_initialize (self, id, mc_rpc_params (msg));
    else if (strcmp (method, "ping") == 0)
        s_reply (self, id, &result);
    else if (!self->initialized && (!strncmp (method, "tools/", 6) || !strncmp (method, "resources/", 10)))
        s_error (self, id, MC_RPC_NOT_INITIALIZED, "the server is not initialized: send "
                 "\"initialize\" first");
    else if (strcmp (method, "tools/list") == 0) {
        result = json_pack ("{s:o}", "tools", mc_tools_list (strcmp (self->version, "2025-03-26") >= 0));
        s_reply (self, id, &result);
    }
    else if (strcmp (method, "tools/call") == 0)
        s_tools_call (self, msg);
    else if (strcmp (method, "resources/read") == 0)
        s_resources_read (self, msg);
    else if (strcmp (method, "resources/list") == 0 || strcmp (method, "resources/templates/list") == 0) {
        result = json_pack ("{s:[]}", strcmp (method, "resources/list") == 0 ? "resources"
                            : "resourceTemplates");
        s_reply (self, id, &result);
    }
    else {
        snprintf (why, sizeof why, "Method not found: \"%.100s\"", method);
        s_error (self, id, MC_RPC_METHOD_NOT_FOUND, why);
    }
}

void
mc_server_line (mc_server_t *self, const char *line, size_t len)
{
    assert (self);
    mc_rpc_t *msg = NULL;
    json_t *id = NULL;
    int code;
    char why [512];
    if (len == 0 || self->shutting_down)
        return;                 //  blank lines between messages are harmless
    if (mc_rpc_decode (line, len, &msg, &code, &id, why, sizeof why) != 0) {
        mc_log (CH_LOG_WARN, "mcp.bad_message", "code=%d why=\"%.200s\"", code, why);
        s_error (self, id, code, why);
        json_decref (id);
        return;
    }
    if (mc_rpc_kind (msg) == MC_RPC_REQUEST)
        s_request (self, msg);
    else if (mc_rpc_kind (msg) == MC_RPC_NOTIFICATION
             && strcmp (mc_rpc_method (msg), "notifications/cancelled") == 0)
        s_cancelled (self, msg);
    mc_rpc_destroy (&msg);
}

void
mc_server_oversize (mc_server_t *self, const char *head, size_t len, size_t total)
{
    assert (self);
    json_t *id = mc_rpc_sniff_id (head, len);
    char why [256], n1 [32], n2 [32];
    snprintf (why, sizeof why, "The message is %s bytes, over this server's limit of %s bytes "
              "(--max-request). Send large files in parts, or write them from a cell.",
              mc_clip_fmt_bytes (total, n1), mc_clip_fmt_bytes (self->opts->max_request, n2));
    mc_log (CH_LOG_WARN, "mcp.too_large", "bytes=%zu", total);
    s_error (self, id, MC_RPC_REQUEST_TOO_LARGE, why);
    json_decref (id);
}

size_t
mc_server_pollitems (mc_server_t *self, zmq_pollitem_t *items, size_t cap)
{
    assert (self && items);
    size_t n = 0;
    self->polled = 0;
    for (size_t i = 0; i < self->nsessions && n + MC_SESSION_POLLITEMS <= cap; i++) {
        zmq_pollitem_t mine [MC_SESSION_POLLITEMS] = { { 0 } };
        size_t k = mc_session_pollitems (self->sessions [i], mine);
        for (size_t j = 0; j < MC_SESSION_POLLITEMS; j++)
            items [n + j] = k ? mine [j] : (zmq_pollitem_t) { NULL, -1, 0, 0 };
        n += MC_SESSION_POLLITEMS;
        self->polled++;
    }
    return n;
}

void
mc_server_on_poll (mc_server_t *self, zmq_pollitem_t *items, size_t n, int64_t now_ms)
{
    assert (self && (items || n == 0));
    for (size_t i = 0; i < self->polled && (i + 1) * MC_SESSION_POLLITEMS <= n; i++)
        if (items [i * MC_SESSION_POLLITEMS].socket)
            mc_session_on_poll (self->sessions [i], items + i * MC_SESSION_POLLITEMS, now_ms);
    for (size_t i = 0; i < self->nsessions; i++)
        mc_session_tick (self->sessions [i], now_ms);
    size_t k = 0;
    for (size_t i = 0; i < self->nsessions; i++) {
        if (mc_session_dead (self->sessions [i])) {
            s_remember (self, self->sessions [i]);
            mc_session_destroy (&self->sessions [i]);
        }
        else
            self->sessions [k++] = self->sessions [i];
    }
    self->nsessions = k;
    self->polled = 0;
}

void
mc_server_shutdown (mc_server_t *self, int64_t now_ms)
{
    assert (self);
    self->shutting_down = true;
    for (size_t i = 0; i < self->nsessions; i++)
        mc_session_shutdown (self->sessions [i], now_ms);
}
