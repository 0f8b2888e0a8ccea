/*  gw_server - the Jupyter-facing side of the gateway, and its reactor.

    Sends never block: ROUTER drops what it cannot route and PUB drops past
    its high-water mark, and both are sent with ZMQ_DONTWAIT, so one slow or
    vanished client cannot stall the kernel's output for the others.
*/
#include "gw_server.h"
#include "gw_heartbeat.h"
#include "gw_log.h"
#include "gw_wire.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define S_LINGER_MS 250                         //  flush the last replies, then let go
#define S_TICK_MS 20                            //  session timers
#define S_MAX_FRAMES 256                        //  frames in one client message
#define S_DRAIN_MAX 64                          //  messages per socket event

struct _gw_server_t {
    zloop_t *loop;                              //  the reactor
    zsock_t *socks [KN_CH_COUNT];               //  shell, control, stdin, iopub (by channel)
    gw_heartbeat_t *hb;                         //  echo actor
    gw_wire_t *wire;                            //  verify and sign
    gw_session_t *session;                      //  the kernel and its requests
    int signal_fd;                              //  borrowed, -1 when none
    int parent;                                 //  client pid to watch, 0 = none
    zmq_pollitem_t chan_item;                   //  the channel fd as registered
    bool chan_polled;                           //  chan_item is registered
    zmq_pollitem_t backend_item;                //  the backend's event fd as registered
    bool backend_polled;                        //  backend_item is registered
};

//  --------------------------------------------------------------------------
//  Outgoing: the session's emit callback.

static void
s_emit (void *arg, kn_channel_t ch, const gw_frames_t *ids, const kn_msg_t *msg)
{
    gw_server_t *self = (gw_server_t *) arg;
    assert (ch < KN_CH_CELLVM && self->socks [ch]);
    gw_frames_t *frames = gw_wire_encode (self->wire, ids, msg);
    if (!frames) {
        gw_log (GW_LOG_ERROR, "client.send_failed", "channel=%s reason=\"cannot sign\"",
                kn_channel_name (ch));
        return;
    }
    void *handle = zsock_resolve (self->socks [ch]);
    size_t n = gw_frames_size (frames);
    for (size_t i = 0; i < n; i++) {
        const gw_frame_t *f = gw_frames_get (frames, i);
        int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
        if (zmq_send (handle, f->data, f->size, flags) < 0) {
            gw_log (GW_LOG_WARN, "client.send_failed", "channel=%s msg_type=%s reason=\"%s\"",
                    kn_channel_name (ch), kn_msg_type (msg), zmq_strerror (zmq_errno ()));
            break;
        }
    }
    if (gw_log_enabled (GW_LOG_DEBUG))
        gw_log (GW_LOG_DEBUG, "client.send", "channel=%s msg_type=%s", kn_channel_name (ch),
                kn_msg_type (msg));
    gw_frames_destroy (&frames);
}

//  --------------------------------------------------------------------------
//  Keeping the reactor in step with the session's channel fd, which comes
//  and goes with each kernel, and wants POLLOUT only while output waits.

static int s_on_chan (zloop_t *loop, zmq_pollitem_t *item, void *arg);
static int s_on_backend (zloop_t *loop, zmq_pollitem_t *item, void *arg);

static void
s_poll_fd (gw_server_t *self, zmq_pollitem_t *item, bool *polled, zloop_fn *handler)
{
    if (item->fd >= 0 && zloop_poller (self->loop, item, handler, self) == 0) {
        zloop_poller_set_tolerant (self->loop, item);
        *polled = true;
    }
}

