/*  gw_rcomm - cellvm-remote's comm port (see gw_rcomm.h).
*/
#include "cli/gw_rcomm.h"
#include "base/gw_log.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_ACCEPTS_PER_STEP 32                   //  so one step never spins on a flood

typedef struct {
    int fd;                                     //  -1: free
    uint64_t seq;                               //  order of arrival: the oldest goes first
    int64_t deadline_ms;                        //  closed unanswered then
    size_t len;
    char buf [GW_EGREPLY_REQ_MAX + 1];          //  one byte more: so "too long" is seen
} s_conn_t;

struct _gw_rcomm_t {
    int listen_fd;                              //  -1 once closed
    uint64_t seq;
    s_conn_t conns [GW_RCOMM_CONNS];
};

gw_rcomm_t *
gw_rcomm_new (int listen_fd)
{
    assert (listen_fd >= 0);
    gw_rcomm_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->listen_fd = listen_fd;
    //  accept4 until EAGAIN: the listening socket itself must not block.
    fcntl (listen_fd, F_SETFL, fcntl (listen_fd, F_GETFL) | O_NONBLOCK);
    for (int i = 0; i < GW_RCOMM_CONNS; i++)
        self->conns [i].fd = -1;
    return self;
}

static void
s_drop (s_conn_t *c, const char *why)
{
    if (c->fd < 0)
        return;
    if (why)
        gw_log (GW_LOG_WARN, "remote.comm_dropped", "reason=\"%s\" bytes=%zu", why, c->len);
    close (c->fd);
    c->fd = -1;
    c->len = 0;
}

void
gw_rcomm_close (gw_rcomm_t *self)
{
    assert (self);
    for (int i = 0; i < GW_RCOMM_CONNS; i++)
        s_drop (&self->conns [i], NULL);
    if (self->listen_fd >= 0)
        close (self->listen_fd);
    self->listen_fd = -1;
}

void
gw_rcomm_destroy (gw_rcomm_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    gw_rcomm_close (*self_p);
    free (*self_p);
    *self_p = NULL;
}

int
gw_rcomm_pollfds (gw_rcomm_t *self, struct pollfd *pfds, int *timeout_ms)
{
    assert (self && pfds && timeout_ms);
    int n = 0;
    int64_t now = ch_clock_mono_ms ();
    if (self->listen_fd >= 0)
        pfds [n++] = (struct pollfd) { .fd = self->listen_fd, .events = POLLIN };
    for (int i = 0; i < GW_RCOMM_CONNS; i++) {
        s_conn_t *c = &self->conns [i];
        if (c->fd < 0)
            continue;
        pfds [n++] = (struct pollfd) { .fd = c->fd, .events = POLLIN };
        int64_t left = c->deadline_ms > now ? c->deadline_ms - now : 0;
        if (*timeout_ms < 0 || left < *timeout_ms)
            *timeout_ms = (int) left;
    }
    return n;
}

//  A free slot, or the oldest connection's, pushed out.
static s_conn_t *
s_slot (gw_rcomm_t *self)
{
    s_conn_t *oldest = NULL;
    for (int i = 0; i < GW_RCOMM_CONNS; i++) {
        s_conn_t *c = &self->conns [i];
        if (c->fd < 0)
            return c;
        if (!oldest || c->seq < oldest->seq)
            oldest = c;
    }
    s_drop (oldest, "too many open connections: the oldest is closed");
    return oldest;
}

static bool
s_full (const gw_rcomm_t *self)
{
    for (int i = 0; i < GW_RCOMM_CONNS; i++)
        if (self->conns [i].fd < 0)
            return false;
    return true;
}

//  Into free slots; when none is free, one only (pushing out the oldest), so
//  every connection gets a turn to be read before a flood can push it out.
static void
s_accept (gw_rcomm_t *self)
{
    for (int i = 0; i < S_ACCEPTS_PER_STEP && self->listen_fd >= 0; i++) {
        if (i > 0 && s_full (self))
            return;
        int fd = accept4 (self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;                             //  EAGAIN, or a peer gone already
        s_conn_t *c = s_slot (self);
        c->fd = fd;
        c->len = 0;
        c->seq = ++self->seq;
        c->deadline_ms = ch_clock_mono_ms () + GW_RCOMM_READ_MS;
    }
}

//  Read what c has; at its end, its request into *req. 1 when one is there.
static int
s_read (s_conn_t *c, gw_egreq_t *req)
{
    for (;;) {
        ssize_t got = recv (c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (got < 0) {
            s_drop (c, "read error");
            return 0;
        }
        if (got > 0 && (c->len += (size_t) got) < sizeof c->buf)
            continue;
        char err [128];
        int rc = got > 0 ? -EMSGSIZE : gw_egreply_request (c->buf, c->len, req, err, sizeof err);
        if (rc == -EMSGSIZE)
            snprintf (err, sizeof err, "request of over %d bytes", GW_EGREPLY_REQ_MAX);
        s_drop (c, rc < 0 ? err : NULL);
        return rc == 0;
    }
}

int
gw_rcomm_step (gw_rcomm_t *self, const struct pollfd *pfds, int n, gw_egreq_t *reqs, int cap)
{
    assert (self && (pfds || !n) && reqs && cap > 0);
    int got = 0;
    bool listen_ready = false;
    for (int k = 0; k < n; k++) {
        if (!pfds [k].revents)
            continue;
        if (pfds [k].fd == self->listen_fd) {
            listen_ready = true;
            continue;
        }
        for (int i = 0; i < GW_RCOMM_CONNS && got < cap; i++)
            if (self->conns [i].fd == pfds [k].fd)
                got += s_read (&self->conns [i], &reqs [got]);
    }
    if (listen_ready)
        s_accept (self);
    int64_t now = ch_clock_mono_ms ();
    for (int i = 0; i < GW_RCOMM_CONNS; i++)
        if (self->conns [i].fd >= 0 && self->conns [i].deadline_ms <= now)
            s_drop (&self->conns [i], "not finished in time");
    return got;
}
