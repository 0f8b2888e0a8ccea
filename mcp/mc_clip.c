/*  mc_clip - text for a model: capped head and tail, no terminal codes. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_clip.h"

//  A line break within this many bytes of a cut moves the cut to it.
#define SNAP 256

struct _mc_clip_t {
    size_t half;        //  cap / 2
    char *head;         //  the first bytes, up to half
    size_t head_len;
    char *tail;         //  the last bytes seen: up to 2 * half, trimmed lazily
    size_t tail_len;
    size_t total;
};

mc_clip_t *
mc_clip_new (size_t cap)
{
    mc_clip_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->half = (cap < 64 ? 64 : cap) / 2;
    self->head = malloc (self->half);
    self->tail = malloc (2 * self->half);
    if (!self->head || !self->tail)
        abort ();
    return self;
}

void
mc_clip_destroy (mc_clip_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    free ((*self_p)->head);
    free ((*self_p)->tail);
    free (*self_p);
    *self_p = NULL;
}

void
mc_clip_add (mc_clip_t *self, const char *text, size_t len)
{
    assert (self && (text || len == 0));
    self->total += len;
    size_t to_head = self->half - self->head_len;
    if (to_head > len)
        to_head = len;
    memcpy (self->head + self->head_len, text, to_head);
    self->head_len += to_head;
    //  Everything also goes through the tail window (the head may overlap
    //  it; mc_clip_text only uses the tail when the two are apart).
    if (len >= self->half) {
        memcpy (self->tail, text + len - self->half, self->half);
        self->tail_len = self->half;
        return;
    }
    if (self->tail_len + len > 2 * self->half) {
        size_t keep = self->half - len;
        memmove (self->tail, self->tail + self->tail_len - keep, keep);
        self->tail_len = keep;
    }
    memcpy (self->tail + self->tail_len, text, len);
    self->tail_len += len;
}

size_t
mc_clip_total (const mc_clip_t *self)
{
    assert (self);
    return self->total;
}

//  Where the head ends: not inside a UTF-8 character, at a line break when
//  one is within SNAP bytes of the end.
static size_t
s_head_cut (const char *s, size_t len)
{
    //  Drop a last character whose bytes did not all fit.
    size_t lead = len;
    while (lead > 0 && len - lead < 4 && ((unsigned char) s [lead - 1] & 0xC0) == 0x80)
        lead--;
    size_t cut = len;
    if (lead > 0) {
        unsigned char c = (unsigned char) s [lead - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (lead - 1 + need > len)
            cut = lead - 1;
    }
    for (size_t i = cut; i > 0 && cut - i < SNAP; i--)
        if (s [i - 1] == '\n')
            return i;
    return cut;
}

//  Where the tail starts (offset into s): after a line break when one is
//  within SNAP bytes of the start, else at a character boundary.
static size_t
s_tail_cut (const char *s, size_t len)
{
    for (size_t i = 0; i < len && i < SNAP; i++)
        if (s [i] == '\n')
            return i + 1;
    size_t cut = 0;
    while (cut < len && ((unsigned char) s [cut] & 0xC0) == 0x80)
        cut++;
    return cut;
}

//  head_len and tail_start as the text uses them; false when all fits.
static int
s_cuts (const mc_clip_t *self, size_t *head_p, const char **tail_p, size_t *tail_len_p)
{
    if (self->total <= 2 * self->half)
        return 0;
    const char *tail = self->tail + self->tail_len - self->half;
    *head_p = self->head_len < self->half ? self->head_len
            : s_head_cut (self->head, self->half);
    size_t skip = s_tail_cut (tail, self->half);
    *tail_p = tail + skip;
    *tail_len_p = self->half - skip;
    return 1;
}

size_t
mc_clip_omitted (const mc_clip_t *self)
{
    assert (self);
    size_t head, tail_len;
    const char *tail;
    if (!s_cuts (self, &head, &tail, &tail_len))
        return 0;
    return self->total - head - tail_len;
}

char *
mc_clip_fmt_bytes (size_t n, char out [32])
{
    char digits [24];
    int len = snprintf (digits, sizeof digits, "%zu", n);
    char *o = out;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            *o++ = ',';
        *o++ = digits [i];
    }
    *o = 0;
    return out;
}

char *
mc_clip_text (const mc_clip_t *self)
{
    assert (self);
    size_t head, tail_len;
    const char *tail;
    if (!s_cuts (self, &head, &tail, &tail_len)) {
        char *all = malloc (self->total + 1);
        if (!all)
            abort ();
        //  All of it is in the tail window (or the head, when shorter).
        memcpy (all, self->tail_len >= self->total ? self->tail + self->tail_len - self->total
                : self->head, self->total);
        all [self->total] = 0;
        return all;
    }
    char num [32], marker [80];
    mc_clip_fmt_bytes (self->total - head - tail_len, num);
    int mlen = snprintf (marker, sizeof marker, "%s[... %s bytes omitted ...]\n",
                         head > 0 && self->head [head - 1] != '\n' ? "\n" : "", num);
    char *out = malloc (head + (size_t) mlen + tail_len + 1);
    if (!out)
        abort ();
    memcpy (out, self->head, head);
    memcpy (out + head, marker, (size_t) mlen);
    memcpy (out + head + (size_t) mlen, tail, tail_len);
    out [head + (size_t) mlen + tail_len] = 0;
    return out;
}

//  Length of the escape sequence at s [0] == ESC (at least 1).
static size_t
s_escape_len (const char *s, size_t len)
{
    if (len < 2)
        return len;
    size_t i = 2;
    if (s [1] == '[') {             //  CSI: parameters, then a final byte
        while (i < len && ((unsigned char) s [i] < 0x40 || (unsigned char) s [i] > 0x7E))
            i++;
        return i < len ? i + 1 : len;
    }
    if (s [1] == ']') {             //  OSC: up to BEL or ESC backslash
        for (; i < len; i++) {
            if (s [i] == '\a')
                return i + 1;
            if (s [i] == 0x1b && i + 1 < len && s [i + 1] == '\\')
                return i + 2;
        }
        return len;
    }
    return 2;
}

char *
mc_clip_clean (const char *text, size_t len, size_t *len_p)
{
    assert (text || len == 0);
    char *out = malloc (len + 1);
    if (!out)
        abort ();
    size_t n = 0, line = 0;     //  line: where the current output line starts
    for (size_t i = 0; i < len; i++) {
        char c = text [i];
        if (c == 0x1b) {
            i += s_escape_len (text + i, len - i) - 1;
            continue;
        }
        if (c == '\r' && !(i + 1 < len && text [i + 1] == '\n')) {
            if (i + 1 < len)
                n = line;       //  a lone CR: the line starts over
            continue;
        }
        out [n++] = c;
        if (c == '\n')
            line = n;
    }
    out [n] = 0;
    if (len_p)
        *len_p = n;
    return out;
}
