/*  gw_out - what the session sends to clients, stamped as the gateway's. */
#include "session/gw_out.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _gw_out_t {
    gw_session_emit_fn *emit;                   //  to clients, NULL: nowhere
    void *arg;
    const char *session;                        //  borrowed, live
};

gw_out_t *
gw_out_new (gw_session_emit_fn *emit, void *arg, const char *session)
{
    assert (session);
    gw_out_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->emit = emit;
    self->arg = arg;
    self->session = session;
    return self;
}

void
gw_out_destroy (gw_out_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

static gw_frames_t *
s_topic (const gw_out_t *self, const ch_msg_t *msg)
{
    char topic [128];
    const char *type = ch_msg_type (msg);
    if (strcmp (type, "stream") == 0)
        snprintf (topic, sizeof topic, "stream.%s",
                  json_string_value (json_object_get (ch_msg_content (msg), "name")));
    else
        snprintf (topic, sizeof topic, "kernel.%s.%s", self->session, type);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, topic, strlen (topic));
    return ids;
}

void
gw_out_send (gw_out_t *self, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    assert (self && msg);
    if (!self->emit)
        return;
    if (ch == CH_IOPUB) {
        gw_frames_t *topic = s_topic (self, msg);
        self->emit (self->arg, ch, topic, msg);
        gw_frames_destroy (&topic);
    }
    else if (ids)
        self->emit (self->arg, ch, ids, msg);
}

void
gw_out_new_msg (gw_out_t *self, ch_channel_t ch, const gw_frames_t *ids, const char *type,
                const json_t *parent, json_t **content_p)
{
    assert (self && type && content_p);
    ch_msg_t *msg = ch_msg_new (ch, type, parent, content_p, self->session);
    gw_out_send (self, ch, ids, msg);
    ch_msg_destroy (&msg);
}

void
gw_out_status (gw_out_t *self, const json_t *parent, const char *state)
{
    json_t *content = json_pack ("{s:s}", "execution_state", state);
    gw_out_new_msg (self, CH_IOPUB, NULL, "status", parent, &content);
}

void
gw_out_relay (gw_out_t *self, ch_msg_t *kmsg, const gw_frames_t *ids, const json_t *parent)
{
    assert (self && kmsg);
    ch_channel_t ch = ch_msg_channel (kmsg);
    json_t *content = json_incref (ch_msg_content (kmsg));
    ch_msg_t *out = ch_msg_new (ch, ch_msg_type (kmsg), parent, &content, self->session);
    json_t *metadata = json_incref (ch_msg_metadata (kmsg));
    ch_msg_set_metadata (out, &metadata);
    size_t rawlen = 0;
    uint8_t *raw = ch_msg_take_raw_content (kmsg, &rawlen);
    if (raw)
        ch_msg_set_raw_content (out, &raw, rawlen);
    for (size_t i = 0; i < ch_msg_nbuffers (kmsg); i++) {
        size_t len = 0;
        ch_free_fn *free_fn = NULL;
        void *hint = NULL;
        uint8_t *data = ch_msg_take_buffer (kmsg, i, &len, &free_fn, &hint);
        ch_msg_add_buffer_owned (out, data, len, free_fn, hint);
    }
    gw_out_send (self, ch, ids, out);
    ch_msg_destroy (&out);
}

void
gw_out_stamp_5_5 (ch_msg_t *msg)
{
    assert (msg);
    json_object_set_new (ch_msg_header (msg), "version", json_string ("5.5"));
    if (strcmp (ch_msg_type (msg), "kernel_info_reply") != 0)
        return;
    json_t *content = ch_msg_content (msg);
    json_object_set_new (content, "protocol_version", json_string ("5.5"));
    //  Of the kernel's features, what the gateway relays: the debugger
    //  (debug_request on control, debug_event on iopub), which the kernel
    //  announces with 5.3's "debugger": true. No subshells.
    json_t *theirs = json_object_get (content, "supported_features");
    bool debugger = json_is_true (json_object_get (content, "debugger"));
    for (size_t i = 0; i < json_array_size (theirs); i++) {
        const char *f = json_string_value (json_array_get (theirs, i));
        debugger |= f && strcmp (f, "debugger") == 0;
    }
    json_object_set_new (content, "supported_features",
                         debugger ? json_pack ("[s]", "debugger") : json_array ());
}