//  After every event: register the channel and backend fds as they are now.
//  zloop ends pollers by fd number, and a closed fd's number can come back
//  as the other one, so on any change both are dropped and re-added.
//  Returns -1 (stop the reactor) once the session is done.
static int
s_sync (gw_server_t *self)
{
    int fd = gw_session_fd (self->session);
    zmq_pollitem_t chan = { NULL, fd, fd < 0 ? 0 : ZMQ_POLLIN
                            | (gw_session_wants_write (self->session) ? ZMQ_POLLOUT : 0), 0 };
    zmq_pollitem_t backend = { NULL, gw_session_backend_fd (self->session), ZMQ_POLLIN, 0 };
    bool same = self->chan_polled == (chan.fd >= 0) && self->backend_polled == (backend.fd >= 0)
             && (!self->chan_polled || (self->chan_item.fd == chan.fd
                                        && self->chan_item.events == chan.events))
             && (!self->backend_polled || self->backend_item.fd == backend.fd);
    if (!same) {
        if (self->chan_polled)
            zloop_poller_end (self->loop, &self->chan_item);
        if (self->backend_polled)
            zloop_poller_end (self->loop, &self->backend_item);
        self->chan_polled = self->backend_polled = false;
        self->chan_item = chan;
        self->backend_item = backend;
        s_poll_fd (self, &self->chan_item, &self->chan_polled, s_on_chan);
        s_poll_fd (self, &self->backend_item, &self->backend_polled, s_on_backend);
    }
    return gw_session_finished (self->session) ? -1 : 0;
}

static int
s_on_chan (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    gw_server_t *self = (gw_server_t *) arg;
    //  A timer may have replaced the channel since this poll: stale events
    //  for a closed fd must not reach the new one.
    if (item->fd == gw_session_fd (self->session)) {
        if (item->revents & (ZMQ_POLLIN | ZMQ_POLLERR))
            gw_session_readable (self->session);
        if ((item->revents & ZMQ_POLLOUT) && item->fd == gw_session_fd (self->session))
            gw_session_writable (self->session);
    }
    return s_sync (self);
}

static int
s_on_backend (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    gw_server_t *self = (gw_server_t *) arg;
    if (item->fd == gw_session_backend_fd (self->session))
        gw_session_backend_event (self->session);
    return s_sync (self);
}

static int
s_on_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *self = (gw_server_t *) arg;
    if (self->parent && kill (self->parent, 0) < 0 && errno == ESRCH) {
        gw_log (GW_LOG_WARN, "gateway.orphaned", "parent=%d action=shutdown", self->parent);
        self->parent = 0;
        gw_session_shutdown (self->session);
    }
    gw_session_tick (self->session);
    return s_sync (self);
}

static int
s_on_signal (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    (void) item;
    gw_server_t *self = (gw_server_t *) arg;
    struct signalfd_siginfo si;
    while (read (self->signal_fd, &si, sizeof si) == (ssize_t) sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            gw_session_tick (self->session);
            continue;
        }
        gw_log (GW_LOG_INFO, "gateway.signal", "signal=SIG%s action=shutdown",
                sigabbrev_np ((int) si.ssi_signo));
        gw_session_shutdown (self->session);
    }
    return s_sync (self);
}

//  --------------------------------------------------------------------------
//  Incoming client messages.

static void
s_handle_client (gw_server_t *self, kn_channel_t ch, zmsg_t *zmsg)
{
    static uint8_t empty [1];
    size_t n = zmsg_size (zmsg);
    if (n > S_MAX_FRAMES) {
        gw_log (GW_LOG_WARN, "client.drop", "channel=%s reason=\"too many frames\" frames=%zu",
                kn_channel_name (ch), n);
        return;
    }
    gw_frame_t frames [S_MAX_FRAMES];
    size_t i = 0;
    for (zframe_t *f = zmsg_first (zmsg); f; f = zmsg_next (zmsg), i++) {
        frames [i].data = zframe_size (f) ? zframe_data (f) : empty;
        frames [i].size = zframe_size (f);
    }
    kn_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    const char *why = NULL;
    int rc = gw_wire_decode (self->wire, ch, frames, n, &msg, &ids, &why);
    if (rc < 0) {
        gw_log (GW_LOG_WARN, "client.drop", "channel=%s reason=\"%s\" frames=%zu",
                kn_channel_name (ch), why ? why : "malformed", n);
        return;
    }
    gw_session_request (self->session, &ids, &msg);
}

