/*  gi_proxy - the guest's egress proxy (see gi_proxy.h). */
#include "gi_proxy.h"
#include "ch_bytes.h"
#include "ch_child.h"
#include "ch_frame.h"
#include "ch_mux.h"
#include "ch_sig.h"
#include "gi_kernel.h"
#include "gi_log.h"
#include "gi_sys.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_OUT_CAP (8u << 20)            //  the port's queue: never reached (S_OUT_HIGH)
#define S_OUT_HIGH (1u << 20)           //  queued past this, nothing more is read
#define S_CREDIT_BATCH (32u * 1024u)    //  credit back at least this much at once
#define S_IDLE_MS 200                   //  no host: how often to look again
#define S_READ_MAX (64u * 1024u)        //  port bytes read per wakeup
#define S_CLIENT_READS 4                //  DATA frames per client per wakeup
#define S_BACKLOG 64
#define S_FIXED 4                       //  pollfds before the streams': stop, 2 listeners, port

typedef struct {
    int fd;                             //  the client's socket; -1: a free slot
    uint32_t id;                        //  0 until its OPEN went out
    uint32_t window;                    //  DATA bytes the host still takes
    bool rd_eof;                        //  the client half-closed: EOF sent
    bool host_eof;                      //  the host sent EOF: shut down once drained
    bool wr_shut;
    bool closed;                        //  the host's CLOSE came: drain in, then go
    ch_bytes_t *in;                     //  host DATA not yet taken by the client
    uint32_t uncredited;                //  taken by the client, not yet credited back
} s_stream_t;

typedef struct {
    const gi_proxy_cfg_t *cfg;
    size_t nonce_len;
    ch_mux_dec_t *dec;
    ch_bytes_t *out;                    //  frames for the port
    bool connected;                     //  a host holds the port open
    bool ready;                         //  ... and its HELLO carried our nonce
    int failed;                         //  -errno: the loop ends
    uint32_t next_id;
    int nstreams;
    s_stream_t streams [GI_PROXY_STREAMS];
} s_proxy_t;

//  ---------------------------------------------------------------------------
//  Listening

