/*  mc_tools - the tools cellvm-mcp offers, and their arguments decoded. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_b64.h"
#include "mc_tools.h"

#define SESSION_PROP "\"session\": {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9_-]{1,64}$\", " \
    "\"description\": \"Named session to use; each has its own Python interpreter and " \
    "/workspace. Omit it for this connection's default session (started on first use).\"}"

static const struct {
    const char *name, *title, *schema, *description;
    bool read_only, destructive, idempotent;
} s_tools [MC_TOOL_COUNT] = {
    { "run_python", "Run Python",
      "{\"code\": {\"type\": \"string\", \"description\": \"Python source of one cell.\"}, "
      "\"timeout_s\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 86400, "
      "\"description\": \"Seconds the cell may run before it is interrupted.\"}, " SESSION_PROP "}",
      "Run a cell of Python in a persistent interpreter inside an isolated microVM (no network). "
      "Variables, imports and files persist between calls. Returns stdout and stderr (long output "
      "is cut in the middle), the value of the last expression, charts as images, errors with "
      "their traceback, and files written under /workspace/out as resource links. numpy, pandas "
      "and matplotlib are installed. Work in /workspace.", false, false, false },
    { "upload_file", "Upload a file",
      "{\"path\": {\"type\": \"string\", \"description\": \"Where to write it: relative to "
      "/workspace, or absolute under /workspace. Missing directories are created.\"}, "
      "\"content_base64\": {\"type\": \"string\", \"description\": \"The bytes, base64.\"}, "
      "\"text\": {\"type\": \"string\", \"description\": \"The content as UTF-8 text (instead "
      "of content_base64).\"}, " SESSION_PROP "}",
      "Write a file into the session's /workspace (replacing it), readable from the next cell. "
      "Give exactly one of content_base64 or text.", false, true, true },
    { "download_file", "Download a file",
      "{\"path\": {\"type\": \"string\", \"description\": \"The file: relative to /workspace, or "
      "absolute under it.\"}, " SESSION_PROP "}",
      "Read a file from the session's /workspace: text comes back as text, images as images, "
      "other bytes as a base64 blob.", true, false, true },
    { "list_files", "List files",
      "{\"path\": {\"type\": \"string\", \"description\": \"Directory to list, relative to "
      "/workspace or absolute under it (default /workspace).\"}, " SESSION_PROP "}",
      "List the files under a directory of the session's /workspace (recursively, with sizes).",
      true, false, true },
    { "restart", "Restart Python",
      "{" SESSION_PROP "}",
      "Restart the session's Python interpreter: every variable is lost, the files in /workspace "
      "are kept.", false, true, false },
    { "close", "Close the session",
      "{" SESSION_PROP "}",
      "End the session: its VM, its variables and its /workspace are gone. A later call with the "
      "same session name starts a new, empty one.", false, true, true },
};

static const char *const s_required [MC_TOOL_COUNT] = {
    "[\"code\"]", "[\"path\"]", "[\"path\"]", "[]", "[]", "[]" };

const char *
mc_tools_name (mc_tool_t tool)
{
    assert (tool < MC_TOOL_COUNT);
    return s_tools [tool].name;
}

static json_t *
s_tool (mc_tool_t t, bool annotations)
{
    json_t *props = json_loads (s_tools [t].schema, 0, NULL);
    json_t *req = json_loads (s_required [t], 0, NULL);
    assert (props && req);
    json_t *tool = json_pack ("{s:s, s:s, s:{s:s, s:o, s:o, s:b}}", "name", s_tools [t].name,
                              "description", s_tools [t].description, "inputSchema", "type",
                              "object", "properties", props, "required", req,
                              "additionalProperties", 0);
    if (annotations)
        json_object_set_new (tool, "annotations", json_pack (
            "{s:s, s:b, s:b, s:b, s:b}", "title", s_tools [t].title, "readOnlyHint",
            s_tools [t].read_only, "destructiveHint", s_tools [t].destructive,
            "idempotentHint", s_tools [t].idempotent, "openWorldHint", 0));
    return tool;
}

json_t *
mc_tools_list (bool annotations)
{
    json_t *list = json_array ();
    for (int t = 0; t < MC_TOOL_COUNT; t++)
        json_array_append_new (list, s_tool ((mc_tool_t) t, annotations));
    return list;
}

void
mc_call_destroy (mc_call_t **self_p)
{
    assert (self_p);
    mc_call_t *self = *self_p;
    if (!self)
        return;
    free (self->code);
    free (self->path);
    free (self->data);
    free (self);
    *self_p = NULL;
}

//  True when name is a session name: [A-Za-z0-9_-]{1,64}.
static bool
s_session_ok (const char *name)
{
    size_t n = name ? strlen (name) : 0;
    if (n == 0 || n > MC_SESSION_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", name [i]))
            return false;
    return true;
}

static int
s_why (int rc, char *why, size_t cap, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static int
s_why (int rc, char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    if (cap)
        vsnprintf (why, cap, fmt, ap);
    va_end (ap);
    return rc;
}

//  Append one part of a path, refusing "..".
static int
s_path_part (const char *part, size_t n, char *out, size_t *len, size_t cap)
{
    if (n == 0 || (n == 1 && part [0] == '.'))
        return 0;
    if (n == 2 && part [0] == '.' && part [1] == '.')
        return -EACCES;
    if (*len + 1 + n + 1 > cap)
        return -ENAMETOOLONG;
    out [(*len)++] = '/';
    memcpy (out + *len, part, n);
    *len += n;
    out [*len] = 0;
    return 0;
}

int
mc_tools_path (const char *path, char *out, size_t cap, char *why, size_t why_cap)
{
    assert (path && out && cap > 16);
    size_t n = strlen (path);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char) path [i] < 0x20 || path [i] == 0x7f)
            return s_why (-EACCES, why, why_cap, "the path holds a control character");
    const char *rest = path;
    if (path [0] == '/') {
        if (strncmp (path, "/workspace", 10) != 0 || (path [10] != 0 && path [10] != '/'))
            return s_why (-EACCES, why, why_cap, "PathOutsideWorkspace: \"%.200s\" is outside "
                          "/workspace. Files can only be read and written under /workspace: give "
                          "a path relative to it (\"data/x.csv\") or absolute under it "
                          "(\"/workspace/data/x.csv\").", path);
        rest = path + 10;
    }
    size_t len = (size_t) snprintf (out, cap, "/workspace");
    while (*rest) {
        const char *slash = strchr (rest, '/');
        size_t part = slash ? (size_t) (slash - rest) : strlen (rest);
        int rc = s_path_part (rest, part, out, &len, cap);
        if (rc == -EACCES)
            return s_why (rc, why, why_cap, "PathOutsideWorkspace: \"%.200s\" uses \"..\": "
                          "paths may not climb out of /workspace, nor use \"..\" at all. Name the "
                          "file from /workspace down.", path);
        if (rc != 0 || len > MC_PATH_MAX)
            return s_why (-EACCES, why, why_cap, "the path is longer than %d bytes", MC_PATH_MAX);
        rest += part + (slash ? 1 : 0);
    }
    return 0;
}

static const char *
s_type_name (const json_t *v)
{
    switch (json_typeof (v)) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER: case JSON_REAL: return "a number";
        case JSON_TRUE: case JSON_FALSE: return "a boolean";
        default: return "null";
    }
}

//  Argument key of args as a string: 0 (absent: *out NULL), or -EINVAL.
static int
s_string_arg (mc_call_t *call, const json_t *args, const char *key, const char **out,
              char *why, size_t cap)
{
    json_t *v = json_object_get (args, key);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string (v))
        return s_why (-EINVAL, why, cap, "%s: \"%s\" must be a string, not %s",
                      mc_tools_name (call->tool), key, s_type_name (v));
    *out = json_string_value (v);
    return 0;
}

//  Every argument must be one the tool's schema names.
static int
s_known_keys (mc_call_t *call, const json_t *args, char *why, size_t cap)
{
    json_t *props = json_loads (s_tools [call->tool].schema, 0, NULL);
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach ((json_t *) args, key, v)
        if (!json_object_get (props, key)) {
            char names [160] = "";
            const char *k;
            json_t *p;
            json_object_foreach (props, k, p)
                snprintf (names + strlen (names), sizeof names - strlen (names), "%s\"%s\"",
                          *names ? ", " : "", k);
            rc = s_why (-EINVAL, why, cap, "%s has no argument \"%.64s\"; it takes %s",
                        mc_tools_name (call->tool), key, names);
            break;
        }
    json_decref (props);
    return rc;
}

static int
s_path_arg (mc_call_t *call, const json_t *args, bool required, char *why, size_t cap)
{
    const char *path;
    int rc = s_string_arg (call, args, "path", &path, why, cap);
    if (rc != 0)
        return rc;
    if (!path && required)
        return s_why (-EINVAL, why, cap, "%s needs \"path\" (a string)", mc_tools_name (call->tool));
    char norm [MC_PATH_MAX + 16];
    rc = mc_tools_path (path ? path : "", norm, sizeof norm, why, cap);
    if (rc == 0 && (call->path = strdup (norm)) == NULL)
        abort ();
    return rc;
}

static int
s_run_args (mc_call_t *call, const json_t *args, char *why, size_t cap)
{
    const char *code;
    int rc = s_string_arg (call, args, "code", &code, why, cap);
    if (rc != 0)
        return rc;
    if (!code)
        return s_why (-EINVAL, why, cap, "run_python needs \"code\" (a string of Python)");
    if (!(call->code = strdup (code)))
        abort ();
    json_t *t = json_object_get (args, "timeout_s");
    if (t && (!json_is_number (t) || !(json_number_value (t) > 0)
              || json_number_value (t) > MC_TIMEOUT_MAX))
        return s_why (-EINVAL, why, cap, "run_python: \"timeout_s\" must be a number of seconds "
                      "above 0 and at most %g", MC_TIMEOUT_MAX);
    call->timeout_s = t ? json_number_value (t) : 0;
    return 0;
}

static int
s_upload_args (mc_call_t *call, const json_t *args, char *why, size_t cap)
{
    const char *b64, *text;
    int rc = s_string_arg (call, args, "content_base64", &b64, why, cap);
    if (rc == 0)
        rc = s_string_arg (call, args, "text", &text, why, cap);
    if (rc != 0)
        return rc;
    if (!b64 == !text)
        return s_why (-EINVAL, why, cap, "upload_file needs exactly one of \"content_base64\" "
                      "(the bytes in base64) or \"text\" (UTF-8 text)");
    if (text) {
        call->len = json_string_length (json_object_get (args, "text"));
        if (!(call->data = malloc (call->len + 1)))
            abort ();
        memcpy (call->data, text, call->len);
        return 0;
    }
    size_t bad;
    if (mc_b64_decode (b64, json_string_length (json_object_get (args, "content_base64")),
                       &call->data, &call->len, &bad) != 0)
        return s_why (-EINVAL, why, cap, "upload_file: \"content_base64\" is not valid base64 "
                      "(at character %zu)", bad);
    return 0;
}

static int
s_tool_args (mc_call_t *call, const json_t *args, char *why, size_t cap)
{
    const char *session;
    int rc = s_known_keys (call, args, why, cap);
    if (rc == 0)
        rc = s_string_arg (call, args, "session", &session, why, cap);
    if (rc != 0)
        return rc;
    if (session && !s_session_ok (session))
        return s_why (-EINVAL, why, cap, "%s: \"session\" must be 1 to 64 letters, digits, "
                      "\"_\" or \"-\"", mc_tools_name (call->tool));
    snprintf (call->session, sizeof call->session, "%s", session ? session : "");
    switch (call->tool) {
        case MC_TOOL_RUN_PYTHON: return s_run_args (call, args, why, cap);
        case MC_TOOL_UPLOAD_FILE:
            rc = s_upload_args (call, args, why, cap);
            return rc ? rc : s_path_arg (call, args, true, why, cap);
        case MC_TOOL_DOWNLOAD_FILE: return s_path_arg (call, args, true, why, cap);
        case MC_TOOL_LIST_FILES: return s_path_arg (call, args, false, why, cap);
        default: return 0;
    }
}

int
mc_tools_parse (const json_t *params, mc_call_t **call_p, char *why, size_t cap)
{
    assert (call_p);
    *call_p = NULL;
    const char *name = json_string_value (json_object_get (params, "name"));
    json_t *args = json_object_get (params, "arguments");
    if (!name)
        return s_why (-EINVAL, why, cap, "tools/call needs \"name\" (a string)");
    int t = 0;
    while (t < MC_TOOL_COUNT && strcmp (s_tools [t].name, name) != 0)
        t++;
    if (t == MC_TOOL_COUNT)
        return s_why (-ENOENT, why, cap, "Unknown tool: \"%.64s\". The tools are run_python, "
                      "upload_file, download_file, list_files, restart and close.", name);
    if (args && !json_is_object (args))
        return s_why (-EINVAL, why, cap, "tools/call: \"arguments\" must be an object, not %s",
                      s_type_name (args));
    mc_call_t *call = calloc (1, sizeof *call);
    if (!call)
        abort ();
    call->tool = (mc_tool_t) t;
    json_t *empty = json_object ();
    int rc = s_tool_args (call, args ? args : empty, why, cap);
    json_decref (empty);
    if (rc != 0)
        goto fail;
    *call_p = call;
    return 0;
fail:
    mc_call_destroy (&call);
    return rc;
}