static int
s_on_client (zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop;
    gw_server_t *self = (gw_server_t *) arg;
    kn_channel_t ch = sock == self->socks [KN_CH_SHELL] ? KN_CH_SHELL
                    : sock == self->socks [KN_CH_CONTROL] ? KN_CH_CONTROL : KN_CH_STDIN;
    for (int i = 0; i < S_DRAIN_MAX && (zsock_events (sock) & ZMQ_POLLIN); i++) {
        zmsg_t *zmsg = zmsg_recv (sock);
        if (!zmsg)
            break;
        s_handle_client (self, ch, zmsg);
        zmsg_destroy (&zmsg);
        if (gw_session_finished (self->session))
            break;
    }
    return s_sync (self);
}

//  --------------------------------------------------------------------------
//  Construction.

static int
s_bind (gw_server_t *self, kn_channel_t ch, const gw_conn_t *conn, size_t max_msg,
        char *err, size_t errlen)
{
    static const gw_port_t ports [] = { GW_PORT_SHELL, GW_PORT_CONTROL, GW_PORT_STDIN,
                                        GW_PORT_IOPUB };
    char endpoint [300];
    if (gw_conn_endpoint (conn, ports [ch], endpoint, sizeof endpoint) < 0) {
        snprintf (err, errlen, "cannot form the %s endpoint", kn_channel_name (ch));
        return -EINVAL;
    }
    zsock_t *sock = zsock_new (ch == KN_CH_IOPUB ? ZMQ_PUB : ZMQ_ROUTER);
    if (!sock) {
        snprintf (err, errlen, "cannot create the %s socket", kn_channel_name (ch));
        return -ENOMEM;
    }
    zsock_set_linger (sock, S_LINGER_MS);
    if (ch != KN_CH_IOPUB) {
        zsock_set_router_handover (sock, 1);    //  a reconnecting client keeps its identity
        //  Frames far past the cap are cut at the transport; the rest is
        //  measured (and logged) by the wire codec.
        size_t cut = max_msg < (size_t) INT_MAX / 2 ? 2 * max_msg + 65536 : (size_t) INT_MAX;
        zsock_set_maxmsgsize (sock, (int) cut);
    }
    if (gw_conn_listen_fd (conn, ports [ch]) >= 0)
        zsock_set_use_fd (sock, gw_conn_listen_fd (conn, ports [ch]));
    if (zsock_bind (sock, "%s", endpoint) < 0) {
        snprintf (err, errlen, "cannot bind %s on %s: %s", kn_channel_name (ch), endpoint,
                  zmq_strerror (zmq_errno ()));
        zsock_destroy (&sock);
        return -EADDRINUSE;
    }
    self->socks [ch] = sock;
    return 0;
}

static int
s_bind_all (gw_server_t *self, const gw_conn_t *conn, size_t max_msg, char *err, size_t errlen)
{
    kn_channel_t order [] = { KN_CH_SHELL, KN_CH_IOPUB, KN_CH_STDIN, KN_CH_CONTROL };
    for (size_t i = 0; i < 4; i++)
        if (s_bind (self, order [i], conn, max_msg, err, errlen) < 0)
            return -EADDRINUSE;
    char endpoint [300];
    if (gw_conn_endpoint (conn, GW_PORT_HB, endpoint, sizeof endpoint) < 0) {
        snprintf (err, errlen, "cannot form the hb endpoint");
        return -EINVAL;
    }
    self->hb = gw_heartbeat_new (endpoint, gw_conn_listen_fd (conn, GW_PORT_HB), err, errlen);
    return self->hb ? 0 : -EADDRINUSE;
}

