/*  ch_asm - the message assembler of the cellvm channel. */
#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_text.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _ch_asm_t {
    ch_limits_t limits;                         //  defaults filled in
    ch_frame_dec_t *dec;
    ch_msg_t *pending;                          //  envelope waiting for buffers
    size_t pending_bytes;                       //  its JSON + buffers so far
    ch_msg_t *dropped;                          //  envelope of the last oversize one
    bool sync_ok;                               //  markers allowed between frames
    bool broken;                                //  -EPROTO seen since the last reset
    size_t raw_min;                             //  ch_asm_set_raw_stream, 0: off
    char why [192];
};

ch_asm_t *
ch_asm_new (const ch_limits_t *limits)
{
    ch_asm_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    if (limits)
        self->limits = *limits;
    if (!self->limits.max_frame)
        self->limits.max_frame = CH_FRAME_MAX_DEFAULT;
    if (!self->limits.max_msg)
        self->limits.max_msg = self->limits.max_frame;
    if (!self->limits.max_buffer)
        self->limits.max_buffer = self->limits.max_frame;
    if (!self->limits.max_json || self->limits.max_json > self->limits.max_frame)
        self->limits.max_json = self->limits.max_frame;
    self->dec = ch_frame_dec_new (self->limits.max_frame);
    if (!self->dec)
        abort ();
    return self;
}

void
ch_asm_destroy (ch_asm_t **self_p)
{
    assert (self_p);
    ch_asm_t *self = *self_p;
    if (!self)
        return;
    ch_frame_dec_destroy (&self->dec);
    ch_msg_destroy (&self->pending);
    ch_msg_destroy (&self->dropped);
    free (self);
    *self_p = NULL;
}

void
ch_asm_reset (ch_asm_t *self)
{
    assert (self);
    ch_frame_dec_destroy (&self->dec);
    self->dec = ch_frame_dec_new (self->limits.max_frame);
    if (!self->dec)
        abort ();
    if (self->sync_ok)
        ch_frame_dec_allow_sync (self->dec);
    ch_msg_destroy (&self->pending);
    self->pending_bytes = 0;
    self->broken = false;
    self->why [0] = 0;
}

void
ch_asm_hunt (ch_asm_t *self)
{
    assert (self);
    ch_asm_reset (self);
    self->sync_ok = true;
    ch_frame_dec_hunt (self->dec);
}

void
ch_asm_allow_sync (ch_asm_t *self)
{
    assert (self);
    self->sync_ok = true;
    ch_frame_dec_allow_sync (self->dec);
}

void
ch_asm_set_raw_stream (ch_asm_t *self, size_t min)
{
    assert (self);
    self->raw_min = min;
}

const char *ch_asm_why (const ch_asm_t *self) { assert (self); return self->why; }
const ch_msg_t *ch_asm_dropped (const ch_asm_t *self) { assert (self); return self->dropped; }
const ch_limits_t *ch_asm_limits (const ch_asm_t *self) { assert (self); return &self->limits; }

bool
ch_asm_broken (const ch_asm_t *self)
{
    assert (self);
    return self->broken;
}

//  Drop *msg_p (over a cap), keep its envelope for ch_asm_dropped, and skip
//  the buffer frames still to come.
static int
s_oversize (ch_asm_t *self, ch_msg_t **msg_p, size_t got, const char *what, size_t cap)
{
    ch_msg_t *msg = *msg_p;
    *msg_p = NULL;
    size_t rest = ch_msg_nbuffers_expected (msg) - ch_msg_nbuffers (msg);
    ch_frame_dec_skip (self->dec, rest);
    snprintf (self->why, sizeof self->why, "%.64s: %s larger than the %zu-byte limit "
              "(%zu bytes so far)", ch_msg_type (msg), what, cap, got);
    json_t *h = json_incref (ch_msg_header (msg)), *p = json_incref (ch_msg_parent (msg));
    json_t *m = json_incref (ch_msg_metadata (msg)), *c = json_incref (ch_msg_content (msg));
    ch_msg_destroy (&self->dropped);
    self->dropped = ch_msg_from_parts (ch_msg_channel (msg), &h, &p, &m, &c);
    ch_msg_destroy (&msg);
    return -EMSGSIZE;
}

