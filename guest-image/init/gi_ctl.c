/*  gi_ctl - the control port: framed messages, non-blocking.

    Assembly, caps and the output queue come from the channel library
    (ch_asm, ch_io); this module tracks the host's connection, which a
    virtio port reports only through POLLHUP.
*/
#include "gi_ctl.h"
#include "gi_log.h"
#include "ch_asm.h"
#include "ch_outq.h"

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
#define S_OUT_MAX (160u * 1024u * 1024u)

struct _gi_ctl_t {
    int fd;
    uint32_t max_frame;
    int connected;
    ch_asm_t *asm_;             //  incoming frames -> messages, capped
    ch_outq_t *out;             //  output queue
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
        gi_log (CH_LOG_WARN, "ctl.no_sigio", "port=%s reason=\"%s\" poll_ms=%d", path,
                strerror (errno), S_TICK_MS);
    gi_ctl_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    ch_limits_t lim = { .max_frame = max_frame, .max_msg = GI_CTL_MSG_MAX };
    self->asm_ = ch_asm_new (&lim);
    self->out = ch_outq_new (max_frame, S_OUT_MAX);
    ch_uuid4 (self->session);
    return self;
}

//  Forget everything of the last connection.
static void
s_reset (gi_ctl_t *self)
{
    ch_asm_reset (self->asm_);
    self->rpos = self->rlen = 0;
    ch_outq_clear (self->out);
}

void
gi_ctl_destroy (gi_ctl_t **self_p)
{
    assert (self_p);
    gi_ctl_t *self = *self_p;
    if (!self)
        return;
    ch_asm_destroy (&self->asm_);
    ch_outq_destroy (&self->out);
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
    return ch_outq_bytes (self->out);
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
    pfd->events = (short) (POLLIN | (ch_outq_bytes (self->out) ? POLLOUT : 0));
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
        gi_log (CH_LOG_INFO, now ? "ctl.host_connected" : "ctl.host_disconnected", NULL);
    }
}

int
gi_ctl_send (gi_ctl_t *self, ch_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    //  Dropped while nobody listens: QEMU would hand stale bytes to the next host.
    int rc = self->connected ? ch_outq_put (self->out, *msg_p, false) : 0;
    if (rc < 0)
        gi_log (CH_LOG_WARN, "ctl.dropped", "msg_type=%s reason=\"%s\"", ch_msg_type (*msg_p),
            strerror (-rc));
    ch_msg_destroy (msg_p);
    return rc;
}

//  Feed what we have; read more only when the assembler wants it.
static int
s_read (gi_ctl_t *self, ch_msg_t **msg_p)
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
        size_t used = 0;
        int rc = ch_asm_feed (self->asm_, self->rbuf + self->rpos, self->rlen - self->rpos,
                              &used, msg_p);
        self->rpos += used;
        if (rc == -EPROTO) {
            gi_log (CH_LOG_WARN, "ctl.input_reset", "reason=\"%s\"", ch_asm_why (self->asm_));
            s_reset (self);
            return 0;
        }
        if (rc < 0)
            gi_log (CH_LOG_WARN, "ctl.bad_message", "reason=\"%s\"", ch_asm_why (self->asm_));
    }
    return 0;
}

int
gi_ctl_io (gi_ctl_t *self, short revents, ch_msg_t **msg_p)
{
    assert (self && msg_p);
    *msg_p = NULL;
    s_check_connection (self, self->connected ? revents : 0);
    if (!self->connected)
        return 0;
    //  Flush first: replies go out before more requests are taken in.
    int rc = ch_outq_bytes (self->out) ? ch_outq_flush (self->out, self->fd) : 0;
    if (rc == 0)
        rc = s_read (self, msg_p);
    return rc;
}
