/*  ch_frame - length-prefixed frame codec for the cellvm channel. */
#include "ch_frame.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct _ch_frame_dec_t {
    uint32_t max_frame;     //  largest acceptable L
    uint32_t max_now;       //  ... for the next header (ch_frame_dec_set_max)
    uint8_t hdr[CH_FRAME_HDR];
    size_t hdr_have;        //  header bytes collected so far
    uint8_t *body;          //  body being filled, NULL while reading header
    size_t body_len;        //  L of the current frame
    size_t body_have;       //  body bytes collected so far
    int ready;              //  body is complete and waiting to be taken
    int dead;               //  stream error seen; nothing more is accepted
    uint32_t bad_length;    //  the length that killed the stream
    int sync_ok;            //  zero length + "CVM-SYNC" is a marker, not an error
    int hunting;            //  skipping bytes until a whole marker went by
    size_t match;           //  marker bytes matched (hunting) or tag bytes read
    int in_tag;             //  reading the 8 tag bytes after a zero length
    size_t skip;            //  frames still to discard whole (ch_frame_dec_skip)
    size_t discard;         //  bytes left of the frame being discarded
};

static const uint8_t s_sync [CH_FRAME_SYNC_LEN] = CH_FRAME_SYNC;

ch_frame_dec_t *
ch_frame_dec_new (uint32_t max_frame)
{
    assert (max_frame > 0);
    ch_frame_dec_t *self = calloc (1, sizeof *self);
    if (self)
        self->max_frame = self->max_now = max_frame;
    return self;
}

void
ch_frame_dec_destroy (ch_frame_dec_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        free ((*self_p)->body);
        free (*self_p);
        *self_p = NULL;
    }
}

void
ch_frame_dec_allow_sync (ch_frame_dec_t *self)
{
    assert (self);
    self->sync_ok = 1;
}

void
ch_frame_dec_hunt (ch_frame_dec_t *self)
{
    assert (self);
    free (self->body);
    self->body = NULL;
    self->body_len = self->body_have = self->hdr_have = 0;
    self->ready = self->dead = self->in_tag = 0;
    self->bad_length = 0;
    self->skip = self->discard = 0;
    self->sync_ok = self->hunting = 1;
    self->match = 0;
}

int
ch_frame_dec_hunting (const ch_frame_dec_t *self)
{
    assert (self);
    return self->hunting;
}

//  One byte while hunting. The marker's only self-overlap is its run of
//  leading zeros, so a mismatch falls back to "zeros seen so far".
static void
s_hunt_byte (ch_frame_dec_t *self, uint8_t b)
{
    if (b == s_sync [self->match])
        self->match++;
    else if (b == 0)                            //  past the zeros, a zero starts over at one
        self->match = self->match == 4 ? 4 : 1;
    else
        self->match = 0;
    if (self->match == CH_FRAME_SYNC_LEN) {
        self->hunting = 0;
        self->match = 0;
    }
}

//  One tag byte after a zero length: must spell the marker, else it is dead.
static int
s_tag_byte (ch_frame_dec_t *self, uint8_t b)
{
    if (b != s_sync [CH_FRAME_HDR + self->match]) {
        self->dead = 1;
        return -EPROTO;
    }
    if (++self->match == CH_FRAME_SYNC_LEN - CH_FRAME_HDR) {
        self->in_tag = 0;
        self->match = 0;
        self->hdr_have = 0;
    }
    return 0;
}

//  Header complete: check L and allocate the body (+1 for a NUL).
static int
s_start_body (ch_frame_dec_t *self)
{
    uint32_t len = (uint32_t) self->hdr[0] << 24 | (uint32_t) self->hdr[1] << 16
                 | (uint32_t) self->hdr[2] << 8 | (uint32_t) self->hdr[3];
    if (len == 0 && self->sync_ok) {
        self->in_tag = 1;
        self->match = 0;
        return 0;
    }
    if (len == 0 || len > self->max_now) {
        self->dead = 1;
        self->bad_length = len;
        return -EPROTO;
    }
    if (self->skip) {                           //  discarded, never allocated
        self->skip--;
        self->discard = len;
        self->hdr_have = 0;
        return 0;
    }
    self->body = malloc ((size_t) len + 1);
    if (!self->body)
        abort ();   //  out of memory is not recoverable here (czmq style)
    self->body_len = len;
    self->body_have = 0;
    return 0;
}

void
ch_frame_dec_set_max (ch_frame_dec_t *self, uint32_t max_frame)
{
    assert (self && max_frame > 0);
    self->max_now = max_frame < self->max_frame ? max_frame : self->max_frame;
}

//  Header bytes, then the body's allocation (or its discarding).
static long
s_feed_header (ch_frame_dec_t *self, const uint8_t *data, size_t len)
{
    size_t n = CH_FRAME_HDR - self->hdr_have;
    if (n > len)
        n = len;
    memcpy (self->hdr + self->hdr_have, data, n);
    self->hdr_have += n;
    if (self->hdr_have == CH_FRAME_HDR && !self->in_tag && s_start_body (self) < 0)
        return -EPROTO;
    return (long) n;
}

//  Body bytes; the frame is ready once all are in.
static size_t
s_feed_body (ch_frame_dec_t *self, const uint8_t *data, size_t len)
{
    size_t n = self->body_len - self->body_have;
    if (n > len)
        n = len;
    memcpy (self->body + self->body_have, data, n);
    self->body_have += n;
    if (self->body_have == self->body_len) {
        self->body [self->body_len] = 0;
        self->ready = 1;
    }
    return n;
}

long
ch_frame_dec_feed (ch_frame_dec_t *self, const uint8_t *data, size_t len)
{
    assert (self);
    size_t used = 0;
    if (self->dead)
        return -EPROTO;
    while (used < len && !self->ready) {
        if (self->hunting)
            s_hunt_byte (self, data [used++]);
        else if (self->in_tag) {
            if (s_tag_byte (self, data [used++]) < 0)
                return -EPROTO;
        }
        else if (self->discard) {
            size_t n = self->discard < len - used ? self->discard : len - used;
            self->discard -= n;
            used += n;
        }
        else if (!self->body) {
            long n = s_feed_header (self, data + used, len - used);
            if (n < 0)
                return -EPROTO;
            used += (size_t) n;
        }
        else
            used += s_feed_body (self, data + used, len - used);
    }
    return (long) used;
}

int
ch_frame_dec_ready (const ch_frame_dec_t *self)
{
    assert (self);
    return self->ready;
}

uint8_t *
ch_frame_dec_take (ch_frame_dec_t *self, size_t *len_p)
{
    assert (self);
    if (!self->ready)
        return NULL;
    uint8_t *body = self->body;
    if (len_p)
        *len_p = self->body_len;
    self->body = NULL;
    self->body_len = self->body_have = self->hdr_have = 0;
    self->ready = 0;
    return body;
}

void
ch_frame_dec_skip (ch_frame_dec_t *self, size_t n)
{
    assert (self);
    self->skip += n;
}

uint32_t
ch_frame_dec_bad_length (const ch_frame_dec_t *self)
{
    assert (self);
    return self->bad_length;
}

int
ch_frame_encode_header (uint8_t hdr[CH_FRAME_HDR], size_t len, uint32_t max_frame)
{
    if (len == 0 || len > max_frame)
        return -EMSGSIZE;
    hdr[0] = (uint8_t) (len >> 24);
    hdr[1] = (uint8_t) (len >> 16);
    hdr[2] = (uint8_t) (len >> 8);
    hdr[3] = (uint8_t) len;
    return 0;
}
