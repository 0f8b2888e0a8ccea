/*  kn_chan - blocking message I/O for the cellvm channel on a file descriptor. */
#include "kn_chan.h"
#include "kn_frame.h"
#include "kn_log.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define S_RBUF 65536

struct _kn_chan_t {
    int fd;
    uint32_t max_frame;
    pthread_mutex_t wlock;      //  one writer at a time, whole messages
    int wdead;                  //  a write failed: the peer is gone
    kn_frame_dec_t *dec;
    uint8_t rbuf [S_RBUF];      //  bytes read but not yet fed
    size_t rpos, rlen;
    kn_msg_t *pending;          //  JSON seen, waiting for its buffers
    int device;                 //  0 bytes read = host not connected
    pid_t owner;                //  only this process may write: not a cell's fork
};

kn_chan_t *
kn_chan_new (int fd, uint32_t max_frame)
{
    kn_chan_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    self->dec = kn_frame_dec_new (max_frame);
    self->owner = getpid ();
    pthread_mutex_init (&self->wlock, NULL);
    return self;
}

void
kn_chan_destroy (kn_chan_t **self_p)
{
    assert (self_p);
    kn_chan_t *self = *self_p;
    if (!self)
        return;
    kn_frame_dec_destroy (&self->dec);
    kn_msg_destroy (&self->pending);
    pthread_mutex_destroy (&self->wlock);
    free (self);
    *self_p = NULL;
}

void
kn_chan_set_device_mode (kn_chan_t *self, int on)
{
    self->device = on;
}

//  The host went away: whatever it was sending is lost; start clean.
static void
s_wait_for_host (kn_chan_t *self)
{
    kn_frame_dec_destroy (&self->dec);
    self->dec = kn_frame_dec_new (self->max_frame);
    kn_msg_destroy (&self->pending);
    struct pollfd p = { self->fd, POLLIN, 0 };
    poll (&p, 1, 20);   //  POLLHUP while disconnected: sleep a little anyway
    if (p.revents & POLLHUP)
        usleep (20 * 1000);
}

uint32_t
kn_chan_max_frame (const kn_chan_t *self)
{
    return self->max_frame;
}

//  Write all of iov, riding out short writes and EINTR.
static int
s_write_all (int fd, struct iovec *iov, int iovcnt)
{
    while (iovcnt > 0) {
        ssize_t n = writev (fd, iov, iovcnt);
        if (n < 0 && errno == EINTR)
            continue;
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

static int
s_send_frame (kn_chan_t *self, const void *data, size_t len)
{
    uint8_t hdr [KN_FRAME_HDR];
    if (kn_frame_encode_header (hdr, len, self->max_frame) < 0)
        return -EMSGSIZE;
    struct iovec iov [2] = { { hdr, sizeof hdr }, { (void *) data, len } };
    return s_write_all (self->fd, iov, 2);
}

int
kn_chan_send (kn_chan_t *self, kn_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    size_t len;
    char *text = kn_msg_encode (*msg_p, &len);
    int rc = 0;
    pthread_mutex_lock (&self->wlock);
    //  Check every size first: a message is sent whole or not at all.
    if (len > self->max_frame)
        rc = -EMSGSIZE;
    for (size_t i = 0; rc == 0 && i < kn_msg_nbuffers (*msg_p); i++) {
        size_t blen;
        kn_msg_buffer (*msg_p, i, &blen);
        if (blen == 0 || blen > self->max_frame)
            rc = -EMSGSIZE;
    }
    if (rc == 0 && self->wdead)
        rc = -EPIPE;
    //  A cell that called fork(): the child must never write into the stream
    //  its parent is writing, or frames interleave.
    if (rc == 0 && getpid () != self->owner)
        rc = -EPIPE;
    //  On a port a hello follows a sync marker, so the host can find it even
    //  after a predecessor died mid-frame (docs/channel.md).
    if (rc == 0 && self->device && kn_msg_channel (*msg_p) == KN_CH_CELLVM
    &&  strcmp (kn_msg_type (*msg_p), "hello") == 0) {
        struct iovec iov = { (void *) KN_FRAME_SYNC, KN_FRAME_SYNC_LEN };
        rc = s_write_all (self->fd, &iov, 1);
    }
    if (rc == 0)
        rc = s_send_frame (self, text, len);
    for (size_t i = 0; rc == 0 && i < kn_msg_nbuffers (*msg_p); i++) {
        size_t blen;
        const uint8_t *b = kn_msg_buffer (*msg_p, i, &blen);
        rc = s_send_frame (self, b, blen);
    }
    if (rc == -EPIPE)
        self->wdead = 1;
    pthread_mutex_unlock (&self->wlock);
    if (rc == -EMSGSIZE)
        kn_log (KN_LOG_WARN, "chan.drop", "msg_type=%s bytes=%zu reason=\"message over the "
                "%u-byte frame limit\"", kn_msg_type (*msg_p), len, self->max_frame);
    free (text);
    kn_msg_destroy (msg_p);
    return rc;
}

//  Next whole frame from the stream: 0, -EPIPE or -EPROTO.
static int
s_next_frame (kn_chan_t *self, uint8_t **frame, size_t *len)
{
    while (!kn_frame_dec_ready (self->dec)) {
        if (self->rpos == self->rlen) {
            ssize_t n = read (self->fd, self->rbuf, sizeof self->rbuf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0 && self->device) {
                s_wait_for_host (self);
                continue;
            }
            if (n <= 0)
                return -EPIPE;
            self->rpos = 0;
            self->rlen = (size_t) n;
        }
        long used = kn_frame_dec_feed (self->dec, self->rbuf + self->rpos,
                                       self->rlen - self->rpos);
        if (used < 0)
            return -EPROTO;
        self->rpos += (size_t) used;
    }
    *frame = kn_frame_dec_take (self->dec, len);
    return 0;
}

int
kn_chan_recv (kn_chan_t *self, kn_msg_t **msg_p, char *err, size_t errlen)
{
    assert (self && msg_p);
    *msg_p = NULL;
    while (1) {
        uint8_t *frame = NULL;
        size_t len = 0;
        int rc = s_next_frame (self, &frame, &len);
        if (rc == -EPROTO)
            snprintf (err, errlen, "frame length %u is out of range 1..%u",
                      kn_frame_dec_bad_length (self->dec), self->max_frame);
        if (rc < 0)
            return rc;
        if (self->pending) {
            kn_msg_add_buffer (self->pending, &frame, len);
        }
        else {
            rc = kn_msg_decode (frame, len, &self->pending, err, errlen);
            free (frame);
            if (rc < 0)
                return rc;
        }
        if (kn_msg_nbuffers (self->pending) == kn_msg_nbuffers_expected (self->pending)) {
            *msg_p = self->pending;
            self->pending = NULL;
            return 0;
        }
    }
}
