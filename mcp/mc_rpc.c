/*  mc_rpc - JSON-RPC 2.0 messages, as MCP's stdio transport carries them. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_rpc.h"

struct _mc_rpc_t {
    mc_rpc_kind_t kind;
    json_t *root;       //  the whole message
    json_t *id;         //  borrowed from root, or NULL
    const char *method; //  borrowed from root, or NULL
    json_t *params;     //  borrowed from root, or NULL
};

static int
s_fail (int code, int *code_p, char *why, size_t cap, const char *fmt, ...)
    __attribute__ ((format (printf, 5, 6)));

static int
s_fail (int code, int *code_p, char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    if (cap)
        vsnprintf (why, cap, fmt, ap);
    va_end (ap);
    *code_p = code;
    return -EBADMSG;
}

//  A JSON-RPC id is a string or an integer (null is allowed by 2.0 but
//  MCP forbids it; fractional numbers are discouraged: refused here).
static bool
s_id_ok (const json_t *id)
{
    return json_is_string (id) || json_is_integer (id);
}

//  Fill the decoded message's fields from an object already checked to be
//  JSON-RPC 2.0. Returns 0 or -EBADMSG with the reason.
static int
s_classify (mc_rpc_t *self, int *code_p, char *why, size_t cap)
{
    json_t *root = self->root;
    json_t *id = json_object_get (root, "id");
    json_t *method = json_object_get (root, "method");
    if (id && !s_id_ok (id))
        return s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap,
                       "\"id\" must be a string or an integer");
    self->id = id;
    if (!method) {
        bool has_result = json_object_get (root, "result") != NULL;
        bool has_error = json_object_get (root, "error") != NULL;
        if (!id || has_result == has_error)
            return s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap,
                           "a message needs \"method\" (a request or notification), or "
                           "\"id\" with exactly one of \"result\" and \"error\" (a response)");
        self->kind = MC_RPC_RESPONSE;
        return 0;
    }
    if (!json_is_string (method) || json_string_length (method) == 0)
        return s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap,
                       "\"method\" must be a non-empty string");
    json_t *params = json_object_get (root, "params");
    if (params && !json_is_object (params) && !json_is_array (params))
        return s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap,
                       "\"params\" must be an object or an array");
    self->method = json_string_value (method);
    self->params = params;
    self->kind = id ? MC_RPC_REQUEST : MC_RPC_NOTIFICATION;
    return 0;
}

//  Parse the line into a JSON object, with the parse error in words.
static json_t *
s_parse (const char *line, size_t len, int *code_p, char *why, size_t cap)
{
    json_error_t jerr;
    json_t *root = json_loadb (line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        s_fail (MC_RPC_PARSE_ERROR, code_p, why, cap,
                "not valid JSON (UTF-8, one message per line): %s at line %d column %d",
                jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (json_is_object (root))
        return root;
    s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap, json_is_array (root)
            ? "batches (JSON arrays) are not supported: send one message per line"
            : "a JSON-RPC message must be a JSON object");
    json_decref (root);
    return NULL;
}

int
mc_rpc_decode (const char *line, size_t len, mc_rpc_t **msg_p, int *code_p,
               json_t **id_p, char *why, size_t cap)
{
    assert (msg_p && code_p && id_p && (line || len == 0));
    *msg_p = NULL;
    *id_p = NULL;
    if (cap)
        why [0] = 0;
    mc_rpc_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->root = s_parse (line ? line : "", len, code_p, why, cap);
    if (!self->root)
        goto fail;
    json_t *ver = json_object_get (self->root, "jsonrpc");
    json_t *id = json_object_get (self->root, "id");
    if (s_id_ok (id))
        *id_p = json_incref (id);
    if (!json_is_string (ver) || strcmp (json_string_value (ver), "2.0") != 0) {
        s_fail (MC_RPC_INVALID_REQUEST, code_p, why, cap, "\"jsonrpc\" must be \"2.0\"");
        goto fail;
    }
    if (s_classify (self, code_p, why, cap) != 0)
        goto fail;
    json_decref (*id_p);        //  the message holds its id
    *id_p = NULL;
    *msg_p = self;
    return 0;
fail:
    mc_rpc_destroy (&self);
    return -EBADMSG;
}

void
mc_rpc_destroy (mc_rpc_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    json_decref ((*self_p)->root);
    free (*self_p);
    *self_p = NULL;
}

mc_rpc_kind_t
mc_rpc_kind (const mc_rpc_t *self)
{
    assert (self);
    return self->kind;
}

const char *
mc_rpc_method (const mc_rpc_t *self)
{
    assert (self);
    return self->method;
}

json_t *
mc_rpc_id (const mc_rpc_t *self)
{
    assert (self);
    return self->id;
}

json_t *
mc_rpc_params (const mc_rpc_t *self)
{
    assert (self);
    return self->params;
}

json_t *
mc_rpc_progress_token (const mc_rpc_t *self)
{
    assert (self);
    json_t *meta = json_object_get (self->params, "_meta");
    json_t *token = json_object_get (meta, "progressToken");
    return s_id_ok (token) ? token : NULL;
}

//  Skip spaces; return the position.
static size_t
s_ws (const char *s, size_t i, size_t len)
{
    while (i < len && (s [i] == ' ' || s [i] == '\t' || s [i] == '\r'))
        i++;
    return i;
}

//  The value after "id": at i, if it is a short integer or simple string.
static json_t *
s_id_value (const char *s, size_t i, size_t len)
{
    size_t j = i;
    if (i < len && s [i] == '"') {
        for (j = i + 1; j < len && j - i < 256 && s [j] != '"' && s [j] != '\\'; j++)
            ;
        return j < len && s [j] == '"' ? json_stringn (s + i + 1, j - i - 1) : NULL;
    }
    while (j < len && j - i < 18 && (s [j] == '-' || (s [j] >= '0' && s [j] <= '9')))
        j++;
    if (j == i || j >= len || (s [j] != ',' && s [j] != '}' && s [j] != ' '))
        return NULL;
    char num [24];
    memcpy (num, s + i, j - i);
    num [j - i] = 0;
    return json_integer (strtoll (num, NULL, 10));
}

json_t *
mc_rpc_sniff_id (const char *head, size_t len)
{
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = head [i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']')
            depth--;
        else if (c == '"' && depth == 1 && len - i > 5 && memcmp (head + i, "\"id\"", 4) == 0) {
            size_t k = s_ws (head, i + 4, len);
            if (k < len && head [k] == ':')
                return s_id_value (head, s_ws (head, k + 1, len), len);
            in_str = true;
        }
        else if (c == '"')
            in_str = true;
    }
    return NULL;
}

//  Dump root compactly with a newline; NULL if jansson cannot (bad UTF-8).
static char *
s_line (json_t *root, size_t *len_p)
{
    char *s = json_dumps (root, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!s)
        return NULL;
    size_t n = strlen (s);
    char *line = realloc (s, n + 2);
    if (!line)
        abort ();
    line [n] = '\n';
    line [n + 1] = 0;
    *len_p = n + 1;
    return line;
}

char *
mc_rpc_error (json_t *id, int code, const char *message, size_t *len_p)
{
    assert (message && len_p);
    json_t *root = json_pack ("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
                              "id", id ? id : json_null (), "error", "code", code,
                              "message", message);
    if (!root)  //  message is not UTF-8
        root = json_pack ("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                          id ? id : json_null (), "error", "code", code, "message",
                          "(the error message was not valid UTF-8)");
    char *line = root ? s_line (root, len_p) : NULL;
    json_decref (root);
    if (!line)
        abort ();
    return line;
}

char *
mc_rpc_result (json_t *id, json_t **result_p, size_t *len_p)
{
    assert (result_p && len_p);
    json_t *result = *result_p ? *result_p : json_object ();
    *result_p = NULL;
    json_t *root = json_pack ("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                              id ? id : json_null (), "result", result);
    char *line = root ? s_line (root, len_p) : NULL;
    json_decref (root);
    if (!line)
        line = mc_rpc_error (id, MC_RPC_INTERNAL_ERROR,
                             "the result could not be encoded as JSON", len_p);
    return line;
}

char *
mc_rpc_notification (const char *method, json_t **params_p, size_t *len_p)
{
    assert (method && params_p && len_p);
    json_t *params = *params_p ? *params_p : json_object ();
    *params_p = NULL;
    json_t *root = json_pack ("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                              "params", params);
    char *line = root ? s_line (root, len_p) : NULL;
    json_decref (root);
    if (!line)
        abort ();
    return line;
}
