/*  gw_chan - the gateway's end of the cellvm channel, non-blocking.

    gw_chan_read does exactly one read() and feeds all of it to the frame
    decoder before returning, so no received byte ever waits in a buffer of
    ours while poll() says the fd is quiet.
*/
#include "gw_chan.h"
#include "kn_frame.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_READ_CHUNK 65536

struct _gw_chan_t {
    int fd;                                     //  owned
    uint32_t max_frame;                         //  cap on one frame, both ways
    size_t max_msg;                             //  cap on JSON + buffers, incoming
    size_t max_out;                             //  cap on queued outgoing bytes
    kn_frame_dec_t *dec;                        //  incoming frames
    kn_msg_t *pending;                          //  JSON seen, waiting for buffers
    size_t pending_size;                        //  bytes of pending so far
    uint8_t *out;                               //  queued outgoing bytes
    size_t out_pos, out_len, out_cap;           //  sent / queued / allocated
    bool dead;                                  //  a write failed: peer gone
    char why [160];                             //  reason of the last bad input
};

gw_chan_t *
gw_chan_new (int fd, uint32_t max_frame, size_t max_msg, size_t max_out)
{
    assert (fd >= 0 && max_frame > 0 && max_msg > 0);
    gw_chan_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    self->max_msg = max_msg;
    self->max_out = max_out ? max_out : 4 * max_msg;
    self->dec = kn_frame_dec_new (max_frame);
    if (!self->dec)
        abort ();
    int flags = fcntl (fd, F_GETFL);
    if (flags >= 0)
        fcntl (fd, F_SETFL, flags | O_NONBLOCK);
    fcntl (fd, F_SETFD, FD_CLOEXEC);
    return self;
}

void
gw_chan_destroy (gw_chan_t **self_p)
{
    assert (self_p);
    gw_chan_t *self = *self_p;
    if (!self)
        return;
    close (self->fd);
    kn_frame_dec_destroy (&self->dec);
    kn_msg_destroy (&self->pending);
    free (self->out);
    free (self);
    *self_p = NULL;
}

void
gw_chan_hunt (gw_chan_t *self)
{
    assert (self);
    kn_frame_dec_hunt (self->dec);
    kn_msg_destroy (&self->pending);
}

int
gw_chan_fd (const gw_chan_t *self)
{
    assert (self);
    return self->fd;
}

bool
gw_chan_wants_write (const gw_chan_t *self)
{
    assert (self);
    return !self->dead && self->out_pos < self->out_len;
}

//  --------------------------------------------------------------------------
//  Outgoing.

//  Make room for n more bytes, compacting first. -ENOBUFS past max_out.
static int
s_reserve (gw_chan_t *self, size_t n)
{
    if (self->out_pos > 0) {
        memmove (self->out, self->out + self->out_pos, self->out_len - self->out_pos);
        self->out_len -= self->out_pos;
        self->out_pos = 0;
    }
    if (n > self->max_out || self->out_len > self->max_out - n)
        return -ENOBUFS;
    if (self->out_len + n <= self->out_cap)
        return 0;
    size_t cap = self->out_cap ? self->out_cap : 65536;
    while (cap < self->out_len + n)
        cap *= 2;
    uint8_t *out = realloc (self->out, cap);
    if (!out)
        abort ();
    self->out = out;
    self->out_cap = cap;
    return 0;
}

static void
s_put_frame (gw_chan_t *self, const void *data, size_t len)
{
    kn_frame_encode_header (self->out + self->out_len, len, self->max_frame);
    memcpy (self->out + self->out_len + KN_FRAME_HDR, data, len);
    self->out_len += KN_FRAME_HDR + len;
}

//  Total bytes msg takes on the wire, or 0 when a frame is out of range.
static size_t
s_wire_size (const gw_chan_t *self, size_t json_len, const kn_msg_t *msg)
{
    size_t total = KN_FRAME_HDR + json_len;
    if (json_len == 0 || json_len > self->max_frame)
        return 0;
    for (size_t i = 0; i < kn_msg_nbuffers (msg); i++) {
        size_t len = 0;
        kn_msg_buffer (msg, i, &len);
        if (len == 0 || len > self->max_frame)
            return 0;                           //  an empty buffer cannot be framed
        total += KN_FRAME_HDR + len;
    }
    return total;
}