static void
s_setup_loop (gw_server_t *self)
{
    self->loop = zloop_new ();
    if (!self->loop)
        abort ();
    for (kn_channel_t ch = KN_CH_SHELL; ch <= KN_CH_STDIN; ch++) {
        zloop_reader (self->loop, self->socks [ch], s_on_client, self);
        zloop_reader_set_tolerant (self->loop, self->socks [ch]);
    }
    zloop_timer (self->loop, S_TICK_MS, 0, s_on_tick, self);
    if (self->signal_fd >= 0) {
        zmq_pollitem_t item = { NULL, self->signal_fd, ZMQ_POLLIN, 0 };
        zloop_poller (self->loop, &item, s_on_signal, self);
        zloop_poller_set_tolerant (self->loop, &item);
    }
}

gw_server_t *
gw_server_new (const gw_conn_t *conn, gw_backend_t **backend_p, const gw_session_opts_t *opts,
               size_t max_msg, int signal_fd, char *err, size_t errlen)
{
    assert (conn && backend_p && *backend_p && err);
    gw_server_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->signal_fd = signal_fd;
    size_t keylen = 0;
    const uint8_t *key = gw_conn_key (conn, &keylen);
    gw_hmac_t *hmac = gw_hmac_new (gw_conn_scheme (conn), key, keylen);
    if (!hmac) {
        snprintf (err, errlen, "signature_scheme %s is not supported", gw_conn_scheme (conn));
        goto fail;
    }
    self->wire = gw_wire_new (&hmac, max_msg);
    if (s_bind_all (self, conn, max_msg ? max_msg : GW_WIRE_MAX_DEFAULT, err, errlen) < 0)
        goto fail;
    self->session = gw_session_new (backend_p, opts, s_emit, self);
    s_setup_loop (self);
    gw_log (GW_LOG_INFO, "gateway.listening", "transport=%s ip=%s shell=%d iopub=%d stdin=%d "
            "control=%d hb=%d signed=%s prebound=%s", gw_conn_transport (conn),
            gw_conn_ip (conn), gw_conn_port (conn, GW_PORT_SHELL),
            gw_conn_port (conn, GW_PORT_IOPUB), gw_conn_port (conn, GW_PORT_STDIN),
            gw_conn_port (conn, GW_PORT_CONTROL), gw_conn_port (conn, GW_PORT_HB),
            keylen ? "yes" : "no", gw_conn_listen_fd (conn, GW_PORT_SHELL) >= 0 ? "yes" : "no");
    return self;
fail:
    gw_backend_destroy (backend_p);
    gw_server_destroy (&self);
    return NULL;
}

void
gw_server_destroy (gw_server_t **self_p)
{
    assert (self_p);
    gw_server_t *self = *self_p;
    if (!self)
        return;
    gw_session_destroy (&self->session);        //  the kernel goes first
    zloop_destroy (&self->loop);
    gw_heartbeat_destroy (&self->hb);
    for (int ch = 0; ch < KN_CH_COUNT; ch++)
        zsock_destroy (&self->socks [ch]);
    gw_wire_destroy (&self->wire);
    free (self);
    *self_p = NULL;
}

void
gw_server_watch_parent (gw_server_t *self, int pid)
{
    assert (self && pid > 0);
    self->parent = pid;
}

int
gw_server_run (gw_server_t *self)
{
    assert (self);
    char err [300];
    if (gw_session_start (self->session, err, sizeof err) < 0) {
        gw_log (GW_LOG_ERROR, "gateway.start_failed", "reason=\"%s\"", err);
        return 1;
    }
    s_sync (self);
    while (!gw_session_finished (self->session) && !zsys_interrupted) {
        int rc = zloop_start (self->loop);
        if (rc > 0) {
            gw_log (GW_LOG_ERROR, "gateway.reactor_failed", "rc=%d", rc);
            return 1;
        }
    }
    return gw_session_finished (self->session) ? gw_session_exit_code (self->session) : 1;
}
