/*  gw_init - the host side of the guest init's control port. */
#include "gw_init.h"
#include "gw_log.h"
#include "kn_frame.h"

#include <czmq.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef struct s_node_t {
    kn_msg_t *msg;
    struct s_node_t *next;
} s_node_t;

struct _gw_init_t {
    int fd;
    uint32_t max_frame;
    kn_frame_dec_t *dec;
    kn_msg_t *pending;          //  envelope waiting for its buffers
    s_node_t *head, *tail;      //  read during a call, not yet pumped
    char session [37];
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
    self->dec = kn_frame_dec_new (max_frame);
    kn_uuid4 (self->session);
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
        kn_msg_destroy (&n->msg);
        free (n);
    }
    kn_msg_destroy (&self->pending);
    kn_frame_dec_destroy (&self->dec);
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

//  Write everything, waiting on POLLOUT (the fd is non-blocking).
static int
s_write_all (int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write (fd, p, n);
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            if (poll (&pf, 1, 5000) <= 0)
                return -ETIMEDOUT;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -EPIPE;
        p += w;
        n -= (size_t) w;
    }
    return 0;
}

static int
s_write_frame (gw_init_t *self, const void *data, size_t len)
{
    uint8_t hdr [KN_FRAME_HDR];
    if (kn_frame_encode_header (hdr, len, self->max_frame) < 0)
        return -EMSGSIZE;
    int rc = s_write_all (self->fd, hdr, sizeof hdr);
    return rc ? rc : s_write_all (self->fd, data, len);
}

int
gw_init_send (gw_init_t *self, const char *msg_type, json_t **content_p,
              const uint8_t *buf, size_t buflen, char *id_out)
{
    assert (self && msg_type);
    kn_msg_t *msg = kn_msg_new (KN_CH_CELLVM, msg_type, NULL, content_p, self->session);
    if (buf && buflen) {
        uint8_t *copy = malloc (buflen);
        if (!copy)
            abort ();
        memcpy (copy, buf, buflen);
        kn_msg_add_buffer (msg, &copy, buflen);
    }
    if (id_out)
        strcpy (id_out, kn_msg_id (msg));
    size_t len;
    char *text = kn_msg_encode (msg, &len);
    int rc = s_write_frame (self, text, len);
    if (rc == 0 && buf && buflen)
        rc = s_write_frame (self, buf, buflen);
    free (text);
    kn_msg_destroy (&msg);
    return rc;
}

//  Feed bytes; a complete message comes out in *msg_p.
static int
s_feed (gw_init_t *self, const uint8_t *data, size_t n, size_t *used, kn_msg_t **msg_p)
{
    while (*used < n && !*msg_p) {
        long k = kn_frame_dec_feed (self->dec, data + *used, n - *used);
        if (k < 0)
            return -EPROTO;
        *used += (size_t) k;
        if (!kn_frame_dec_ready (self->dec))
            continue;
        size_t len;
        uint8_t *frame = kn_frame_dec_take (self->dec, &len);
        char why [128];
        if (self->pending)
            kn_msg_add_buffer (self->pending, &frame, len);
        else if (kn_msg_decode (frame, len, &self->pending, why, sizeof why) < 0)
            gw_log (GW_LOG_WARN, "init.drop", "reason=\"%s\"", why);
        free (frame);
        if (self->pending && kn_msg_nbuffers (self->pending)
                             == kn_msg_nbuffers_expected (self->pending)) {
            *msg_p = self->pending;
            self->pending = NULL;
        }
    }
    return 0;
}

//  One message from the fd, without blocking: 0 + msg, -EAGAIN, -EPIPE,
//  -EPROTO. Bytes past the message stay in rbuf for the next call.
static int
s_read_one (gw_init_t *self, kn_msg_t **msg_p)
{
    *msg_p = NULL;
    while (!*msg_p) {
        if (self->rpos == self->rlen) {
            ssize_t r = read (self->fd, self->rbuf, sizeof self->rbuf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && errno == EAGAIN)
                return -EAGAIN;
            if (r <= 0)
                return -EPIPE;
            self->rpos = 0;
            self->rlen = (size_t) r;
        }
        size_t used = 0;
        int rc = s_feed (self, self->rbuf + self->rpos, self->rlen - self->rpos, &used, msg_p);
        self->rpos += used;
        if (rc < 0)
            return rc;
    }
    return 0;
}

int
gw_init_pump (gw_init_t *self, kn_msg_t **msg_p)
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
s_keep (gw_init_t *self, kn_msg_t **msg_p)
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
gw_init_wait (gw_init_t *self, const char *id, int timeout_ms, kn_msg_t **reply_p)
{
    assert (self && id && reply_p);
    *reply_p = NULL;
    int64_t deadline = zclock_mono () + timeout_ms;
    while (true) {
        kn_msg_t *msg = NULL;
        int rc = s_read_one (self, &msg);
        if (rc == 0) {
            const char *pid = json_string_value (json_object_get (kn_msg_parent (msg), "msg_id"));
            if (pid && strcmp (pid, id) == 0) {
                *reply_p = msg;
                return 0;
            }
            s_keep (self, &msg);
            continue;
        }
        int64_t left = deadline - zclock_mono ();
        if (rc != -EAGAIN || left <= 0)
            return rc == -EAGAIN ? -ETIMEDOUT : rc;
        struct pollfd pf = { self->fd, POLLIN, 0 };
        poll (&pf, 1, (int) left);
    }
}

int
gw_init_call (gw_init_t *self, const char *msg_type, json_t **content_p,
              const uint8_t *buf, size_t buflen, int timeout_ms, kn_msg_t **reply_p)
{
    assert (self && reply_p);
    char id [37];
    *reply_p = NULL;
    int rc = gw_init_send (self, msg_type, content_p, buf, buflen, id);
    return rc < 0 ? rc : gw_init_wait (self, id, timeout_ms, reply_p);
}