//  A raw stream text (docs/channel.md): an iopub stream whose content is
//  exactly {"name": ...} and whose one buffer is the text, as bytes. It
//  becomes the content a client gets ({"name", "text"}, escaped here, bad
//  UTF-8 as U+FFFD), kept raw, without the buffer. Anything else is left as
//  it is. -EBADMSG (a name other than stdout/stderr) and -EMSGSIZE (over
//  max_msg once escaped) drop the message; the stream goes on.
static int
s_raw_text (ch_asm_t *self, ch_msg_t **msg_p)
{
    ch_msg_t *msg = *msg_p;
    json_t *content = ch_msg_content (msg);
    const char *name = json_string_value (json_object_get (content, "name"));
    size_t len = 0, rawlen = 0;
    if (ch_msg_channel (msg) != CH_IOPUB || strcmp (ch_msg_type (msg), "stream") != 0
    ||  ch_msg_nbuffers (msg) != 1 || json_object_size (content) != 1 || !name
    ||  ch_msg_raw_content (msg, &rawlen))
        return 0;
    const uint8_t *text = ch_msg_buffer (msg, 0, &len);
    uint8_t *raw = NULL;
    int rc = ch_text_stream_content (name, text, len, self->limits.max_msg, &raw, &rawlen);
    if (rc == -EMSGSIZE)
        return s_oversize (self, msg_p, len, "stream text (escaped)", self->limits.max_msg);
    if (rc < 0) {
        snprintf (self->why, sizeof self->why, "raw stream text named %.32s", name);
        ch_msg_destroy (msg_p);
        return -EBADMSG;
    }
    ch_msg_set_raw_content (msg, &raw, rawlen);
    ch_msg_drop_buffers (msg);
    return 0;
}

//  One whole frame: the envelope of a new message, or its next buffer.
static int
s_frame (ch_asm_t *self, uint8_t **frame_p, size_t len, ch_msg_t **msg_p)
{
    if (!self->pending) {
        int rc = self->raw_min
               ? ch_msg_decode_lazy (*frame_p, len, self->raw_min, &self->pending, self->why,
                                     sizeof self->why)
               : ch_msg_decode (*frame_p, len, &self->pending, self->why, sizeof self->why);
        if (rc < 0)
            return rc;
        self->pending_bytes = len;
        if (len > self->limits.max_msg)
            return s_oversize (self, &self->pending, len, "message", self->limits.max_msg);
    }
    else {
        self->pending_bytes += len;
        if (len > self->limits.max_buffer) {
            ch_msg_add_buffer (self->pending, frame_p, len);
            return s_oversize (self, &self->pending, self->pending_bytes, "buffer",
                               self->limits.max_buffer);
        }
        ch_msg_add_buffer (self->pending, frame_p, len);
        if (self->pending_bytes > self->limits.max_msg)
            return s_oversize (self, &self->pending, self->pending_bytes, "message",
                               self->limits.max_msg);
    }
    if (ch_msg_nbuffers (self->pending) == ch_msg_nbuffers_expected (self->pending)) {
        *msg_p = self->pending;
        self->pending = NULL;
        if (self->raw_min)
            return s_raw_text (self, msg_p);
    }
    return 0;
}

int
ch_asm_feed (ch_asm_t *self, const uint8_t *data, size_t len, size_t *used_p,
             ch_msg_t **msg_p)
{
    assert (self && used_p && msg_p);
    *msg_p = NULL;
    *used_p = 0;
    self->why [0] = 0;
    while (*used_p < len && !*msg_p) {
        uint32_t max = (uint32_t) (self->pending ? self->limits.max_frame : self->limits.max_json);
        ch_frame_dec_set_max (self->dec, max);
        long k = ch_frame_dec_feed (self->dec, data + *used_p, len - *used_p);
        if (k < 0) {
            snprintf (self->why, sizeof self->why, "%sframe length %u is out of range 1..%u",
                      max < self->limits.max_frame ? "JSON " : "",
                      ch_frame_dec_bad_length (self->dec), max);
            self->broken = true;
            return -EPROTO;
        }
        *used_p += (size_t) k;
        if (!ch_frame_dec_ready (self->dec))
            continue;
        size_t flen = 0;
        uint8_t *frame = ch_frame_dec_take (self->dec, &flen);
        int rc = s_frame (self, &frame, flen, msg_p);
        free (frame);
        if (rc < 0)
            return rc;
    }
    return 0;
}
