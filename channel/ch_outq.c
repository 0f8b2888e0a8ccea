/*  ch_outq - framed output a reactor writes when its fd is writable: one
    chunk per message, written in order. */
#include "ch_outq.h"
#include "ch_io.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct s_chunk_t {
    struct s_chunk_t *next;
    size_t len, off;
    uint8_t data [];
} s_chunk_t;

struct _ch_outq_t {
    uint32_t max_frame;
    size_t max_bytes;
    s_chunk_t *head, *tail;
    size_t bytes;                               //  queued, not yet written
};

ch_outq_t *
ch_outq_new (uint32_t max_frame, size_t max_bytes)
{
    ch_outq_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->max_frame = max_frame ? max_frame : CH_FRAME_MAX_DEFAULT;
    self->max_bytes = max_bytes ? max_bytes : 4 * (size_t) self->max_frame;
    return self;
}

void
ch_outq_clear (ch_outq_t *self)
{
    assert (self);
    while (self->head) {
        s_chunk_t *next = self->head->next;
        free (self->head);
        self->head = next;
    }
    self->tail = NULL;
    self->bytes = 0;
}

void
ch_outq_destroy (ch_outq_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        ch_outq_clear (*self_p);
        free (*self_p);
        *self_p = NULL;
    }
}

size_t
ch_outq_bytes (const ch_outq_t *self)
{
    assert (self);
    return self->bytes;
}

int
ch_outq_put (ch_outq_t *self, const ch_msg_t *msg, bool sync)
{
    assert (self && msg);
    size_t json_len = 0;
    char *json = ch_msg_encode (msg, &json_len);
    size_t total = ch_wire_size (msg, json_len, self->max_frame);
    int rc = total ? 0 : -EMSGSIZE;
    total += sync ? CH_FRAME_SYNC_LEN : 0;
    if (rc == 0 && (total > self->max_bytes || self->bytes > self->max_bytes - total))
        rc = -ENOBUFS;
    if (rc == 0) {
        s_chunk_t *c = malloc (sizeof *c + total);
        if (!c)
            abort ();
        uint8_t hdrs [CH_MSG_MAX_BUFFERS + 1][CH_FRAME_HDR];
        struct iovec iov [CH_WIRE_IOV_MAX];
        int n = ch_wire_iov (msg, json, json_len, sync, hdrs, iov);
        *c = (s_chunk_t) { .len = total };
        for (int i = 0; i < n; i++) {
            memcpy (c->data + c->off, iov [i].iov_base, iov [i].iov_len);
            c->off += iov [i].iov_len;
        }
        c->off = 0;
        if (self->tail)
            self->tail->next = c;
        else
            self->head = c;
        self->tail = c;
        self->bytes += total;
    }
    free (json);
    return rc;
}

//  One non-blocking write; sockets get MSG_NOSIGNAL, pipes and devices write().
static ssize_t
s_write (int fd, const void *p, size_t n)
{
    ssize_t w = send (fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == ENOTSOCK)
        w = write (fd, p, n);
    return w;
}

int
ch_outq_flush (ch_outq_t *self, int fd)
{
    assert (self);
    while (self->head) {
        s_chunk_t *c = self->head;
        ssize_t w = s_write (fd, c->data + c->off, c->len - c->off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w <= 0)
            return -EPIPE;
        c->off += (size_t) w;
        self->bytes -= (size_t) w;
        if (c->off == c->len) {
            if (!(self->head = c->next))
                self->tail = NULL;
            free (c);
        }
    }
    return 0;
}
