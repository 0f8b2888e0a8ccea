/*  mc_lines - newline-delimited messages from a byte stream, each capped. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "mc_lines.h"

struct _mc_lines_t {
    size_t max_line;
    char *buf;          //  the current line so far (never more than max_line)
    size_t len;
    size_t cap;
    size_t total;       //  the current line's length, skipped bytes included
    bool skipping;      //  the current line is over the cap
    int ready;          //  0, or what mc_lines_next returns next (1 or 2)
};

mc_lines_t *
mc_lines_new (size_t max_line)
{
    mc_lines_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->max_line = max_line ? max_line : 1;
    return self;
}

void
mc_lines_destroy (mc_lines_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    free ((*self_p)->buf);
    free (*self_p);
    *self_p = NULL;
}

static void
s_append (mc_lines_t *self, const char *data, size_t len)
{
    if (self->len + len > self->cap) {
        size_t cap = self->cap ? self->cap : 4096;
        while (cap < self->len + len)
            cap *= 2;
        self->buf = realloc (self->buf, cap);
        if (!self->buf)
            abort ();
        self->cap = cap;
    }
    memcpy (self->buf + self->len, data, len);
    self->len += len;
}

//  Keep what fits under the cap; past it keep only the head and count.
static void
s_take (mc_lines_t *self, const char *data, size_t n)
{
    self->total += n;
    if (!self->skipping && self->len + n <= self->max_line) {
        s_append (self, data, n);
        return;
    }
    if (!self->skipping) {
        self->skipping = true;
        size_t room = self->len < MC_LINES_HEAD ? MC_LINES_HEAD - self->len : 0;
        s_append (self, data, n < room ? n : room);
        if (self->len > MC_LINES_HEAD)
            self->len = MC_LINES_HEAD;
    }
}

size_t
mc_lines_feed (mc_lines_t *self, const void *data, size_t len)
{
    assert (self);
    if (self->ready) {          //  the caller skipped mc_lines_next: drop it
        self->ready = 0;
        self->len = self->total = 0;
        self->skipping = false;
    }
    const char *p = data;
    const char *nl = len ? memchr (p, '\n', len) : NULL;
    size_t n = nl ? (size_t) (nl - p) : len;
    s_take (self, p, n);
    if (nl)
        self->ready = self->skipping ? 2 : 1;
    return nl ? n + 1 : n;
}

int
mc_lines_next (mc_lines_t *self, const char **line_p, size_t *len_p, size_t *total_p)
{
    assert (self && line_p && len_p);
    int rc = self->ready;
    if (!rc)
        return 0;
    size_t n = self->len;
    if (rc == 1 && n > 0 && self->buf [n - 1] == '\r')
        n--;
    *line_p = self->buf ? self->buf : "";
    *len_p = n;
    if (total_p)
        *total_p = rc == 1 ? n : self->total;
    //  Hand out once; the bytes stay valid until the next feed.
    self->ready = 0;
    self->len = 0;
    self->total = 0;
    self->skipping = false;
    return rc;
}

size_t
mc_lines_pending (const mc_lines_t *self)
{
    assert (self);
    return self->total;
}
