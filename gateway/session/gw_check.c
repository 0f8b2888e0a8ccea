/*  gw_check - what each side may send, message by message.

    Schemas are strings of "field:type" pairs, types s (string), i (integer),
    b (boolean), o (object), a (array of strings), so a table row reads like
    the spec. Fields not listed are allowed and passed through.
*/
#include "session/gw_check.h"
#include "ch_hello.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *type;                           //  msg_type
    const char *fields;                         //  required "name:t" pairs
} s_schema_t;

//  Client -> kernel, by channel. Anything else is dropped at the door.
static const char *s_shell_requests [] = {
    "execute_request", "inspect_request", "complete_request", "history_request",
    "is_complete_request", "comm_info_request", "kernel_info_request",
    "shutdown_request", "comm_open", "comm_msg", "comm_close", NULL
};
static const char *s_control_requests [] = {
    "shutdown_request", "interrupt_request", "kernel_info_request", "debug_request",
    "cellvm_put_request", "cellvm_get_request", "cellvm_snapshot_request",
    "cellvm_replay_request", "cellvm_egress_request", NULL
};
static const char *s_stdin_replies [] = { "input_reply", NULL };

//  Kernel -> client on iopub.
static const s_schema_t s_iopub [] = {
    { "status", "execution_state:s" },
    { "stream", "name:s text:s" },
    { "display_data", "data:o metadata:o" },
    { "update_display_data", "data:o metadata:o transient:o" },
    { "execute_input", "code:s execution_count:i" },
    { "execute_result", "execution_count:i data:o metadata:o" },
    { "error", "ename:s evalue:s traceback:a" },
    { "clear_output", "wait:b" },
    { "comm_open", "comm_id:s target_name:s" },
    { "comm_msg", "comm_id:s" },
    { "comm_close", "comm_id:s" },
    { "debug_event", "type:s event:s" },        //  a DAP event
    { NULL, NULL }
};

//  Kernel -> client replies, on shell or control (the session checks which).
static const s_schema_t s_replies [] = {
    { "execute_reply", "status:s" },
    { "inspect_reply", "status:s" },
    { "complete_reply", "status:s" },
    { "history_reply", "status:s" },
    { "is_complete_reply", "status:s" },
    { "comm_info_reply", "status:s" },
    { "kernel_info_reply", "status:s" },
    { "shutdown_reply", "status:s" },
    { "interrupt_reply", "status:s" },
    { "debug_reply", "" },
    { "cellvm_put_reply", "status:s" },
    { "cellvm_get_reply", "status:s" },
    { NULL, NULL }
};

static const s_schema_t s_stdin [] = {
    { "input_request", "prompt:s password:b" },
    { NULL, NULL }
};

static const s_schema_t s_cellvm [] = {
    { "hello", "protocol:s version:i role:s" },
    { "protocol_error", "error:s" },
    { "exiting", "reason:s" },
    { NULL, NULL }
};

static bool
s_in_list (const char *const *list, const char *name)
{
    for (; *list; list++)
        if (strcmp (*list, name) == 0)
            return true;
    return false;
}

bool
gw_check_client_type (ch_channel_t channel, const char *msg_type)
{
    assert (msg_type);
    switch (channel) {
        case CH_SHELL: return s_in_list (s_shell_requests, msg_type);
        case CH_CONTROL: return s_in_list (s_control_requests, msg_type);
        case CH_STDIN: return s_in_list (s_stdin_replies, msg_type);
        default: return false;
    }
}


static bool
s_type_ok (const json_t *v, char t)
{
    switch (t) {
        case 's': return json_is_string (v);
        case 'i': return json_is_integer (v);
        case 'b': return json_is_boolean (v);
        case 'o': return json_is_object (v);
        case 'a': {
            if (!json_is_array (v))
                return false;
            for (size_t i = 0; i < json_array_size (v); i++)
                if (!json_is_string (json_array_get (v, i)))
                    return false;
            return true;
        }
        default: return false;
    }
}

static const char *
s_type_name (char t)
{
    switch (t) {
        case 's': return "a string";
        case 'i': return "an integer";
        case 'b': return "a boolean";
        case 'o': return "an object";
        default: return "an array of strings";
    }
}