static int
s_listen_one (int family, unsigned port, int *fd_p)
{
    struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = htons ((uint16_t) port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    int one = 1, rc = 0;
    int fd = socket (family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0
    ||  (family == AF_INET6 && setsockopt (fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
    ||  (family == AF_INET ? bind (fd, (struct sockaddr *) &v4, sizeof v4)
                           : bind (fd, (struct sockaddr *) &v6, sizeof v6)) < 0
    ||  listen (fd, S_BACKLOG) < 0) {
        rc = -errno;
        close (fd);
        return rc;
    }
    *fd_p = fd;
    return 0;
}

int
gi_proxy_listen (unsigned port, int fds [2])
{
    assert (fds);
    fds [0] = fds [1] = -1;
    if (port > 65535)
        return -EINVAL;
    int rc = s_listen_one (AF_INET, port, &fds [0]);
    if (rc < 0)
        return rc;
    struct sockaddr_in bound;
    socklen_t len = sizeof bound;
    if (port == 0 && getsockname (fds [0], (struct sockaddr *) &bound, &len) == 0)
        port = ntohs (bound.sin_port);          //  the ephemeral one, for [::1] too
    //  A guest without IPv6 still proxies: 127.0.0.1 is what HTTP_PROXY names.
    if (s_listen_one (AF_INET6, port, &fds [1]) < 0)
        fds [1] = -1;
    return 0;
}

//  ---------------------------------------------------------------------------
//  Frames out, and the streams' ledger

//  Queue bytes for the port. The queue stops growing near S_OUT_HIGH (no
//  more is read), so its cap is a bug's, and ends the proxy.
static void
s_put (s_proxy_t *self, const void *data, size_t len)
{
    int rc = ch_bytes_put (self->out, data, len);
    if (rc < 0 && !self->failed) {
        gi_log (CH_LOG_ERROR, "proxy.queue_failed", "reason=\"%s\"", strerror (-rc));
        self->failed = rc;
    }
}

//  A frame whole, or nothing.
static void
s_emit (s_proxy_t *self, ch_mux_type_t type, uint32_t stream, const void *data, uint32_t len)
{
    uint8_t frame [CH_MUX_HDR + CH_MUX_DATA_MAX];
    if (ch_mux_encode_header (frame, type, stream, len) < 0) {
        self->failed = -EINVAL;
        return;
    }
    if (len)
        memcpy (frame + CH_MUX_HDR, data, len);
    s_put (self, frame, CH_MUX_HDR + (size_t) len);
}

static bool
s_port_full (const s_proxy_t *self)
{
    return ch_bytes_len (self->out) >= S_OUT_HIGH;
}

static s_stream_t *
s_find (s_proxy_t *self, uint32_t id)
{
    for (int i = 0; id && i < GI_PROXY_STREAMS; i++)
        if (self->streams [i].fd >= 0 && self->streams [i].id == id && !self->streams [i].closed)
            return &self->streams [i];
    return NULL;
}

//  The slot freed; the host hears nothing of it (the caller's job).
static void
s_forget (s_proxy_t *self, s_stream_t *s)
{
    close (s->fd);
    ch_bytes_destroy (&s->in);
    *s = (s_stream_t) { .fd = -1 };
    self->nstreams--;
}

//  CLOSE with words, then forget.
static void
s_close (s_proxy_t *self, s_stream_t *s, const char *words)
{
    if (s->id)
        s_emit (self, CH_MUX_CLOSE, s->id, words, (uint32_t) strlen (words));
    s_forget (self, s);
}

static void
s_close_errno (s_proxy_t *self, s_stream_t *s, const char *doing, int err)
{
    char words [160];
    snprintf (words, sizeof words, "the guest's proxy failed %s the cell's connection: %s",
              doing, strerror (err));
    s_close (self, s, words);
}

//  Both halves done and everything delivered: the stream ends here.
static void
s_maybe_done (s_proxy_t *self, s_stream_t *s)
{
    if (s->fd >= 0 && s->rd_eof && s->wr_shut)
        s_close (self, s, "");
}

static void
s_open (s_proxy_t *self, s_stream_t *s)
{
    s->id = self->next_id++;
    s->window = CH_MUX_WINDOW;
    s_emit (self, CH_MUX_OPEN, s->id, NULL, 0);
}

//  ---------------------------------------------------------------------------
//  The cell's sockets

//  Client bytes as DATA, within the stream's window; EOF at its half close.
static void
s_client_read (s_proxy_t *self, s_stream_t *s)
{
    uint8_t buf [CH_MUX_DATA_MAX];
    for (int i = 0; i < S_CLIENT_READS && s->window && !s_port_full (self); i++) {
        size_t want = s->window < sizeof buf ? s->window : sizeof buf;
        ssize_t n = recv (s->fd, buf, want, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n < 0) {
            s_close_errno (self, s, "reading", errno);
            return;
        }
        if (n == 0) {
            s->rd_eof = true;
            s_emit (self, CH_MUX_EOF, s->id, NULL, 0);
            s_maybe_done (self, s);
            return;
        }
        s_emit (self, CH_MUX_DATA, s->id, buf, (uint32_t) n);
        s->window -= (uint32_t) n;
    }
}

//  Host bytes to the client, as many as it takes now; CREDIT for them,
//  batched; the half close once the last is taken.
static void
s_client_write (s_proxy_t *self, s_stream_t *s)
{
    ssize_t n = ch_bytes_write (s->in, s->fd);
    if (s->closed) {                            //  the host has forgotten it: no frames
        if (n < 0 || !ch_bytes_len (s->in))
            s_forget (self, s);
        return;
    }
    if (n < 0) {
        s_close_errno (self, s, "writing", (int) -n);
        return;
    }
    s->uncredited += (uint32_t) n;
    bool drained = ch_bytes_len (s->in) == 0;
    if (s->uncredited >= S_CREDIT_BATCH || (drained && s->uncredited)) {
        uint8_t credit [CH_MUX_HDR + 4];
        if (ch_mux_encode_credit (credit, s->id, s->uncredited) == 0)
            s_put (self, credit, sizeof credit);
        s->uncredited = 0;
    }
    if (drained && s->host_eof && !s->wr_shut) {
        shutdown (s->fd, SHUT_WR);
        s->wr_shut = true;
    }
    s_maybe_done (self, s);
}

//  New connections: each a stream, opened now or once the host is ready.
static void
s_accept (s_proxy_t *self, int lfd)
{
    int fd;
    while ((fd = accept4 (lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        if (self->nstreams >= GI_PROXY_STREAMS) {
            close (fd);                         //  the cell sees it closed at once
            continue;
        }
        s_stream_t *s = self->streams;
        while (s->fd >= 0)
            s++;
        *s = (s_stream_t) { .fd = fd, .in = ch_bytes_new (CH_MUX_WINDOW) };
        if (!s->in)
            abort ();
        self->nstreams++;
        if (self->ready)
            s_open (self, s);
    }
}

//  ---------------------------------------------------------------------------
//  Frames in

static void
s_on_hello (s_proxy_t *self, const ch_mux_frame_t *f)
{
    if (f->len != self->nonce_len || memcmp (f->data, self->cfg->nonce, f->len) != 0) {
        gi_log (CH_LOG_WARN, "proxy.hello_ignored", "reason=\"another nonce: a host "
                "that is not this proxy's\"");
        return;
    }
    if (self->ready)
        return;
    self->ready = true;
    gi_log (CH_LOG_INFO, "proxy.ready", "waiting=%d", self->nstreams);
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        if (self->streams [i].fd >= 0)
            s_open (self, &self->streams [i]);
}

static void
s_on_data (s_proxy_t *self, s_stream_t *s, const ch_mux_frame_t *f)
{
    if (s->host_eof)
        return;                                 //  it said it sends no more
    if (ch_bytes_put (s->in, f->data, f->len) < 0) {
        s_close (self, s, "the gateway sent past the stream's window");
        return;
    }
    s_client_write (self, s);
}

static void
s_on_frame (s_proxy_t *self, const ch_mux_frame_t *f)
{
    if (f->type == CH_MUX_HELLO) {
        s_on_hello (self, f);
        return;
    }
    //  No such stream: one forgotten when a CLOSE crossed the host's frames.
    s_stream_t *s = s_find (self, f->stream);
    if (!s)
        return;
    if (f->type == CH_MUX_DATA)
        s_on_data (self, s, f);
    else if (f->type == CH_MUX_EOF) {
        s->host_eof = true;
        s_client_write (self, s);
    }
    else if (f->type == CH_MUX_CLOSE && ch_bytes_len (s->in))
        s->closed = true;                       //  a refusal's words still go to the client
    else if (f->type == CH_MUX_CLOSE)
        s_forget (self, s);
    else if (f->type == CH_MUX_CREDIT)
        s->window = f->credit > CH_MUX_WINDOW - s->window ? CH_MUX_WINDOW
                  : s->window + f->credit;
}

//  The decoder died somewhere in buf [off..]: hunt again, from the next
//  marker past off (a feed that fails says nothing of what it consumed,
//  so each failure moves on by at least a byte). Returns where to go on.
static size_t
s_resync (s_proxy_t *self, const uint8_t *buf, size_t len, size_t off)
{
    gi_log (CH_LOG_WARN, "proxy.bad_frame", "reason=\"%s\" action=hunt",
            ch_mux_dec_error (self->dec));
    ch_mux_dec_hunt (self->dec);
    const uint8_t *p = memmem (buf + off + 1, len - off - 1, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    return p ? (size_t) (p - buf) : off + 1;
}

static void
s_port_feed (s_proxy_t *self, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        long n = ch_mux_dec_feed (self->dec, buf + off, len - off);
        if (n < 0) {
            off = s_resync (self, buf, len, off);
            continue;
        }
        off += (size_t) n;
        const ch_mux_frame_t *f = ch_mux_dec_frame (self->dec);
        if (f)
            s_on_frame (self, f);
    }
}

//  ---------------------------------------------------------------------------
//  The port: a host comes and goes

//  Whether a host holds the port: a virtio port without one reports POLLHUP.
static bool
s_host_there (int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll (&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

//  The port outlives proxies: a dead one's half frame may precede ours, so
//  the marker goes first; and the host's stale bytes may precede its own.
static void
s_connect (s_proxy_t *self)
{
    self->connected = true;
    ch_mux_dec_hunt (self->dec);
    s_put (self, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    s_emit (self, CH_MUX_HELLO, 0, self->cfg->nonce, (uint32_t) self->nonce_len);
    gi_log (CH_LOG_INFO, "proxy.hello_sent", NULL);
}

//  Nobody reads what we would write: every stream goes, the cell's sockets
//  closed; clients that come meanwhile wait for the next host.
static void
s_disconnect (s_proxy_t *self)
{
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        if (self->streams [i].fd >= 0)
            s_forget (self, &self->streams [i]);
    ch_bytes_drop (self->out, ch_bytes_len (self->out));
    self->connected = self->ready = false;
    gi_log (CH_LOG_INFO, "proxy.host_gone", "action=wait");
}

static void
s_flush (s_proxy_t *self)
{
    if (self->connected && ch_bytes_len (self->out)
    &&  ch_bytes_write (self->out, self->cfg->port_fd) < 0)
        s_disconnect (self);
}

static void
s_port_events (s_proxy_t *self, short revents)
{
    if (revents & POLLOUT)
        s_flush (self);
    if (self->connected && (revents & POLLIN)) {
        uint8_t buf [S_READ_MAX];
        ssize_t n = read (self->cfg->port_fd, buf, sizeof buf);
        if (n > 0)
            s_port_feed (self, buf, (size_t) n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            s_disconnect (self);                //  0 or EIO: no host any more
    }
    else if (self->connected && (revents & (POLLHUP | POLLERR | POLLNVAL)))
        s_disconnect (self);
}

//  ---------------------------------------------------------------------------
//  The loop

static void
s_pollset (const s_proxy_t *self, struct pollfd *pfd)
{
    const gi_proxy_cfg_t *cfg = self->cfg;
    bool full = s_port_full (self);
    pfd [0] = (struct pollfd) { cfg->stop_fd, POLLIN, 0 };
    pfd [1] = (struct pollfd) { cfg->listen_fds [0], POLLIN, 0 };
    pfd [2] = (struct pollfd) { cfg->listen_fds [1], POLLIN, 0 };
    short port = (short) ((full ? 0 : POLLIN) | (ch_bytes_len (self->out) ? POLLOUT : 0));
    pfd [3] = (struct pollfd) { self->connected ? cfg->port_fd : -1, port, 0 };
    for (int i = 0; i < GI_PROXY_STREAMS; i++) {
        const s_stream_t *s = &self->streams [i];
        short ev = (short) ((s->id && !s->rd_eof && !s->closed && s->window && !full ? POLLIN : 0)
                          | (s->in && ch_bytes_len (s->in) ? POLLOUT : 0));
        //  No events wanted: not polled at all, or a hung-up socket would spin.
        pfd [S_FIXED + i] = (struct pollfd) { s->fd >= 0 && ev ? s->fd : -1, ev, 0 };
    }
}

static void
s_stream_events (s_proxy_t *self, s_stream_t *s, const struct pollfd *p)
{
    if (p->fd < 0 || s->fd != p->fd || !p->revents)
        return;
    if ((p->events & POLLIN) && (p->revents & (POLLIN | POLLHUP | POLLERR)))
        s_client_read (self, s);
    if (s->fd == p->fd && (p->events & POLLOUT) && (p->revents & (POLLOUT | POLLHUP | POLLERR)))
        s_client_write (self, s);
}

//  One poll and what it found. 1: stop_fd is readable; 0: go on; -errno.
static int
s_turn (s_proxy_t *self)
{
    struct pollfd pfd [S_FIXED + GI_PROXY_STREAMS];
    s_pollset (self, pfd);
    if (poll (pfd, S_FIXED + GI_PROXY_STREAMS, self->connected ? -1 : S_IDLE_MS) < 0) {
        if (errno == EINTR)
            return 0;
        return -errno;
    }
    if (pfd [0].revents)
        return 1;
    s_port_events (self, pfd [3].revents);
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        s_stream_events (self, &self->streams [i], &pfd [S_FIXED + i]);
    for (int i = 1; i <= 2; i++)
        if (pfd [i].revents)
            s_accept (self, pfd [i].fd);
    s_flush (self);
    if (!self->connected && s_host_there (self->cfg->port_fd))
        s_connect (self);
    return self->failed;
}

int
gi_proxy_run (const gi_proxy_cfg_t *cfg)
{
    assert (cfg);
    size_t nonce_len = cfg->nonce ? strlen (cfg->nonce) : 0;
    if (cfg->port_fd < 0 || nonce_len == 0 || nonce_len > CH_MUX_TEXT_MAX)
        return -EINVAL;
    s_proxy_t *self = calloc (1, sizeof *self);
    if (!self)
        return -ENOMEM;
    *self = (s_proxy_t) { .cfg = cfg, .nonce_len = nonce_len, .next_id = 1,
                          .dec = ch_mux_dec_new (), .out = ch_bytes_new (S_OUT_CAP) };
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        self->streams [i].fd = -1;
    int rc = self->dec && self->out ? 0 : -ENOMEM;
    if (rc == 0 && s_host_there (cfg->port_fd))
        s_connect (self);
    while (rc == 0)
        rc = s_turn (self);
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        if (self->streams [i].fd >= 0)
            s_forget (self, &self->streams [i]);
    ch_mux_dec_destroy (&self->dec);
    ch_bytes_destroy (&self->out);
    free (self);
    return rc > 0 ? 0 : rc;
}

//  ---------------------------------------------------------------------------
//  Init's side: the child

//  In the forked child: keep the port and the listeners only, drop to
//  nobody, serve. Never returns.
static void __attribute__ ((noreturn))
s_child (int port_fd, const int lfd [2], const char *nonce)
{
    ch_sig_defaults ();
    signal (SIGPIPE, SIG_IGN);                  //  a host gone is a write error, not a death
    setsid ();
    //  Inherited -1000 from init: under memory pressure the proxy may go, init stays.
    gi_sys_write_file ("/proc/self/oom_score_adj", "0");
    int n = lfd [1] >= 0 ? 6 : 5;
    int rc = ch_child_fds ((const int []) { open ("/dev/null", O_RDONLY | O_CLOEXEC), -1, -1,
                                            port_fd, lfd [0], lfd [1] }, n, false);
    if (rc == 0 && chdir ("/") < 0)
        rc = -errno;
    if (rc == 0)
        rc = gi_drop_privileges (GI_PROXY_UID, GI_PROXY_GID);
    if (rc < 0) {
        gi_log (CH_LOG_ERROR, "proxy.setup_failed", "reason=\"%s\"", strerror (-rc));
        _exit (126);
    }
    gi_proxy_cfg_t cfg = { .port_fd = 3, .listen_fds = { 4, n == 6 ? 5 : -1 },
                           .nonce = nonce, .stop_fd = -1 };
    rc = gi_proxy_run (&cfg);
    gi_log (CH_LOG_ERROR, "proxy.failed", "reason=\"%s\"", strerror (-rc));
    _exit (1);
}

int
gi_proxy_spawn (const char *device, const char *nonce, unsigned port, pid_t *pid_p)
{
    assert (device && nonce && pid_p);
    int lfd [2] = { -1, -1 }, rc = 0;
    //  Opened here, as root: the port's node is root's, and nobody cannot open it.
    int pfd = open (device, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (pfd < 0)
        return -errno;
    if ((rc = gi_proxy_listen (port, lfd)) < 0)
        goto fail;
    pid_t pid = fork ();
    if (pid < 0) {
        rc = -errno;
        goto fail;
    }
    if (pid == 0)
        s_child (pfd, lfd, nonce);
    *pid_p = pid;
    gi_log (CH_LOG_INFO, "proxy.started", "pid=%d port=%u ipv6=%s", (int) pid, port,
            lfd [1] >= 0 ? "yes" : "no");
fail:
    close (pfd);
    for (int i = 0; i < 2; i++)
        if (lfd [i] >= 0)
            close (lfd [i]);
    return rc;
}
