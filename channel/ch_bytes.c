/*  ch_bytes - a bounded byte queue. */
#include "ch_bytes.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct _ch_bytes_t {
    uint8_t *buf;
    size_t off, len, size, cap;                 //  bytes at buf [off .. off + len)
};

ch_bytes_t *
ch_bytes_new (size_t cap)
{
    assert (cap > 0);
    ch_bytes_t *self = calloc (1, sizeof *self);
    if (self)
        self->cap = cap;
    return self;
}

void
ch_bytes_destroy (ch_bytes_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    free ((*self_p)->buf);
    free (*self_p);
    *self_p = NULL;
}

size_t
ch_bytes_len (const ch_bytes_t *self)
{
    assert (self);
    return self->len;
}

size_t
ch_bytes_room (const ch_bytes_t *self)
{
    assert (self);
    return self->cap - self->len;
}

//  Room for len more at the end: move the bytes to the front, or grow.
static int
s_reserve (ch_bytes_t *self, size_t len)
{
    if (self->off + self->len + len <= self->size)
        return 0;
    if (self->off) {
        memmove (self->buf, self->buf + self->off, self->len);
        self->off = 0;
    }
    if (self->len + len <= self->size)
        return 0;
    size_t size = self->size ? self->size : 4096;
    while (size < self->len + len)
        size *= 2;
    if (size > self->cap)
        size = self->cap;
    uint8_t *buf = realloc (self->buf, size);
    if (!buf)
        return -ENOMEM;
    self->buf = buf;
    self->size = size;
    return 0;
}

int
ch_bytes_put (ch_bytes_t *self, const void *data, size_t len)
{
    assert (self && (data || !len));
    if (len > self->cap - self->len)
        return -ENOBUFS;
    if (!len)
        return 0;
    int rc = s_reserve (self, len);
    if (rc < 0)
        return rc;
    memcpy (self->buf + self->off + self->len, data, len);
    self->len += len;
    return 0;
}

const uint8_t *
ch_bytes_peek (const ch_bytes_t *self, size_t *len_p)
{
    assert (self && len_p);
    *len_p = self->len;
    return self->buf ? self->buf + self->off : (const uint8_t *) "";
}

void
ch_bytes_drop (ch_bytes_t *self, size_t n)
{
    assert (self);
    if (n >= self->len)
        self->off = self->len = 0;
    else {
        self->off += n;
        self->len -= n;
    }
}

ssize_t
ch_bytes_write (ch_bytes_t *self, int fd)
{
    assert (self);
    size_t done = 0;
    while (self->len) {
        //  send() on a socket keeps SIGPIPE away; write() for the rest (a port).
        ssize_t n = send (fd, self->buf + self->off, self->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == ENOTSOCK)
            n = write (fd, self->buf + self->off, self->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0)
            return -errno;
        ch_bytes_drop (self, (size_t) n);
        done += (size_t) n;
    }
    return (ssize_t) done;
}
