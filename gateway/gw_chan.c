/*  gw_chan - the gateway's end of the cellvm channel, non-blocking.

    gw_chan_read does exactly one read() and feeds all of it to the frame
    decoder before returning, so no received byte ever waits in a buffer of
    ours while poll() says the fd is quiet.
*/
#include "gw_chan.h"
#include "ch_asm.h"
#include "ch_io.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_READ_CHUNK 65536

struct _gw_chan_t {
    int fd;                                     //  owned
    uint32_t max_frame;                         //  cap on one frame, both ways
    ch_asm_t *asm_;                             //  incoming, capped at max_msg
    ch_outq_t *out;                             //  outgoing, capped at max_out
    bool dead;                                  //  a write failed: peer gone
    char why [192];                             //  reason of the last bad input
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

//  --------------------------------------------------------------------------
//  Incoming.

//  Feed n bytes through the assembler, handing out every complete message.
static int
s_feed (gw_chan_t *self, const uint8_t *data, size_t n, gw_chan_msg_fn *on_msg,
        void *arg, const char **why)
{
    size_t off = 0;
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
        if (msg)
            rc = on_msg (arg, &msg);
        ch_msg_destroy (&msg);
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
