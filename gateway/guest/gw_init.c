/*  gw_init - the host side of the guest init's control port.

    Assembly and caps (ch_asm) and the output queue (ch_outq) are the
    channel library's. Sending never blocks: a request is queued and
    written as the port takes it (gw_init_flush when the fd is writable).
*/
#include "guest/gw_init.h"
#include "base/gw_log.h"
#include "ch_asm.h"
#include "ch_outq.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct s_node_t {
    ch_msg_t *msg;
    struct s_node_t *next;
} s_node_t;

struct _gw_init_t {
    int fd;
    uint32_t max_frame;
    ch_asm_t *asm_;             //  from init, capped at GW_INIT_MAX_MSG
    ch_outq_t *out;             //  to init, capped at GW_INIT_MAX_OUT
    bool dead;                  //  a write failed: the port is gone
    s_node_t *head, *tail;      //  read during a call, not yet pumped
    char session [37];
    char why [192];             //  the last bad input, "" none
    size_t budget;              //  bytes gw_init_pump may still read, 0: no limit
    bool budgeted;
    uint8_t rbuf [65536];       //  read but not yet fed
    size_t rpos, rlen;
};

gw_init_t *
gw_init_new (int fd, uint32_t max_frame)
{
    gw_init_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_frame = max_frame;
    ch_limits_t lim = { .max_frame = max_frame, .max_msg = GW_INIT_MAX_MSG,
                        .max_json = GW_INIT_MAX_JSON };
    self->asm_ = ch_asm_new (&lim);
    self->out = ch_outq_new (max_frame, GW_INIT_MAX_OUT);
    ch_uuid4 (self->session);
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
    return self;
}

void
gw_init_destroy (gw_init_t **self_p)
{
    assert (self_p);
    gw_init_t *self = *self_p;
    if (!self)
        return;
    while (self->head) {
        s_node_t *n = self->head;
        self->head = n->next;
        ch_msg_destroy (&n->msg);
        free (n);
    }
    ch_asm_destroy (&self->asm_);
    ch_outq_destroy (&self->out);
    if (self->fd >= 0)
        close (self->fd);
    free (self);
    *self_p = NULL;
}

int
gw_init_fd (const gw_init_t *self)
{
    return self->fd;
}

void
gw_init_set_budget (gw_init_t *self, size_t bytes)
{
    assert (self);
    self->budget = bytes;
    self->budgeted = bytes > 0;
}

const char *
gw_init_why (const gw_init_t *self)
{
    assert (self);
    return self->why [0] ? self->why : "no reason recorded";
}

bool
gw_init_wants_write (const gw_init_t *self)
{
    assert (self);
    return !self->dead && ch_outq_bytes (self->out) > 0;
}

int
gw_init_flush (gw_init_t *self)
{
    assert (self);
    if (!self->dead && ch_outq_flush (self->out, self->fd) < 0)
        self->dead = true;
    return self->dead ? -EPIPE : 0;
}

int
gw_init_send (gw_init_t *self, const char *msg_type, json_t **content_p,
              const uint8_t *buf, size_t buflen, char *id_out)
{
    assert (self && msg_type);
    ch_msg_t *msg = ch_msg_new (CH_CELLVM, msg_type, NULL, content_p, self->session);
    if (buf && buflen) {
        uint8_t *copy = malloc (buflen);
        if (!copy)
            abort ();
        memcpy (copy, buf, buflen);
        ch_msg_add_buffer (msg, &copy, buflen);
    }
    if (id_out)
        strcpy (id_out, ch_msg_id (msg));
    int rc = self->dead ? -EPIPE : ch_outq_put (self->out, msg, false);
    ch_msg_destroy (&msg);
    return rc < 0 ? rc : gw_init_flush (self);
}

//  One message from the fd, without blocking: 0 + msg, -EAGAIN, -EPIPE,
//  -EPROTO. Bytes past the message stay in rbuf for the next call.
static int
s_read_one (gw_init_t *self, ch_msg_t **msg_p)
{
    *msg_p = NULL;
    while (!*msg_p) {
        if (self->rpos == self->rlen) {
            if (self->budgeted && self->budget == 0)
                return -EAGAIN;                 //  the rest on the next turn (the fd stays readable)
            ssize_t r = read (self->fd, self->rbuf, sizeof self->rbuf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && errno == EAGAIN)
                return -EAGAIN;
            if (r <= 0)
                return -EPIPE;
            self->rpos = 0;
            self->rlen = (size_t) r;
            self->budget -= self->budgeted ? (self->budget < (size_t) r ? self->budget
                                                                         : (size_t) r) : 0;
        }
        size_t used = 0;
        int rc = ch_asm_feed (self->asm_, self->rbuf + self->rpos, self->rlen - self->rpos,
                              &used, msg_p);
        self->rpos += used;
        if (rc == -EPROTO || rc == -EMSGSIZE) {
            snprintf (self->why, sizeof self->why, "%s", ch_asm_why (self->asm_));
            gw_log (GW_LOG_WARN, "init.bad_input", "reason=\"%s\"", self->why);
            return -EPROTO;                     //  init breaks its own caps: distrust it
        }
        if (rc < 0)
            gw_log (GW_LOG_WARN, "init.drop", "reason=\"%s\"", ch_asm_why (self->asm_));
    }
    return 0;
}

int
gw_init_pump (gw_init_t *self, ch_msg_t **msg_p)
{
    assert (self && msg_p);
    if (self->head) {
        s_node_t *n = self->head;
        if (!(self->head = n->next))
            self->tail = NULL;
        *msg_p = n->msg;
        free (n);
        return 0;
    }
    return s_read_one (self, msg_p);
}

static void
s_keep (gw_init_t *self, ch_msg_t **msg_p)
{
    s_node_t *n = calloc (1, sizeof *n);
    if (!n)
        abort ();
    n->msg = *msg_p;
    *msg_p = NULL;
    if (self->tail)
        self->tail->next = n;
    else
        self->head = n;
    self->tail = n;
}

int
gw_init_wait_reply (gw_init_t *self, const char *id, int timeout_ms, ch_msg_t **reply_p)
{
    assert (self && id && reply_p);
    *reply_p = NULL;
    gw_init_set_budget (self, 0);               //  a driver that may wait reads all
    int64_t deadline = ch_clock_mono_ms () + timeout_ms;
    while (true) {
        if (gw_init_flush (self) < 0)
            return -EPIPE;
        ch_msg_t *msg = NULL;
        int rc = s_read_one (self, &msg);
        if (rc == 0) {
            if (strcmp (ch_msg_parent_id (msg), id) == 0) {
                *reply_p = msg;
                return 0;
            }
            s_keep (self, &msg);
            continue;
        }
        int64_t left = deadline - ch_clock_mono_ms ();
        if (rc != -EAGAIN || left <= 0)
            return rc == -EAGAIN ? -ETIMEDOUT : rc;
        short ev = (short) (POLLIN | (gw_init_wants_write (self) ? POLLOUT : 0));
        struct pollfd pf = { self->fd, ev, 0 };
        poll (&pf, 1, (int) left);
    }
}

int
gw_init_call (gw_init_t *self, const char *msg_type, json_t **content_p,
              const uint8_t *buf, size_t buflen, int timeout_ms, ch_msg_t **reply_p)
{
    assert (self && reply_p);
    char id [37];
    *reply_p = NULL;
    int rc = gw_init_send (self, msg_type, content_p, buf, buflen, id);
    return rc < 0 ? rc : gw_init_wait_reply (self, id, timeout_ms, reply_p);
}
