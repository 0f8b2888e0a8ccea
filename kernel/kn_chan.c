/*  kn_chan - blocking message I/O for the cellvm channel on a file descriptor.

    Framing, assembly and caps come from the channel library (ch_asm,
    ch_io); this module adds what the kernel needs around them: one writer
    at a time, no writes from a cell's fork() child, the sync marker before
    each hello on a port, and waiting out a port with no host connected.
*/
#include "kn_chan.h"
#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_io.h"
#include "kn_log.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_RBUF 65536
//  A message from the driver (JSON + buffers) may span several frames: a
//  cellvm_put chunk is one buffer, so allow a few frames' worth.
#define S_MSG_FRAMES 4
#define S_SMALL 4096            //  pieces up to this size are copied together ...
#define S_STAGE 16384           //  ... into this much room

struct _kn_chan_t {
    int fd;
    uint32_t max_frame;
    pthread_mutex_t wlock;      //  one writer at a time, whole messages
    int wdead;                  //  a write failed: the peer is gone
    ch_asm_t *asm_;             //  incoming frames -> messages
    uint8_t rbuf [S_RBUF];      //  bytes read but not yet fed
    size_t rpos, rlen;
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
    ch_limits_t lim = { .max_frame = max_frame,
                        .max_msg = (size_t) max_frame * S_MSG_FRAMES };
    self->asm_ = ch_asm_new (&lim);
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
    ch_asm_destroy (&self->asm_);
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
    ch_asm_reset (self->asm_);
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

int
kn_chan_send (kn_chan_t *self, ch_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    //  A cell that called fork(): the child must never write into the stream
    //  its parent is writing, or frames interleave. Checked before the lock,
    //  which a thread of the parent may have held when the child was made.
    if (getpid () != self->owner) {
        ch_msg_destroy (msg_p);
        return -EPIPE;
    }
    int rc = 0;
    pthread_mutex_lock (&self->wlock);
    if (self->wdead)
        rc = -EPIPE;
    //  On a port a hello follows a sync marker, so the host can find it even
    //  after a predecessor died mid-frame (docs/channel.md).
    bool sync = self->device && ch_msg_channel (*msg_p) == CH_CELLVM
             && strcmp (ch_msg_type (*msg_p), "hello") == 0;
    if (rc == 0)
        rc = ch_write_msg (self->fd, *msg_p, self->max_frame, sync, -1);
    if (rc == -EPIPE)
        self->wdead = 1;
    pthread_mutex_unlock (&self->wlock);
    if (rc == -EMSGSIZE)
        kn_log (CH_LOG_WARN, "chan.drop", "msg_type=%s reason=\"a frame is over the "
                "%u-byte limit\"", ch_msg_type (*msg_p), self->max_frame);
    ch_msg_destroy (msg_p);
    return rc;
}

//  Frame header(s) for a JSON of total bytes and an optional buffer into v
//  (hdr: 8 bytes). Returns the iovec count, or -EMSGSIZE (logged).
static int
s_frames (kn_chan_t *self, const char *msg_type, const struct iovec *iov, int n,
          const struct iovec *buf, uint8_t *hdr, struct iovec *v)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov [i].iov_len;
    if (ch_frame_encode_header (hdr, total, self->max_frame) < 0
    ||  (buf && ch_frame_encode_header (hdr + CH_FRAME_HDR, buf->iov_len, self->max_frame) < 0)) {
        kn_log (CH_LOG_WARN, "chan.drop", "msg_type=%s bytes=%zu reason=\"a frame is over the "
                "%u-byte limit\"", msg_type, total + (buf ? buf->iov_len : 0), self->max_frame);
        return -EMSGSIZE;
    }
    int k = 0;
    v [k++] = (struct iovec) { hdr, CH_FRAME_HDR };
    memcpy (v + k, iov, (size_t) n * sizeof *iov);
    k += n;
    if (buf) {
        v [k++] = (struct iovec) { hdr + CH_FRAME_HDR, CH_FRAME_HDR };
        v [k++] = *buf;
    }
    return k;
}

//  Copy runs of small pieces of v into stage (cap bytes), one piece each:
//  a virtio port takes every piece of a writev as a write of its own, with
//  its own buffer and notification of the host. Returns the new count.
static int
s_coalesce (struct iovec *v, int k, uint8_t *stage, size_t cap)
{
    int n = 0;
    size_t used = 0;
    for (int i = 0; i < k; i++) {
        size_t len = v [i].iov_len;
        if (len > S_SMALL || used + len > cap) {
            v [n++] = v [i];
            continue;
        }
        memcpy (stage + used, v [i].iov_base, len);
        if (n > 0 && (uint8_t *) v [n - 1].iov_base + v [n - 1].iov_len == stage + used)
            v [n - 1].iov_len += len;
        else
            v [n++] = (struct iovec) { stage + used, len };
        used += len;
    }
    return n;
}

int
kn_chan_send_json_buf (kn_chan_t *self, const char *msg_type, const struct iovec *iov, int n,
                       const struct iovec *buf)
{
    assert (self && iov && n > 0 && n < 16);
    uint8_t hdr [2 * CH_FRAME_HDR], stage [S_STAGE];
    struct iovec v [19];
    int k = s_frames (self, msg_type, iov, n, buf, hdr, v);
    if (k < 0)
        return k;
    k = s_coalesce (v, k, stage, sizeof stage);
    if (getpid () != self->owner)
        return -EPIPE;              //  a cell's fork (see kn_chan_send)
    int rc = 0;
    pthread_mutex_lock (&self->wlock);
    if (self->wdead)
        rc = -EPIPE;
    if (rc == 0)
        rc = ch_write_all (self->fd, v, k, -1);
    if (rc == -EPIPE)
        self->wdead = 1;
    pthread_mutex_unlock (&self->wlock);
    return rc;
}

int
kn_chan_recv (kn_chan_t *self, ch_msg_t **msg_p, char *err, size_t errlen)
{
    assert (self && msg_p);
    *msg_p = NULL;
    while (!*msg_p) {
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
        size_t used = 0;
        int rc = ch_asm_feed (self->asm_, self->rbuf + self->rpos, self->rlen - self->rpos,
                              &used, msg_p);
        self->rpos += used;
        if (rc < 0) {
            snprintf (err, errlen, "%s", ch_asm_why (self->asm_));
            return rc == -EMSGSIZE ? -EBADMSG : rc;
        }
    }
    return 0;
}