//  Check the "name:t name:t" fields of content.
static int
s_check_fields (const json_t *content, const char *fields, char *why, size_t whylen)
{
    const char *p = fields;
    while (*p) {
        char name [64];
        char t = 0;
        int used = 0;
        if (sscanf (p, " %63[^:]:%c%n", name, &t, &used) != 2)
            break;
        p += used;
        if (!s_type_ok (json_object_get (content, name), t)) {
            snprintf (why, whylen, "content.%s must be %s", name, s_type_name (t));
            return -EBADMSG;
        }
    }
    return 0;
}

static const s_schema_t *
s_find (const s_schema_t *table, const char *type)
{
    for (; table->type; table++)
        if (strcmp (table->type, type) == 0)
            return table;
    return NULL;
}

//  True when v is one of the '|'-separated words of set.
static bool
s_one_of (const char *v, const char *set)
{
    size_t len = v ? strlen (v) : 0;
    for (const char *p = set; v && *p; ) {
        const char *end = strchr (p, '|');
        size_t n = end ? (size_t) (end - p) : strlen (p);
        if (n == len && strncmp (p, v, n) == 0)
            return true;
        p += end ? n + 1 : n;
    }
    return false;
}

//  Enumerated values the schema strings cannot express.
static int
s_check_values (const char *type, const json_t *content, char *why, size_t whylen)
{
    static const struct { const char *type, *field, *values; } enums [] = {
        { "status", "execution_state", "busy|idle|starting" },
        { "stream", "name", "stdout|stderr" },
        { "is_complete_reply", "status", "complete|incomplete|invalid|unknown|error" },
        { NULL, NULL, NULL }
    };
    for (size_t i = 0; enums [i].type; i++)
        if (strcmp (type, enums [i].type) == 0) {
            if (s_one_of (json_string_value (json_object_get (content, enums [i].field)),
                          enums [i].values))
                return 0;
            snprintf (why, whylen, "content.%s of %s must be one of %s", enums [i].field,
                      type, enums [i].values);
            return -EBADMSG;
        }
    const char *status = json_string_value (json_object_get (content, "status"));
    if (status && strstr (type, "_reply") && !s_one_of (status, "ok|error|abort|aborted")) {
        snprintf (why, whylen, "content.status of %.64s must be one of ok|error|abort|aborted",
                  type);
        return -EBADMSG;
    }
    if (strcmp (type, "execute_reply") == 0 && s_one_of (status, "ok")
    &&  !json_is_integer (json_object_get (content, "execution_count"))) {
        snprintf (why, whylen, "content.execution_count must be an integer");
        return -EBADMSG;
    }
    return 0;
}

int
gw_check_kernel_msg (const ch_msg_t *msg, char *why, size_t whylen)
{
    assert (msg && why);
    ch_channel_t ch = ch_msg_channel (msg);
    const char *type = ch_msg_type (msg);
    const s_schema_t *table = ch == CH_IOPUB ? s_iopub
                            : ch == CH_STDIN ? s_stdin
                            : ch == CH_CELLVM ? s_cellvm : s_replies;
    const s_schema_t *schema = s_find (table, type);
    if (!schema) {
        snprintf (why, whylen, "msg_type %.64s is not allowed on channel %s",
                  type, ch_channel_name (ch));
        return -EBADMSG;
    }
    json_t *content = ch_msg_content (msg);
    size_t rawlen = 0;
    const char *fields = schema->fields;
    if (ch_msg_raw_content (msg, &rawlen))
        fields = "name:s";                      //  text: validated by ch_jscan
    if (s_check_fields (content, fields, why, whylen) < 0)
        return -EBADMSG;
    if (ch != CH_CELLVM && s_check_values (type, content, why, whylen) < 0)
        return -EBADMSG;
    return 0;
}

int
gw_check_hello (const ch_msg_t *msg, char *why, size_t whylen)
{
    assert (msg && why);
    return ch_hello_check (ch_msg_content (msg), CH_PROTO_CHANNEL, "kernel", why, whylen);
}

int
gw_check_replay_request (const json_t *content, char *why, size_t whylen)
{
    assert (content && why);
    const json_t *id = json_object_get (content, "msg_id");
    const json_t *since = json_object_get (content, "since");
    const char *name = since ? "since" : "msg_id";
    const json_t *v = since ? since : id;
    if (id && since)
        snprintf (why, whylen, "give either msg_id or since, not both");
    else if (!v)
        snprintf (why, whylen, "content.msg_id (or content.since) is missing");
    else if (!json_is_string (v) || !json_string_length (v) || json_string_length (v) > 256)
        snprintf (why, whylen, "content.%s must be a msg_id: a string of 1 to 256 bytes", name);
    else
        return 0;
    return -EINVAL;
}
