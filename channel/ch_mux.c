/*  ch_mux - many byte streams over one pipe (see ch_mux.h). */
#include "ch_mux.h"
#include "ch_frame.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CREDIT_LEN 4
#define S_ERR_MAX 128

struct _ch_mux_dec_t {
    //  The frame being collected, header and payload, and one byte for the
    //  NUL past it: the largest frame, allocated once so that no peer can
    //  make the decoder allocate.
    uint8_t buf [CH_MUX_HDR + CH_MUX_DATA_MAX + 1];
    size_t have;                                //  bytes of buf filled
    size_t want;                                //  the whole frame's size, 0 until its header is in
    ch_mux_frame_t frame;                       //  the completed frame
    bool ready;                                 //  ... not yet taken
    bool in_sync;                               //  a 0 byte between frames began a marker
    bool hunting;                               //  skipping to just past the next marker
    size_t match;                               //  marker bytes matched (in_sync or hunting)
    bool dead;
    char err [S_ERR_MAX];                       //  why it died
};

static const uint8_t s_sync [CH_FRAME_SYNC_LEN] = CH_FRAME_SYNC;

//  The table of ch_mux.h: the length bounds per type, indexed by type.
static const struct {
    const char *name;
    uint32_t min, max;
} s_types [] = {
    [CH_MUX_HELLO] = { "HELLO", 1, CH_MUX_TEXT_MAX },
    [CH_MUX_OPEN] = { "OPEN", 0, 0 },
    [CH_MUX_DATA] = { "DATA", 1, CH_MUX_DATA_MAX },
    [CH_MUX_EOF] = { "EOF", 0, 0 },
    [CH_MUX_CLOSE] = { "CLOSE", 0, CH_MUX_TEXT_MAX },
    [CH_MUX_CREDIT] = { "CREDIT", S_CREDIT_LEN, S_CREDIT_LEN },
};

const char *
ch_mux_type_name (int type)
{
    if (type < CH_MUX_HELLO || type > CH_MUX_CREDIT)
        return "?";
    return s_types [type].name;
}

//  Whether a header obeys the table; if not, why into err (cap bytes). The
//  decoder and the encoders share it, so nothing encoded is ever refused.
static int
s_check_header (int type, uint32_t stream, uint32_t len, char *err, size_t cap)
{
    const char *name = ch_mux_type_name (type);
    if (name [0] == '?')
        snprintf (err, cap, "unknown frame type %d on stream %u", type, stream);
    else if (type == CH_MUX_HELLO && stream != 0)
        snprintf (err, cap, "HELLO on stream %u; HELLO is only on stream 0", stream);
    else if (type != CH_MUX_HELLO && stream == 0)
        snprintf (err, cap, "%s on stream 0; stream 0 is only for HELLO", name);
    else if (len < s_types [type].min || len > s_types [type].max) {
        uint32_t min = s_types [type].min, max = s_types [type].max;
        const char *s = len == 1 ? "" : "s";
        if (max == 0)
            snprintf (err, cap, "%s on stream %u has %u byte%s; it carries none",
                      name, stream, len, s);
        else if (min == max)
            snprintf (err, cap, "%s on stream %u has %u byte%s; exactly %u",
                      name, stream, len, s, min);
        else
            snprintf (err, cap, "%s on stream %u has %u byte%s; at %s %u", name, stream,
                      len, s, len < min ? "least" : "most", len < min ? min : max);
    }
    else
        return 0;
    return -EPROTO;
}

static int
s_check_credit (uint32_t stream, uint32_t amount, char *err, size_t cap)
{
    if (amount >= 1 && amount <= CH_MUX_WINDOW)
        return 0;
    snprintf (err, cap, "CREDIT on stream %u grants %u bytes; 1..%u", stream, amount,
              CH_MUX_WINDOW);
    return -EPROTO;
}

static uint32_t
s_get32 (const uint8_t *p)
{
    return (uint32_t) p [0] << 24 | (uint32_t) p [1] << 16 | (uint32_t) p [2] << 8 | p [3];
}

static void
s_put32 (uint8_t *p, uint32_t v)
{
    p [0] = (uint8_t) (v >> 24);
    p [1] = (uint8_t) (v >> 16);
    p [2] = (uint8_t) (v >> 8);
    p [3] = (uint8_t) v;
}

ch_mux_dec_t *
ch_mux_dec_new (void)
{
    return calloc (1, sizeof (ch_mux_dec_t));
}