int
gw_chan_send (gw_chan_t *self, const kn_msg_t *msg)
{
    assert (self && msg);
    if (self->dead)
        return -EPIPE;
    size_t json_len = 0;
    char *json = kn_msg_encode (msg, &json_len);
    size_t total = s_wire_size (self, json_len, msg);
    int rc = total ? s_reserve (self, total) : -EMSGSIZE;
    if (rc < 0)
        goto done;
    s_put_frame (self, json, json_len);
    for (size_t i = 0; i < kn_msg_nbuffers (msg); i++) {
        size_t len = 0;
        const uint8_t *buf = kn_msg_buffer (msg, i, &len);
        s_put_frame (self, buf, len);
    }
    rc = gw_chan_flush (self);
done:
    free (json);
    return rc;
}

int
gw_chan_flush (gw_chan_t *self)
{
    assert (self);
    while (!self->dead && self->out_pos < self->out_len) {
        ssize_t n = send (self->fd, self->out + self->out_pos,
                          self->out_len - self->out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0 && errno == ENOTSOCK)         //  a pipe or a device, not a socket
            n = write (self->fd, self->out + self->out_pos, self->out_len - self->out_pos);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (n <= 0)
            self->dead = true;
        else
            self->out_pos += (size_t) n;
    }
    if (self->out_pos == self->out_len)
        self->out_pos = self->out_len = 0;
    return self->dead ? -EPIPE : 0;
}

//  --------------------------------------------------------------------------
//  Incoming.

//  One complete frame: the JSON of a message, or one of its buffers. Sets
//  *ready_p to the message once it is complete.
static int
s_take_frame (gw_chan_t *self, uint8_t **frame_p, size_t len, kn_msg_t **ready_p,
              const char **why)
{
    *ready_p = NULL;
    if (self->pending) {
        self->pending_size += len;
        if (self->pending_size > self->max_msg)
            goto too_big;
        kn_msg_add_buffer (self->pending, frame_p, len);
        if (kn_msg_nbuffers (self->pending) == kn_msg_nbuffers_expected (self->pending)) {
            *ready_p = self->pending;
            self->pending = NULL;
        }
        return 0;
    }
    if (len > self->max_msg)
        goto too_big;
    kn_msg_t *msg = NULL;
    if (kn_msg_decode (*frame_p, len, &msg, self->why, sizeof self->why) < 0) {
        *why = self->why;
        return -EBADMSG;
    }
    if (kn_msg_nbuffers_expected (msg) == 0)
        *ready_p = msg;
    else {
        self->pending = msg;
        self->pending_size = len;
    }
    return 0;
too_big:
    snprintf (self->why, sizeof self->why, "message larger than the %zu-byte limit",
              self->max_msg);
    *why = self->why;
    return -EMSGSIZE;
}

//  Feed n bytes through the decoder, handing out every complete message.
static int
s_feed (gw_chan_t *self, const uint8_t *data, size_t n, gw_chan_msg_fn *on_msg,
        void *arg, const char **why)
{
    size_t used = 0;
    while (used < n) {
        long k = kn_frame_dec_feed (self->dec, data + used, n - used);
        if (k < 0) {
            snprintf (self->why, sizeof self->why, "frame length %u is out of range 1..%u",
                      kn_frame_dec_bad_length (self->dec), self->max_frame);
            *why = self->why;
            return -EPROTO;
        }
        used += (size_t) k;
        if (!kn_frame_dec_ready (self->dec))
            continue;
        size_t len = 0;
        uint8_t *frame = kn_frame_dec_take (self->dec, &len);
        kn_msg_t *msg = NULL;
        int rc = s_take_frame (self, &frame, len, &msg, why);
        free (frame);
        if (rc == 0 && msg)
            rc = on_msg (arg, &msg);
        kn_msg_destroy (&msg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int
gw_chan_read (gw_chan_t *self, gw_chan_msg_fn *on_msg, void *arg, const char **why)
{
    assert (self && on_msg && why);
    static const char *eof = "end of stream";
    uint8_t buf [S_READ_CHUNK];
    ssize_t n = read (self->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0) {
        *why = n == 0 ? eof : strerror (errno);
        return -EPIPE;
    }
    return s_feed (self, buf, (size_t) n, on_msg, arg, why);
}
