/*  gi_ctl - the control port: framed messages, non-blocking. */
#include "gi_ctl.h"
#include "gi_log.h"
#include "kn_frame.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_RBUF 65536
#define S_TICK_MS 250
//  One message with its buffers may hold at most this much; more is refused.
#define S_MSG_MAX (96u * 1024u * 1024u)
#define S_OUT_MAX (160u * 1024u * 1024u)

typedef struct s_chunk {
    struct s_chunk *next;
    size_t len, off;
    uint8_t data [];
} s_chunk_t;

struct _gi_ctl_t {
    int fd;
    uint32_t max_frame;
    int connected;
    kn_frame_dec_t *dec;
    kn_msg_t *pending;          //  JSON seen, its buffers still coming
    size_t pending_bytes;
    s_chunk_t *head, *tail;     //  output queue
    size_t queued;
    uint8_t rbuf [S_RBUF];      //  bytes read, not yet fed
    size_t rpos, rlen;
    char session [37];
};

gi_ctl_t *
gi_ctl_new (const char *path, uint32_t max_frame)
{
    int fd = open (path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return NULL;
    //  SIGIO tells us when the host connects or goes: no busy polling.
    if (fcntl (fd, F_SETOWN, getpid ()) < 0
    ||  fcntl (fd, F_SETFL, O_RDWR | O_NONBLOCK | O_ASYNC) < 0)
        gi_log ("no SIGIO on %s: %s (polling every %d ms)", path, strerror (errno), S_TICK_MS);
    gi_ctl_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    self->dec = kn_frame_dec_new (max_frame);
    kn_uuid4 (self->session);
    return self;
}

static void
s_drop_output (gi_ctl_t *self)
{
    while (self->head) {
        s_chunk_t *next = self->head->next;
        free (self->head);
        self->head = next;
    }
    self->tail = NULL;
    self->queued = 0;
}

//  Forget everything of the last connection.
static void
s_reset (gi_ctl_t *self)
{
    kn_frame_dec_destroy (&self->dec);
    self->dec = kn_frame_dec_new (self->max_frame);
    kn_msg_destroy (&self->pending);
    self->pending_bytes = 0;
    self->rpos = self->rlen = 0;
    s_drop_output (self);
}

void
gi_ctl_destroy (gi_ctl_t **self_p)
{
    assert (self_p);
    gi_ctl_t *self = *self_p;
    if (!self)
        return;
    s_reset (self);
    kn_frame_dec_destroy (&self->dec);
    close (self->fd);
    free (self);
    *self_p = NULL;
}

int
gi_ctl_connected (const gi_ctl_t *self)
{
    return self->connected;
}

size_t
gi_ctl_queued (const gi_ctl_t *self)
{
    return self->queued;
}

const char *
gi_ctl_session (const gi_ctl_t *self)
{
    return self->session;
}

uint32_t
gi_ctl_max_frame (const gi_ctl_t *self)
{
    return self->max_frame;
}

int
gi_ctl_pollfd (gi_ctl_t *self, struct pollfd *pfd)
{
    pfd->fd = self->connected ? self->fd : -1;
    pfd->events = (short) (POLLIN | (self->queued ? POLLOUT : 0));
    pfd->revents = 0;
    return self->connected ? -1 : S_TICK_MS;
}

//  Is a host on the other end? POLLHUP means no.
static void
s_check_connection (gi_ctl_t *self, short revents)
{
    struct pollfd pfd = { self->fd, POLLIN, 0 };
    if (!revents && poll (&pfd, 1, 0) >= 0)
        revents = pfd.revents;
    int now = !(revents & (POLLHUP | POLLERR | POLLNVAL));
    if (now != self->connected) {
        s_reset (self);
        self->connected = now;
        gi_log ("control port: host %s", now ? "connected" : "disconnected");
    }
}

static int
s_queue (gi_ctl_t *self, const void *a, size_t alen, const void *b, size_t blen)
{
    if (self->queued + alen + blen > S_OUT_MAX)
        return -ENOBUFS;
    s_chunk_t *c = malloc (sizeof *c + alen + blen);
    if (!c)
        return -ENOMEM;
    memcpy (c->data, a, alen);
    if (blen)
        memcpy (c->data + alen, b, blen);
    c->len = alen + blen;
    c->off = 0;
    c->next = NULL;
    if (self->tail)
        self->tail->next = c;
    else
        self->head = c;
    self->tail = c;
    self->queued += c->len;
    return 0;
}

static int
s_queue_frame (gi_ctl_t *self, const void *data, size_t len)
{
    uint8_t hdr [KN_FRAME_HDR];
    int rc = kn_frame_encode_header (hdr, len, self->max_frame);
    return rc < 0 ? rc : s_queue (self, hdr, sizeof hdr, data, len);
}

int
gi_ctl_send (gi_ctl_t *self, kn_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    size_t len, total = 0;
    char *text = kn_msg_encode (*msg_p, &len);
    int rc = len <= self->max_frame ? 0 : -EMSGSIZE;
    for (size_t i = 0; rc == 0 && i < kn_msg_nbuffers (*msg_p); i++) {
        size_t blen;
        kn_msg_buffer (*msg_p, i, &blen);
        total += blen;
        if (blen == 0 || blen > self->max_frame)
            rc = -EMSGSIZE;
    }
    if (rc == 0 && self->queued + len + total + 64 > S_OUT_MAX)
        rc = -ENOBUFS;
    //  Sizes are checked first: a message is queued whole or not at all.
    if (rc == 0 && self->connected) {
        rc = s_queue_frame (self, text, len);
        for (size_t i = 0; rc == 0 && i < kn_msg_nbuffers (*msg_p); i++) {
            size_t blen;
            const uint8_t *b = kn_msg_buffer (*msg_p, i, &blen);
            rc = s_queue_frame (self, b, blen);
        }
    }
    if (rc < 0)
        gi_log ("control port: dropped %s: %s", kn_msg_type (*msg_p), strerror (-rc));
    free (text);
    kn_msg_destroy (msg_p);
    return rc;
}

static int
s_flush (gi_ctl_t *self)
{
    while (self->head) {
        s_chunk_t *c = self->head;
        ssize_t n = write (self->fd, c->data + c->off, c->len - c->off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? 0 : -errno;
        c->off += (size_t) n;
        self->queued -= (size_t) n;
        if (c->off < c->len)
            continue;
        self->head = c->next;
        if (!self->head)
            self->tail = NULL;
        free (c);
    }
    return 0;
}

//  A frame arrived: start a message or add a buffer to the pending one.
static int
s_on_frame (gi_ctl_t *self, uint8_t *frame, size_t len, kn_msg_t **msg_p)
{
    char err [256] = "";
    if (!self->pending) {
        int rc = kn_msg_decode (frame, len, &self->pending, err, sizeof err);
        free (frame);
        if (rc < 0) {
            gi_log ("control port: bad message dropped: %s", err);
            return 0;
        }
        self->pending_bytes = len;
    }
    else {
        self->pending_bytes += len;
        kn_msg_add_buffer (self->pending, &frame, len);
        free (frame);
    }
    if (self->pending_bytes > S_MSG_MAX) {
        gi_log ("control port: message over %u bytes: connection reset", S_MSG_MAX);
        s_reset (self);
        return 0;
    }
    if (kn_msg_nbuffers (self->pending) == kn_msg_nbuffers_expected (self->pending)) {
        *msg_p = self->pending;
        self->pending = NULL;
    }
    return 0;
}

//  Feed what we have; read more only when the decoder wants it.
static int
s_read (gi_ctl_t *self, kn_msg_t **msg_p)
{
    while (!*msg_p && self->connected) {
        if (self->rpos == self->rlen) {
            ssize_t n = read (self->fd, self->rbuf, sizeof self->rbuf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                if (n == 0)
                    s_check_connection (self, 0);
                return n < 0 && errno != EAGAIN ? -errno : 0;
            }
            self->rpos = 0;
            self->rlen = (size_t) n;
        }
        long used = kn_frame_dec_feed (self->dec, self->rbuf + self->rpos,
                                       self->rlen - self->rpos);
        if (used < 0) {
            gi_log ("control port: frame length %u out of range: input reset",
                    kn_frame_dec_bad_length (self->dec));
            s_reset (self);
            return 0;
        }
        self->rpos += (size_t) used;
        if (kn_frame_dec_ready (self->dec)) {
            size_t len;
            uint8_t *frame = kn_frame_dec_take (self->dec, &len);
            s_on_frame (self, frame, len, msg_p);
        }
    }
    return 0;
}

int
gi_ctl_io (gi_ctl_t *self, short revents, kn_msg_t **msg_p)
{
    assert (self && msg_p);
    *msg_p = NULL;
    s_check_connection (self, self->connected ? revents : 0);
    if (!self->connected)
        return 0;
    //  Flush first: replies go out before more requests are taken in.
    int rc = self->queued ? s_flush (self) : 0;
    if (rc == 0)
        rc = s_read (self, msg_p);
    return rc;
}
