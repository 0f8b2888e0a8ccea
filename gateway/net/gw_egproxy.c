/*  gw_egproxy - a session's egress point on the host: the port, the
    frames, the relay. One connection's decision is gw_egstream.c. */
#include "net/gw_egproxy_int.h"
#include "base/gw_log.h"
#include "ch_clock.h"
#include "ch_frame.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define S_OUTQ_MAX (4u << 20)                   //  frames for a guest that reads slowly
#define S_ROOM (CH_MUX_DATA_MAX + 4096u)        //  ... room kept for control frames
#define S_CREDIT_BATCH (64u * 1024u)
#define S_PORT_BUDGET (1u << 20)                //  bytes read from the port per event
#define S_STREAM_BUDGET (256u * 1024u)          //  bytes read from one upstream per event
enum { S_TAG_PORT, S_TAG_TIMER, S_TAG_WORKER, S_TAG_STREAM };

static int
s_epoll_add (int epfd, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = { .events = events, .data.u64 = tag };
    return epoll_ctl (epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

static int
s_open_fds (gw_egproxy_t *self)
{
    self->epfd = epoll_create1 (EPOLL_CLOEXEC);
    self->timerfd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (self->epfd < 0 || self->timerfd < 0)
        return -errno;
    struct itimerspec its = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
    if (timerfd_settime (self->timerfd, 0, &its, NULL) < 0)
        return -errno;
    int rc = s_epoll_add (self->epfd, self->port, EPOLLIN, S_TAG_PORT);
    if (rc == 0)
        rc = s_epoll_add (self->epfd, self->timerfd, EPOLLIN, S_TAG_TIMER);
    if (rc == 0)
        rc = s_epoll_add (self->epfd, gw_worker_fd (self->worker), EPOLLIN, S_TAG_WORKER);
    return rc;
}

gw_egproxy_t *
gw_egproxy_new (const gw_egproxy_cfg_t *cfg, int *port_fd_p, char *err, size_t errlen)
{
    assert (cfg && cfg->policy && cfg->nonce && port_fd_p && *port_fd_p >= 0);
    gw_egproxy_t *self = calloc (1, sizeof *self);
    if (!self)
        goto fail;
    self->cfg = *cfg;
    self->cfg.max_streams = cfg->max_streams ? cfg->max_streams : 64;
    self->cfg.max_conns_per_min = cfg->max_conns_per_min ? cfg->max_conns_per_min : 600;
    self->cfg.connect_ms = cfg->connect_ms > 0 ? cfg->connect_ms : 10000;
    self->port = *port_fd_p;
    *port_fd_p = -1;
    int fl = fcntl (self->port, F_GETFL);       //  whatever the caller's: never block the reactor
    if (fl < 0 || fcntl (self->port, F_SETFL, fl | O_NONBLOCK) < 0)
        goto fail;
    self->epfd = self->timerfd = -1;
    self->dec = ch_mux_dec_new ();
    self->outq = ch_bytes_new (S_OUTQ_MAX);
    self->opens = calloc (self->cfg.max_conns_per_min, sizeof *self->opens);
    self->worker = gw_worker_new ();
    if (!self->dec || !self->outq || !self->opens || !self->worker)
        goto fail;
    int rc = s_open_fds (self);
    if (rc < 0) {
        snprintf (err, errlen, "the egress proxy's epoll: %s", strerror (-rc));
        gw_egproxy_destroy (&self);
        return NULL;
    }
    ch_mux_dec_hunt (self->dec);               //  stale bytes may precede the proxy's marker
    return self;
fail:
    snprintf (err, errlen, "the egress proxy: out of memory");
    gw_egproxy_destroy (&self);
    return NULL;
}

void
gw_egproxy_destroy (gw_egproxy_t **self_p)
{
    assert (self_p);
    gw_egproxy_t *self = *self_p;
    if (!self)
        return;
    gw_worker_destroy (&self->worker);          //  before the streams its jobs name
    while (self->streams)
        gw_egproxy__end (self, self->streams, "the session's VM went away", false);
    if (self->port >= 0)
        close (self->port);
    if (self->epfd >= 0)
        close (self->epfd);
    if (self->timerfd >= 0)
        close (self->timerfd);
    ch_mux_dec_destroy (&self->dec);
    ch_bytes_destroy (&self->outq);
    free (self->opens);
    free (self);
    *self_p = NULL;
}

int
gw_egproxy_fd (const gw_egproxy_t *self)
{
    assert (self);
    return self->epfd;
}

void
gw_egproxy_stats (const gw_egproxy_t *self, gw_egproxy_stats_t *out)
{
    assert (self && out);
    *out = self->stats;
    out->open = self->nstreams;
    out->ready = self->ready;
}

//  ---------------------------------------------------------------------------
//  Frames to the guest

bool
gw_egproxy__send (gw_egproxy_t *self, ch_mux_type_t type, uint32_t id, const void *data,
                  size_t len)
{
    uint8_t hdr [CH_MUX_HDR];
    int rc = ch_mux_encode_header (hdr, type, id, (uint32_t) len);
    assert (rc == 0);                           //  we never build a frame the table refuses
    (void) rc;
    if (ch_bytes_room (self->outq) < sizeof hdr + len) {
        if (!self->err [0])
            snprintf (self->err, sizeof self->err, "the guest stopped reading its egress "
                      "port (%u bytes of frames wait for it)", (unsigned) ch_bytes_len (self->outq));
        return false;
    }
    ch_bytes_put (self->outq, hdr, sizeof hdr);
    ch_bytes_put (self->outq, data, len);
    return true;
}

static void
s_send_credit (gw_egproxy_t *self, s_stream_t *s, bool all)
{
    if (!s->consumed || (!all && s->consumed < S_CREDIT_BATCH))
        return;
    uint8_t amount [4] = { (uint8_t) (s->consumed >> 24), (uint8_t) (s->consumed >> 16),
                           (uint8_t) (s->consumed >> 8), (uint8_t) s->consumed };
    gw_egproxy__send (self, CH_MUX_CREDIT, s->id, amount, 4);
    s->unacked -= s->consumed;
    s->consumed = 0;
}

//  ---------------------------------------------------------------------------
//  Streams

gw_worker_t *
gw_egproxy__worker (gw_egproxy_t *self)
{
    return self->worker;
}

void
gw_egproxy__forget_fd (gw_egproxy_t *self, s_stream_t *s)
{
    if (s->fd < 0)
        return;
    if (s->watched)
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close (s->fd);
    s->fd = -1;
    s->watched = 0;
}

s_stream_t *
gw_egproxy__find (gw_egproxy_t *self, uint32_t id)
{
    for (s_stream_t *s = self->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

void
gw_egproxy__end (gw_egproxy_t *self, s_stream_t *s, const char *words, bool tell)
{
    if (tell)
        gw_egproxy__send (self, CH_MUX_CLOSE, s->id, words, strnlen (words, CH_MUX_TEXT_MAX));
    if (s->phase == S_RELAY)                    //  it was allowed: say how it went
        gw_log (GW_LOG_INFO, "egress.closed", "stream=%u dest=%s addr=%s bytes_out=%llu "
                "bytes_in=%llu ms=%lld how=\"%s\"", (unsigned) s->id, s->dest, s->addr,
                (unsigned long long) s->out, (unsigned long long) s->inb,
                (long long) (ch_clock_mono_ms () - s->t0), words);
    for (s_stream_t **p = &self->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    self->nstreams--;
    gw_egproxy__forget_fd (self, s);
    ch_bytes_destroy (&s->in);
    gw_proxyreq_clear (&s->req);
    free (s->pre);
    free (s);
}

//  An fd with nothing wanted leaves the set: epoll reports a hang-up even
//  then, and a guest that never credits must not spin the reactor.
void
gw_egproxy__watch (gw_egproxy_t *self, s_stream_t *s)
{
    if (s->fd < 0)
        return;
    uint32_t ev = 0;
    if (s->phase == S_CONNECT)
        ev = EPOLLOUT;
    else if (s->phase == S_RELAY) {
        if (s->credit && !s->up_eof && ch_bytes_room (self->outq) >= S_ROOM)
            ev |= EPOLLIN;
        if (s->pre_off < s->pre_len || ch_bytes_len (s->in))
            ev |= EPOLLOUT;
    }
    if (ev == s->watched)
        return;
    struct epoll_event e = { .events = ev, .data.u64 = S_TAG_STREAM };
    if (!ev)
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    else if (epoll_ctl (self->epfd, s->watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->fd, &e) < 0)
        gw_log (GW_LOG_WARN, "egress.epoll", "stream=%u reason=\"%s\"", (unsigned) s->id,
                strerror (errno));
    s->watched = ev;
}

//  A connection the caps refuse before it is a stream: the response, then gone.
static void
s_refuse_open (gw_egproxy_t *self, uint32_t id, int status, const char *words)
{
    size_t len = 0;
    char *resp = gw_proxyreq_response (status, words, &len);
    if (resp && len <= CH_MUX_DATA_MAX)
        gw_egproxy__send (self, CH_MUX_DATA, id, resp, len);
    free (resp);
    gw_egproxy__send (self, CH_MUX_EOF, id, NULL, 0);
    gw_egproxy__send (self, CH_MUX_CLOSE, id, words, strnlen (words, CH_MUX_TEXT_MAX));
    self->stats.refused++;
    gw_log (GW_LOG_WARN, "egress.refused", "stream=%u status=%d reason=\"%s\"", (unsigned) id,
            status, words);
}

//  The caps a new connection must pass: 0, or the HTTP status and words.
static int
s_caps (gw_egproxy_t *self, char *words, size_t cap)
{
    int64_t now = ch_clock_mono_ms ();
    int64_t *oldest = &self->opens [self->opens_at];
    if (self->nstreams >= self->cfg.max_streams) {
        snprintf (words, cap, "egress refused: %u connections are open, the most this session "
                  "may have at once; close some first", self->nstreams);
        return 503;
    }
    if (*oldest && now - *oldest < 60000) {
        snprintf (words, cap, "egress refused: this session opened %u connections in the last "
                  "minute, its limit; wait and retry", self->cfg.max_conns_per_min);
        return 429;
    }
    uint64_t used = self->stats.bytes_out + self->stats.bytes_in;
    if (self->cfg.max_bytes && used >= self->cfg.max_bytes) {
        snprintf (words, cap, "egress refused: this session moved %llu bytes in and out, "
                  "its limit (cellvm-gateway --egress-max)", (unsigned long long) used);
        return 403;
    }
    *oldest = now;
    self->opens_at = (self->opens_at + 1) % self->cfg.max_conns_per_min;
    return 0;
}

static int
s_on_open (gw_egproxy_t *self, uint32_t id)
{
    if (id <= self->last_id) {
        snprintf (self->err, sizeof self->err, "the guest opened egress stream %u after %u "
                  "(ids only grow)", (unsigned) id, (unsigned) self->last_id);
        return -EPROTO;
    }
    self->last_id = id;
    char words [300];
    int status = s_caps (self, words, sizeof words);
    if (status) {
        s_refuse_open (self, id, status, words);
        return 0;
    }
    s_stream_t *s = calloc (1, sizeof *s);
    if (!s || !(s->in = ch_bytes_new (CH_MUX_WINDOW))) {
        free (s);
        s_refuse_open (self, id, 503, "egress refused: the gateway is out of memory");
        return 0;
    }
    s->id = id;
    s->fd = -1;
    s->credit = CH_MUX_WINDOW;
    s->t0 = ch_clock_mono_ms ();
    s->deadline = s->t0 + 30000;                //  the request must come within 30 s
    s->next = self->streams;
    self->streams = s;
    self->nstreams++;
    return 0;
}

static int
s_on_data (gw_egproxy_t *self, s_stream_t *s, const ch_mux_frame_t *f)
{
    if (s->guest_eof || s->unacked + f->len > CH_MUX_WINDOW) {
        snprintf (self->err, sizeof self->err, "the guest sent %s on egress stream %u (%u bytes "
                  "uncredited, window %u)", s->guest_eof ? "DATA after its EOF" : "DATA past "
                  "its window", (unsigned) s->id, (unsigned) s->unacked, CH_MUX_WINDOW);
        return -EPROTO;
    }
    s->unacked += f->len;
    ch_bytes_put (s->in, f->data, f->len);      //  fits: in holds only uncredited bytes
    if (s->phase != S_RELAY)
        gw_egstream__advance (self, s);
    return 0;
}

static int
s_on_credit (gw_egproxy_t *self, s_stream_t *s, uint32_t amount)
{
    if ((uint64_t) s->credit + amount > CH_MUX_WINDOW) {
        snprintf (self->err, sizeof self->err, "the guest credited %u bytes on egress stream %u "
                  "past the window", (unsigned) amount, (unsigned) s->id);
        return -EPROTO;
    }
    s->credit += amount;
    return 0;
}

//  One frame from a proxy that said hello.
static int
s_on_frame (gw_egproxy_t *self, const ch_mux_frame_t *f)
{
    if (f->type == CH_MUX_HELLO) {              //  the same one again is harmless
        if (f->len == strlen (self->cfg.nonce) && !memcmp (f->data, self->cfg.nonce, f->len))
            return 0;
        snprintf (self->err, sizeof self->err, "the guest's egress proxy said hello again, "
                  "with another nonce");
        return -EPROTO;
    }
    if (f->type == CH_MUX_OPEN)
        return s_on_open (self, f->stream);
    s_stream_t *s = gw_egproxy__find (self, f->stream);
    if (!s) {
        if (f->stream <= self->last_id)
            return 0;                           //  one we ended: the guest had not heard yet
        snprintf (self->err, sizeof self->err, "the guest sent %s on egress stream %u, which "
                  "it never opened", ch_mux_type_name (f->type), (unsigned) f->stream);
        return -EPROTO;
    }
    switch (f->type) {
    case CH_MUX_DATA:
        return s_on_data (self, s, f);
    case CH_MUX_CREDIT:
        return s_on_credit (self, s, f->credit);
    case CH_MUX_EOF:
        s->guest_eof = true;
        if (s->phase != S_RELAY)
            gw_egstream__advance (self, s);
        return 0;
    default:                                    //  CLOSE
        gw_egproxy__end (self, s, "closed by the cell's side", false);
        return 0;
    }
}

//  Before the hello: skip to the marker, then only the HELLO with our nonce counts.
static void
s_on_hello (gw_egproxy_t *self, const ch_mux_frame_t *f)
{
    if (f->type != CH_MUX_HELLO || f->len != strlen (self->cfg.nonce)
    ||  memcmp (f->data, self->cfg.nonce, f->len) != 0) {
        ch_mux_dec_hunt (self->dec);            //  a stale proxy's: wait for ours
        return;
    }
    self->ready = true;
    static const uint8_t sync [] = CH_FRAME_SYNC;
    ch_bytes_put (self->outq, sync, CH_FRAME_SYNC_LEN);
    gw_egproxy__send (self, CH_MUX_HELLO, 0, f->data, f->len);
    gw_log (GW_LOG_INFO, "egress.proxy_ready", "streams_max=%u conns_per_min=%u",
            self->cfg.max_streams, self->cfg.max_conns_per_min);
}

//  Read and handle what the port holds, up to the budget.
static int
s_read_port (gw_egproxy_t *self)
{
    uint8_t buf [16384];
    size_t budget = S_PORT_BUDGET;
    while (budget && !self->err [0]) {
        ssize_t n = read (self->port, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -EPIPE;
        budget -= (size_t) n > budget ? budget : (size_t) n;
        for (size_t at = 0; at < (size_t) n && !self->err [0];) {
            //  Before the hello a byte at a time: noise that breaks the protocol
            //  is skipped byte by byte, however it is laid out.
            size_t len = self->ready ? (size_t) n - at : 1;
            long used = ch_mux_dec_feed (self->dec, buf + at, len);
            if (used < 0 && self->ready) {
                snprintf (self->err, sizeof self->err, "the guest broke the egress stream "
                          "protocol: %s", ch_mux_dec_error (self->dec));
                break;
            }
            if (used < 0) {                     //  noise before our proxy's hello
                ch_mux_dec_hunt (self->dec);
                used = 1;
            }
            at += (size_t) used;
            const ch_mux_frame_t *f = ch_mux_dec_frame (self->dec);
            if (f && !self->ready)
                s_on_hello (self, f);
            else if (f)
                s_on_frame (self, f);
        }
    }
    return self->err [0] ? -EPROTO : 0;
}

//  The guest's bytes to the destination; what left `in` is credited back.
static int
s_write_up (gw_egproxy_t *self, s_stream_t *s)
{
    while (s->pre_off < s->pre_len) {
        ssize_t n = send (s->fd, s->pre + s->pre_off, s->pre_len - s->pre_off,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
        s->pre_off += (size_t) n;
    }
    ssize_t n = ch_bytes_write (s->in, s->fd);
    if (n < 0)
        return (int) n;
    s->consumed += (uint32_t) n;
    s->out += (uint64_t) n;
    self->stats.bytes_out += (uint64_t) n;
    s_send_credit (self, s, ch_bytes_len (s->in) == 0);
    if (s->guest_eof && !ch_bytes_len (s->in) && !s->up_shut) {
        shutdown (s->fd, SHUT_WR);
        s->up_shut = true;
    }
    return 0;
}

//  The destination's bytes to the guest, within its credit and our queue.
static int
s_read_up (gw_egproxy_t *self, s_stream_t *s)
{
    uint8_t buf [CH_MUX_DATA_MAX];
    size_t budget = S_STREAM_BUDGET;
    while (budget && s->credit && !s->up_eof && ch_bytes_room (self->outq) >= S_ROOM) {
        size_t want = s->credit < sizeof buf ? s->credit : sizeof buf;
        ssize_t n = recv (s->fd, buf, want, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
        if (n == 0) {
            s->up_eof = true;
            gw_egproxy__send (self, CH_MUX_EOF, s->id, NULL, 0);
            break;
        }
        gw_egproxy__send (self, CH_MUX_DATA, s->id, buf, (size_t) n);
        s->credit -= (uint32_t) n;
        s->inb += (uint64_t) n;
        self->stats.bytes_in += (uint64_t) n;
        budget -= (size_t) n > budget ? budget : (size_t) n;
    }
    return 0;
}

static void
s_relay (gw_egproxy_t *self, s_stream_t *s)
{
    int rc = gw_egstream__first (self, s);
    if (rc == -ECANCELED)
        return;
    rc = rc == -EAGAIN ? 0 : s_write_up (self, s);
    if (rc == 0)
        rc = s_read_up (self, s);
    if (rc < 0) {
        char words [200];
        snprintf (words, sizeof words, "the destination's connection failed: %s",
                  strerror (-rc));
        gw_egproxy__end (self, s, words, true);
    }
    else if (s->up_eof && s->guest_eof && !ch_bytes_len (s->in))
        gw_egproxy__end (self, s, "done", true);
    else
        gw_egproxy__watch (self, s);
}

//  Every stream's turn: connects that finished, bytes both ways, deadlines.
static void
s_streams (gw_egproxy_t *self, bool tick)
{
    int64_t now = ch_clock_mono_ms ();
    s_stream_t *next;
    for (s_stream_t *s = self->streams; s && !self->err [0]; s = next) {
        next = s->next;                         //  s may end below
        if (tick && s->deadline && now >= s->deadline)
            gw_egstream__tick (self, s, now);
        else if (s->phase == S_CONNECT)
            gw_egstream__connected (self, s);
        else if (s->phase == S_RELAY)
            s_relay (self, s);
    }
}

int
gw_egproxy_on_event (gw_egproxy_t *self, char *err, size_t errlen)
{
    assert (self);
    struct epoll_event evs [64];
    bool tick = false;
    int n = epoll_wait (self->epfd, evs, 64, 0);
    for (int i = 0; i < n; i++)
        if (evs [i].data.u64 == S_TAG_TIMER) {
            uint64_t ticks;
            tick = read (self->timerfd, &ticks, sizeof ticks) > 0;
        }
    gw_worker_drain (self->worker);             //  lookups that finished
    int rc = s_read_port (self);
    if (rc == 0)
        s_streams (self, tick);
    if (rc == 0 && self->err [0])
        rc = -EPROTO;
    if (rc == 0 && ch_bytes_write (self->outq, self->port) < 0)
        rc = -EPIPE;
    struct epoll_event ev = { .events = EPOLLIN | (ch_bytes_len (self->outq) ? EPOLLOUT : 0),
                              .data.u64 = S_TAG_PORT };
    epoll_ctl (self->epfd, EPOLL_CTL_MOD, self->port, &ev);
    if (rc == -EPROTO)
        snprintf (err, errlen, "%s", self->err);
    else if (rc == -EPIPE)
        snprintf (err, errlen, "the egress port closed");
    return rc;
}
