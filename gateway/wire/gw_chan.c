/*  gw_chan - the gateway's end of the cellvm channel, non-blocking.

    gw_chan_read does exactly one read() and feeds all of it to the frame
    decoder before returning, so no received byte ever waits in a buffer of
    ours while poll() says the fd is quiet.
*/
#include "wire/gw_chan.h"
#include "ch_asm.h"
#include "ch_outq.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#define S_READ_CHUNK 65536

struct _gw_chan_t {
    int fd;                                     //  owned
    uint32_t max_frame;                         //  cap on one frame, both ways
    ch_asm_t *asm_;                             //  incoming, capped at max_msg
    ch_outq_t *out;                             //  outgoing, capped at max_out
    bool dead;                                  //  a write failed: peer gone
    char why [192];                             //  reason of the last bad input
    int64_t out_since;                          //  bytes waiting, none taken since (0: none)
    size_t out_pending;                         //  ... how many (queue + socket) at the last look
    int64_t in_since;                           //  a message begun, none ended since (0: none)
};

#define GW_CHAN_RAW_MIN 1024     //  smaller frames are parsed as usual

gw_chan_t *
gw_chan_new (int fd, uint32_t max_frame, size_t max_msg, size_t max_out)
{
    assert (fd >= 0 && max_frame > 0 && max_msg > 0);
    gw_chan_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    ch_limits_t lim = { .max_frame = max_frame, .max_msg = max_msg };
    self->asm_ = ch_asm_new (&lim);
    //  Large stream texts go to the client as they came: validated, not
    //  parsed and dumped again (the bulk of the gateway's work on output).
    ch_asm_set_raw_stream (self->asm_, GW_CHAN_RAW_MIN);
    self->out = ch_outq_new (max_frame, max_out ? max_out : 4 * max_msg);
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
    ch_asm_destroy (&self->asm_);
    ch_outq_destroy (&self->out);
    free (self);
    *self_p = NULL;
}

void
gw_chan_hunt (gw_chan_t *self)
{
    assert (self);
    ch_asm_hunt (self->asm_);
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
    return !self->dead && ch_outq_bytes (self->out) > 0;
}

//  --------------------------------------------------------------------------
//  Outgoing.

int
gw_chan_send (gw_chan_t *self, const ch_msg_t *msg)
{
    assert (self && msg);
    if (self->dead)
        return -EPIPE;
    int rc = ch_outq_put (self->out, msg, false);
    return rc < 0 ? rc : gw_chan_flush (self);
}

int
gw_chan_flush (gw_chan_t *self)
{
    assert (self);
    if (!self->dead && ch_outq_flush (self->out, self->fd) < 0)
        self->dead = true;
    return self->dead ? -EPIPE : 0;
}

//  Bytes sent that the peer has not read: our queue, and what sits in the
//  socket (SIOCOUTQ: a unix socket counts what the peer has not taken yet).
static size_t
s_unread (const gw_chan_t *self)
{
    int insock = 0;
    if (ioctl (self->fd, SIOCOUTQ, &insock) < 0 || insock < 0)
        insock = 0;
    return ch_outq_bytes (self->out) + (size_t) insock;
}

//  --------------------------------------------------------------------------
//  Incoming.

//  Feed n bytes through the assembler, handing out every complete message.
//  A read that ended inside a message starts (or, when a message ended in
//  it, restarts) the clock of gw_chan_stalled; one that ended between
//  messages stops it.
static int
s_feed (gw_chan_t *self, const uint8_t *data, size_t n, gw_chan_msg_fn *on_msg,
        void *arg, const char **why)
{
    size_t off = 0;
    bool ended = false, partial = false;
    while (off < n) {
        size_t used = 0;
        ch_msg_t *msg = NULL;
        int rc = ch_asm_feed (self->asm_, data + off, n - off, &used, &msg);
        off += used;
        if (rc < 0) {
            snprintf (self->why, sizeof self->why, "%s", ch_asm_why (self->asm_));
            *why = self->why;
            return rc;
        }
        partial = msg == NULL;
        ended |= msg != NULL;
        if (msg)
            rc = on_msg (arg, &msg);
        ch_msg_destroy (&msg);
        if (rc != 0)
            return rc;
    }
    if (!partial)
        self->in_since = 0;
    else if (ended || !self->in_since)
        self->in_since = ch_clock_mono_ms ();
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

int64_t
gw_chan_stalled (gw_chan_t *self, char *why, size_t whylen)
{
    assert (self);
    int64_t now = ch_clock_mono_ms ();
    size_t unread = self->dead ? 0 : s_unread (self);
    if (unread == 0)
        self->out_since = 0;
    else if (unread < self->out_pending || !self->out_since)
        self->out_since = now;                  //  the peer took some: a new wait
    self->out_pending = unread;
    int64_t out = self->out_since ? now - self->out_since : 0;
    int64_t in = self->in_since ? now - self->in_since : 0;
    if (why && out >= in && out > 0)
        snprintf (why, whylen, "it stopped reading its channel: %zu bytes sent to it have "
                  "waited %.1f s", unread, (double) out / 1000);
    else if (why && in > 0)
        snprintf (why, whylen, "it began a message and sent nothing to complete it for %.1f s",
                  (double) in / 1000);
    return out > in ? out : in;
}

void
gw_chan_stall_reset (gw_chan_t *self)
{
    assert (self);
    self->out_since = self->in_since = 0;
    self->out_pending = 0;
}
