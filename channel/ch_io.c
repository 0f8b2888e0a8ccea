/*  ch_io - writing channel messages to a file descriptor. */
#include "ch_io.h"
#include "ch_frame.h"
#include "ch_util.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


//  Wait for POLLOUT until deadline (-1: none). 0 or -ETIMEDOUT.
static int
s_wait_writable (int fd, int64_t deadline)
{
    int left = deadline < 0 ? -1 : (int) (deadline - ch_now_ms ());
    if (deadline >= 0 && left <= 0)
        return -ETIMEDOUT;
    struct pollfd pf = { fd, POLLOUT, 0 };
    int rc = poll (&pf, 1, left);
    return rc == 0 ? -ETIMEDOUT : 0;
}

int
ch_write_all (int fd, struct iovec *iov, int iovcnt, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : ch_now_ms () + timeout_ms;
    while (iovcnt > 0) {
        ssize_t n = writev (fd, iov, iovcnt);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (s_wait_writable (fd, deadline) < 0)
                return -ETIMEDOUT;
            continue;
        }
        if (n < 0)
            return -EPIPE;
        while (iovcnt > 0 && (size_t) n >= iov->iov_len) {
            n -= (ssize_t) iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *) iov->iov_base + n;
            iov->iov_len -= (size_t) n;
        }
    }
    return 0;
}

size_t
ch_wire_size (const ch_msg_t *msg, size_t json_len, uint32_t max_frame)
{
    if (json_len == 0 || json_len > max_frame)
        return 0;
    size_t total = CH_FRAME_HDR + json_len;
    for (size_t i = 0; i < ch_msg_nbuffers (msg); i++) {
        size_t len = 0;
        ch_msg_buffer (msg, i, &len);
        if (len == 0 || len > max_frame)
            return 0;
        total += CH_FRAME_HDR + len;
    }
    return total;
}

//  The whole message as iovecs: sync marker, then header + body per frame.
//  hdrs holds the headers. Returns the iovec count.
static int
s_iov (const ch_msg_t *msg, const char *json, size_t json_len, bool sync,
       uint8_t hdrs [][CH_FRAME_HDR], struct iovec *iov)
{
    int n = 0;
    if (sync)
        iov [n++] = (struct iovec) { (void *) CH_FRAME_SYNC, CH_FRAME_SYNC_LEN };
    ch_frame_encode_header (hdrs [0], json_len, UINT32_MAX);
    iov [n++] = (struct iovec) { hdrs [0], CH_FRAME_HDR };
    iov [n++] = (struct iovec) { (void *) json, json_len };
    for (size_t i = 0; i < ch_msg_nbuffers (msg); i++) {
        size_t len = 0;
        const uint8_t *buf = ch_msg_buffer (msg, i, &len);
        ch_frame_encode_header (hdrs [i + 1], len, UINT32_MAX);
        iov [n++] = (struct iovec) { hdrs [i + 1], CH_FRAME_HDR };
        iov [n++] = (struct iovec) { (void *) buf, len };
    }
    return n;
}

int
ch_write_msg (int fd, const ch_msg_t *msg, uint32_t max_frame, bool sync, int timeout_ms)
{
    assert (msg);
    size_t json_len = 0;
    char *json = ch_msg_encode (msg, &json_len);
    int rc = -EMSGSIZE;
    if (ch_wire_size (msg, json_len, max_frame)) {
        uint8_t hdrs [CH_MSG_MAX_BUFFERS + 1][CH_FRAME_HDR];
        struct iovec iov [2 * (CH_MSG_MAX_BUFFERS + 1) + 1];
        int n = s_iov (msg, json, json_len, sync, hdrs, iov);
        rc = ch_write_all (fd, iov, n, timeout_ms);
    }
    free (json);
    return rc;
}

//  ---------------------------------------------------------------------------
//  The queue: one chunk per message, written in order.

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
        struct iovec iov [2 * (CH_MSG_MAX_BUFFERS + 1) + 1];
        int n = s_iov (msg, json, json_len, sync, hdrs, iov);
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