void
ch_mux_dec_destroy (ch_mux_dec_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

void
ch_mux_dec_hunt (ch_mux_dec_t *self)
{
    assert (self);
    self->have = self->want = self->match = 0;
    self->ready = self->in_sync = self->dead = false;
    self->hunting = true;
    self->err [0] = '\0';
}

bool
ch_mux_dec_hunting (const ch_mux_dec_t *self)
{
    assert (self);
    return self->hunting;
}

const char *
ch_mux_dec_error (const ch_mux_dec_t *self)
{
    assert (self);
    return self->err;
}

const ch_mux_frame_t *
ch_mux_dec_frame (ch_mux_dec_t *self)
{
    assert (self);
    if (!self->ready)
        return NULL;
    self->ready = false;
    return &self->frame;
}

//  Hunting: bytes up to and including the next marker, how many. The
//  marker's only overlap with itself is its run of four leading zeros, so a
//  byte that breaks a match restarts it from the zeros just seen: four after
//  "\0\0\0\0" then a fifth zero, one after a zero that follows "CVM-...".
static size_t
s_hunt (ch_mux_dec_t *self, const uint8_t *data, size_t len)
{
    size_t i = 0;
    while (i < len && self->hunting) {
        uint8_t b = data [i++];
        if (b == s_sync [self->match])
            self->match++;
        else if (b == 0)
            self->match = self->match == 4 ? 4 : 1;
        else
            self->match = 0;
        if (self->match == CH_FRAME_SYNC_LEN) {
            self->hunting = false;
            self->match = 0;
        }
    }
    return i;
}

//  A marker between frames, past its first 0 byte: the rest must spell it.
static long
s_sync_more (ch_mux_dec_t *self, const uint8_t *data, size_t len)
{
    size_t i = 0;
    while (i < len && self->in_sync) {
        uint8_t b = data [i++];
        if (b != s_sync [self->match]) {
            snprintf (self->err, sizeof self->err, "type 0 is only the sync marker, and "
                      "byte %zu of this one is 0x%02x, not 0x%02x", self->match + 1, b,
                      s_sync [self->match]);
            return -EPROTO;
        }
        if (++self->match == CH_FRAME_SYNC_LEN) {
            self->in_sync = false;
            self->match = 0;
        }
    }
    return (long) i;
}

//  The frame is whole: check what the table says of its payload, publish it.
static int
s_complete (ch_mux_dec_t *self)
{
    ch_mux_frame_t *f = &self->frame;
    f->data = self->buf + CH_MUX_HDR;
    f->credit = 0;
    self->buf [self->want] = '\0';
    if (f->type == CH_MUX_CREDIT) {
        f->credit = s_get32 (f->data);
        if (s_check_credit (f->stream, f->credit, self->err, sizeof self->err) < 0)
            return -EPROTO;
    }
    self->have = self->want = 0;
    self->ready = true;
    return 0;
}

//  The 9 header bytes are in: refuse a bad one before any payload comes.
static int
s_header (ch_mux_dec_t *self)
{
    ch_mux_frame_t *f = &self->frame;
    uint32_t stream = s_get32 (self->buf + 1), len = s_get32 (self->buf + 5);
    if (s_check_header (self->buf [0], stream, len, self->err, sizeof self->err) < 0)
        return -EPROTO;
    f->type = (ch_mux_type_t) self->buf [0];
    f->stream = stream;
    f->len = len;
    self->want = CH_MUX_HDR + (size_t) len;
    return self->want == CH_MUX_HDR ? s_complete (self) : 0;
}

//  Bytes of a frame (or the 0 that starts a marker), how many.
static long
s_frame_more (ch_mux_dec_t *self, const uint8_t *data, size_t len)
{
    if (self->have == 0 && data [0] == 0) {
        self->in_sync = true;
        self->match = 1;
        return 1;
    }
    size_t end = self->want ? self->want : CH_MUX_HDR;
    size_t n = end - self->have < len ? end - self->have : len;
    memcpy (self->buf + self->have, data, n);
    self->have += n;
    int rc = 0;
    if (self->have == end)
        rc = self->want ? s_complete (self) : s_header (self);
    return rc < 0 ? rc : (long) n;
}

long
ch_mux_dec_feed (ch_mux_dec_t *self, const uint8_t *data, size_t len)
{
    assert (self);
    assert (data || len == 0);
    if (self->dead)
        return -EPROTO;
    size_t used = 0;
    while (used < len && !self->ready) {
        long n;
        if (self->hunting)
            n = (long) s_hunt (self, data + used, len - used);
        else if (self->in_sync)
            n = s_sync_more (self, data + used, len - used);
        else
            n = s_frame_more (self, data + used, len - used);
        if (n < 0) {
            self->dead = true;
            self->have = self->want = 0;
            return -EPROTO;
        }
        used += (size_t) n;
    }
    return (long) used;
}

int
ch_mux_encode_header (uint8_t hdr [CH_MUX_HDR], ch_mux_type_t type, uint32_t stream,
                      uint32_t len)
{
    char err [S_ERR_MAX];
    if (s_check_header ((int) type, stream, len, err, sizeof err) < 0)
        return -EINVAL;
    hdr [0] = (uint8_t) type;
    s_put32 (hdr + 1, stream);
    s_put32 (hdr + 5, len);
    return 0;
}

int
ch_mux_encode_credit (uint8_t out [CH_MUX_HDR + 4], uint32_t stream, uint32_t amount)
{
    char err [S_ERR_MAX];
    if (s_check_credit (stream, amount, err, sizeof err) < 0
        || ch_mux_encode_header (out, CH_MUX_CREDIT, stream, S_CREDIT_LEN) < 0)
        return -EINVAL;
    s_put32 (out + CH_MUX_HDR, amount);
    return 0;
}
