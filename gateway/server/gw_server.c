/*  gw_server - the Jupyter-facing side of the gateway, and its reactor.

    Sends never block: ROUTER drops what it cannot route and PUB drops past
    its high-water mark, and both are sent with ZMQ_DONTWAIT, so one slow or
    vanished client cannot stall the kernel's output for the others.
*/
#include "server/gw_server.h"
#include "server/gw_curve.h"
#include "server/gw_heartbeat.h"
#include "base/gw_log.h"
#include "server/gw_out_replay.h"
#include "wire/gw_wire.h"
#include "ch_clock.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define S_LINGER_MS 250                         //  flush the last replies, then let go
#define S_TICK_MS 20                            //  session timers
#define S_MAX_FRAMES 256                        //  frames in one client message
#define S_DRAIN_MAX 64                          //  messages per socket event
#define S_TRANSPORT_MAX (1024u << 20)           //  ZeroMQ's cut for one frame
#define S_ADOPT_MIN (64u << 10)                 //  buffers this big are not copied
#define S_TOPIC_MAX 1024                        //  longest subscription welcomed

struct _gw_server_t {
    zloop_t *loop;                              //  the reactor
    zsock_t *socks [CH_COUNT];               //  shell, control, stdin, iopub (by channel)
    gw_heartbeat_t *hb;                         //  echo actor
    gw_wire_t *wire;                            //  verify and sign
    gw_session_t *session;                      //  the kernel and its requests
    int signal_fd;                              //  borrowed, -1 when none
    int parent;                                 //  client pid to watch, 0 = none
    zmq_pollitem_t chan_item;                   //  the channel fd as registered
    bool chan_polled;                           //  chan_item is registered
    zmq_pollitem_t backend_item;                //  the backend's event fd as registered
    bool backend_polled;                        //  backend_item is registered
    size_t max_msg;                             //  the cap on client messages
    int64_t slow_ms;                            //  watchdog: log turns over this, 0: off
    int schedstat_fd;                           //  the reactor thread's, -1: not opened
    int64_t turn_wait0;                         //  its runqueue wait when the turn began
    int64_t turn_run0;                          //  its time on a CPU then
    bool turn_known;                            //  both were read
    gw_server_tick_fn *tick_fn;                 //  also on every tick, NULL: none
    void *tick_arg;
    gw_out_replay_t *replay;                    //  cells' output, cellvm_replay_request
    bool v55;                                   //  protocol 5.5: XPUB iopub, welcomes
    bool replay_released;                       //  for this pause
};

//  --------------------------------------------------------------------------
//  The watchdog: with CELLVM_WATCHDOG_MS set, a reactor turn that takes
//  longer is logged with its cause (docs/gateway.md). The tests set it to 50
//  and fail on any such line.

//  The reactor thread's time on a CPU and time runnable but waiting for one,
//  in ns, from /proc/thread-self/schedstat; false when unknown. A turn that
//  waited for a CPU on a busy host is the host's doing, not the reactor's;
//  the rest of a turn is its own work (on a CPU) or time it was blocked.
static bool
s_schedstat (gw_server_t *self, int64_t *run_p, int64_t *wait_p)
{
    if (self->schedstat_fd == -1) {
        self->schedstat_fd = open ("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        if (self->schedstat_fd < 0)
            self->schedstat_fd = -2;            //  no procfs: wall time alone
    }
    char buf [96];
    ssize_t n = self->schedstat_fd >= 0 ? pread (self->schedstat_fd, buf, sizeof buf - 1, 0) : -1;
    unsigned long long run = 0, wait = 0;
    if (n <= 0)
        return false;
    buf [n] = 0;
    if (sscanf (buf, "%llu %llu", &run, &wait) != 2)
        return false;
    *run_p = (int64_t) run;
    *wait_p = (int64_t) wait;
    return true;
}

static int64_t
s_turn_begin (gw_server_t *self)
{
    if (self->slow_ms <= 0)
        return 0;
    self->turn_known = s_schedstat (self, &self->turn_run0, &self->turn_wait0);
    return ch_clock_mono_ms ();
}

//  The line says where the time went: waiting for a CPU (not held against
//  the turn), on a CPU (the reactor's own work), and the rest, blocked (in
//  a system call, a page fault served from disk, a lock).
static void
s_turn_end (gw_server_t *self, int64_t t0, const char *cause, const char *detail)
{
    if (self->slow_ms <= 0)
        return;
    int64_t ms = ch_clock_mono_ms () - t0;
    if (ms <= self->slow_ms)
        return;
    int64_t run1 = 0, wait1 = 0;
    bool known = self->turn_known && s_schedstat (self, &run1, &wait1);
    int64_t waited = known ? (wait1 - self->turn_wait0) / 1000000 : 0;
    int64_t cpu = known ? (run1 - self->turn_run0) / 1000000 : ms;
    if (ms - waited <= self->slow_ms)
        return;
    int64_t blocked = ms - waited - cpu > 0 ? ms - waited - cpu : 0;
    gw_log (GW_LOG_WARN, "reactor.slow", "ms=%lld waited_for_cpu_ms=%lld cpu_ms=%lld "
            "blocked_ms=%lld cause=%s detail=%.64s", (long long) ms, (long long) waited,
            (long long) cpu, (long long) blocked, cause, detail ? detail : "-");
}

//  --------------------------------------------------------------------------
//  Outgoing: the session's emit callback.

//  ZeroMQ releases a buffer it was handed without a copy.
static void
s_free_plain (void *data, void *hint)
{
    (void) hint;
    free (data);
}

static void
s_free_zframe (void *data, void *hint)
{
    (void) data;
    zframe_t *frame = hint;
    zframe_destroy (&frame);
}

//  The message's buffers go out as they are, moved into ZeroMQ (no copy).
static int
s_send_buffers (void *handle, ch_msg_t *msg)
{
    size_t n = ch_msg_nbuffers (msg);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        ch_free_fn *free_fn = NULL;
        void *hint = NULL;
        uint8_t *data = ch_msg_take_buffer (msg, i, &len, &free_fn, &hint);
        zmq_msg_t part;
        if (data && len)
            zmq_msg_init_data (&part, data, len, free_fn ? free_fn : s_free_plain, hint);
        else {
            ch_buf_release (data, free_fn, hint);
            zmq_msg_init (&part);
        }
        if (zmq_msg_send (&part, handle, ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0) {
            zmq_msg_close (&part);
            return -1;
        }
    }
    return 0;
}

//  Sign and send msg as it is; iopub output is also kept for replays.
static void
s_send (gw_server_t *self, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    assert (ch < CH_CELLVM && self->socks [ch]);
    gw_frames_t *frames = gw_wire_encode_head (self->wire, ids, msg);
    if (!frames) {
        gw_log (GW_LOG_ERROR, "client.send_failed", "channel=%s reason=\"cannot sign\"",
                ch_channel_name (ch));
        return;
    }
    if (ch == CH_IOPUB)
        gw_out_replay_record (self->replay, msg, frames, ids ? gw_frames_size (ids) : 0);
    void *handle = zsock_resolve (self->socks [ch]);
    size_t n = gw_frames_size (frames);
    bool more = ch_msg_nbuffers (msg) > 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const gw_frame_t *f = gw_frames_get (frames, i);
        int flags = ZMQ_DONTWAIT | (i + 1 < n || more ? ZMQ_SNDMORE : 0);
        rc = zmq_send (handle, f->data, f->size, flags) < 0 ? -1 : 0;
    }
    if (rc == 0 && more)
        rc = s_send_buffers (handle, msg);
    if (rc < 0)
        gw_log (GW_LOG_WARN, "client.send_failed", "channel=%s msg_type=%s reason=\"%s\"",
                ch_channel_name (ch), ch_msg_type (msg), zmq_strerror (zmq_errno ()));
    if (gw_log_enabled (GW_LOG_DEBUG))
        gw_log (GW_LOG_DEBUG, "client.send", "channel=%s msg_type=%s", ch_channel_name (ch),
                ch_msg_type (msg));
    gw_frames_destroy (&frames);
}

//  Protocol 5.5: a new subscriber gets iopub_welcome on its own topic, with
//  no parent. Every subscription is passed up (XPUB_VERBOSE), so a second
//  subscriber to "" gets its own.
static void
s_welcome (gw_server_t *self, const uint8_t *topic, size_t len)
{
    json_t *sub = len <= S_TOPIC_MAX ? json_stringn ((const char *) topic, len) : NULL;
    if (!sub) {                                 //  not UTF-8, or absurdly long
        gw_log (GW_LOG_DEBUG, "client.drop", "channel=iopub reason=\"subscription not "
                "welcomed\" bytes=%zu", len);
        return;
    }
    json_t *content = json_pack ("{s:o}", "subscription", sub);
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, "iopub_welcome", NULL, &content,
                                gw_session_id (self->session));
    gw_out_stamp_5_5 (msg);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, topic, len);
    s_send (self, CH_IOPUB, ids, msg);
    gw_frames_destroy (&ids);
    ch_msg_destroy (&msg);
}

//  Subscriptions that arrived, welcomed. Also called before each IOPub
//  message, so a subscription ZeroMQ has applied is welcomed before the
//  next message can reach it.
static void
s_welcome_pending (gw_server_t *self)
{
    void *handle = zsock_resolve (self->socks [CH_IOPUB]);
    for (int i = 0; i < S_DRAIN_MAX && (zsock_events (self->socks [CH_IOPUB]) & ZMQ_POLLIN); i++) {
        zmq_msg_t sub;
        zmq_msg_init (&sub);
        if (zmq_msg_recv (&sub, handle, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&sub);
            break;
        }
        const uint8_t *data = zmq_msg_data (&sub);
        if (zmq_msg_size (&sub) >= 1 && data [0] == 1 && !zmq_msg_more (&sub))
            s_welcome (self, data + 1, zmq_msg_size (&sub) - 1);
        zmq_msg_close (&sub);
    }
}

static void
s_emit (void *arg, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    gw_server_t *self = (gw_server_t *) arg;
    if (self->v55 && ch == CH_IOPUB)
        s_welcome_pending (self);
    if (self->v55)
        gw_out_stamp_5_5 (msg);
    s_send (self, ch, ids, msg);
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
    int64_t t0 = s_turn_begin (self);
    //  A timer may have replaced the channel since this poll: stale events
    //  for a closed fd must not reach the new one.
    if (item->fd == gw_session_fd (self->session)) {
        if (item->revents & (ZMQ_POLLIN | ZMQ_POLLERR))
            gw_session_readable (self->session);
        if ((item->revents & ZMQ_POLLOUT) && item->fd == gw_session_fd (self->session))
            gw_session_writable (self->session);
    }
    int rc = s_sync (self);
    s_turn_end (self, t0, "kernel.channel", NULL);
    return rc;
}

static int
s_on_backend (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    gw_server_t *self = (gw_server_t *) arg;
    int64_t t0 = s_turn_begin (self);
    if (item->fd == gw_session_backend_fd (self->session))
        gw_session_backend_event (self->session);
    int rc = s_sync (self);
    s_turn_end (self, t0, "backend.event", NULL);
    return rc;
}

static int
s_on_worker (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop, (void) item;
    gw_server_t *self = (gw_server_t *) arg;
    int64_t t0 = s_turn_begin (self);
    gw_session_worker_event (self->session);
    int rc = s_sync (self);
    s_turn_end (self, t0, "worker.done", NULL);
    return rc;
}

//  A paused session keeps ~nothing in RAM: its kept output goes too.
static void
s_release_when_paused (gw_server_t *self)
{
    bool paused = strcmp (gw_session_state_name (self->session), "paused") == 0;
    if (paused && !self->replay_released) {
        size_t bytes = gw_out_replay_release (self->replay);
        if (bytes) {
            malloc_trim (0);
            gw_log (GW_LOG_INFO, "replay.released", "bytes=%zu reason=paused", bytes);
        }
    }
    self->replay_released = paused;
}

static int
s_on_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *self = (gw_server_t *) arg;
    int64_t t0 = s_turn_begin (self);
    if (self->parent && kill (self->parent, 0) < 0 && errno == ESRCH) {
        gw_log (GW_LOG_WARN, "gateway.orphaned", "parent=%d action=shutdown", self->parent);
        self->parent = 0;
        gw_session_shutdown (self->session);
    }
    gw_session_tick (self->session);
    gw_out_replay_pump (self->replay, gw_session_id (self->session));
    s_release_when_paused (self);
    if (self->tick_fn)
        self->tick_fn (self->tick_arg, self->session);
    int rc = s_sync (self);
    s_turn_end (self, t0, "tick", NULL);
    return rc;
}

static int
s_on_subscription (zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop, (void) sock;
    gw_server_t *self = (gw_server_t *) arg;
    int64_t t0 = s_turn_begin (self);
    s_welcome_pending (self);
    int rc = s_sync (self);
    s_turn_end (self, t0, "client.request", "iopub");
    return rc;
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
        //  SIGTERM is an eviction or a drain: a named session is suspended for
        //  its next launch. SIGHUP, the terminal gone, ends it.
        bool term = si.ssi_signo == SIGTERM;
        gw_log (GW_LOG_INFO, "gateway.signal", "signal=SIG%s action=%s",
                sigabbrev_np ((int) si.ssi_signo), term ? "terminate" : "shutdown");
        if (term)
            gw_session_terminate (self->session);
        else
            gw_session_shutdown (self->session);
    }
    return s_sync (self);
}

//  --------------------------------------------------------------------------
//  Incoming client messages.

//  A request over --max-msg whose envelope verifies: answer it in words,
//  so the client is not left waiting. 0 when answered.
static int
s_refuse_oversize (gw_server_t *self, ch_channel_t ch, const gw_frame_t *frames, size_t n)
{
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    if (gw_wire_decode_envelope (self->wire, ch, frames, n, &msg, &ids, NULL) < 0)
        return -EBADMSG;
    char why [512];
    snprintf (why, sizeof why, "The request is %zu bytes, over the gateway's %zu-byte message "
              "limit (--max-msg). Send large files in parts below the limit: one "
              "cellvm_put_request per part, with {\"append\": true} on every part after the "
              "first.", gw_wire_size (frames, n), self->max_msg);
    gw_session_refuse (self->session, &ids, &msg, why);
    return 0;
}

//  Frames the decoder adopted as buffers now belong to msg: out of zmsg.
static void
s_release_adopted (zmsg_t *zmsg, const gw_frame_t *frames, size_t n, const ch_msg_t *msg)
{
    for (size_t i = 0; i < n; i++) {
        if (!frames [i].owner)
            continue;
        for (size_t b = 0; b < ch_msg_nbuffers (msg); b++)
            if (ch_msg_buffer (msg, b, NULL) == frames [i].data) {
                zmsg_remove (zmsg, frames [i].owner);
                break;
            }
    }
}

static void
s_handle_client (gw_server_t *self, ch_channel_t ch, zmsg_t *zmsg)
{
    static uint8_t empty [1];
    size_t n = zmsg_size (zmsg);
    if (n > S_MAX_FRAMES) {
        gw_log (GW_LOG_WARN, "client.drop", "channel=%s reason=\"too many frames\" frames=%zu",
                ch_channel_name (ch), n);
        return;
    }
    gw_frame_t frames [S_MAX_FRAMES];
    size_t i = 0;
    for (zframe_t *f = zmsg_first (zmsg); f; f = zmsg_next (zmsg), i++) {
        frames [i].data = zframe_size (f) ? zframe_data (f) : empty;
        frames [i].size = zframe_size (f);
        frames [i].owner = zframe_size (f) >= S_ADOPT_MIN ? f : NULL;
    }
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    const char *why = NULL;
    int rc = gw_wire_decode (self->wire, ch, frames, n, &msg, &ids, &why);
    if (rc == -EMSGSIZE && s_refuse_oversize (self, ch, frames, n) == 0)
        return;
    if (rc < 0) {
        gw_log (GW_LOG_WARN, "client.drop", "channel=%s reason=\"%s\" frames=%zu",
                ch_channel_name (ch), why ? why : "malformed", n);
        return;
    }
    s_release_adopted (zmsg, frames, n, msg);
    if (ch == CH_CONTROL && strcmp (ch_msg_type (msg), "cellvm_replay_request") == 0)
        gw_out_replay_request (self->replay, &ids, &msg, gw_session_id (self->session));
    else
        gw_session_request (self->session, &ids, &msg);
}

static int
s_on_client (zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop;
    gw_server_t *self = (gw_server_t *) arg;
    ch_channel_t ch = sock == self->socks [CH_SHELL] ? CH_SHELL
                    : sock == self->socks [CH_CONTROL] ? CH_CONTROL : CH_STDIN;
    for (int i = 0; i < S_DRAIN_MAX && (zsock_events (sock) & ZMQ_POLLIN); i++) {
        int64_t t0 = s_turn_begin (self);
        zmsg_t *zmsg = zmsg_recv (sock);
        if (!zmsg)
            break;
        s_handle_client (self, ch, zmsg);
        zmsg_destroy (&zmsg);
        s_turn_end (self, t0, "client.request", ch_channel_name (ch));
        if (gw_session_finished (self->session))
            break;
    }
    return s_sync (self);
}

//  --------------------------------------------------------------------------
//  Construction.

//  A new socket for ch with its options, before any bind; NULL when out of sockets.
static zsock_t *
s_new_sock (gw_server_t *self, ch_channel_t ch, size_t max_msg)
{
    bool xpub = ch == CH_IOPUB && self->v55;
    zsock_t *sock = zsock_new (xpub ? ZMQ_XPUB : ch == CH_IOPUB ? ZMQ_PUB : ZMQ_ROUTER);
    if (!sock)
        return NULL;
    zsock_set_linger (sock, S_LINGER_MS);
    if (xpub) {
        zsock_set_xpub_verbose (sock, 1);       //  every subscriber is welcomed
        //  XPUB keeps what subscribers send up until read: subscriptions are
        //  small, so a peer sending more is cut off at the transport.
        zsock_set_maxmsgsize (sock, 4 * S_TOPIC_MAX);
    }
    if (ch != CH_IOPUB) {
        zsock_set_router_handover (sock, 1);    //  a reconnecting client keeps its identity
        //  Frames far past the cap are cut at the transport; the rest is
        //  measured (and logged) by the wire codec.
        //  Up to S_TRANSPORT_MAX, a message over the cap still arrives and is
        //  answered in words (s_refuse_oversize); past it ZeroMQ drops the peer.
        size_t cut = max_msg < S_TRANSPORT_MAX / 2 ? S_TRANSPORT_MAX : (size_t) INT_MAX;
        zsock_set_maxmsgsize (sock, (int) cut);
    }
    return sock;
}

static int
s_bind (gw_server_t *self, ch_channel_t ch, const gw_conn_t *conn, size_t max_msg,
        char *err, size_t errlen)
{
    static const gw_port_t ports [] = { GW_PORT_SHELL, GW_PORT_CONTROL, GW_PORT_STDIN,
                                        GW_PORT_IOPUB };
    char endpoint [300];
    if (gw_conn_endpoint (conn, ports [ch], endpoint, sizeof endpoint) < 0) {
        snprintf (err, errlen, "cannot form the %s endpoint", ch_channel_name (ch));
        return -EINVAL;
    }
    zsock_t *sock = s_new_sock (self, ch, max_msg);
    if (!sock) {
        snprintf (err, errlen, "cannot create the %s socket", ch_channel_name (ch));
        return -ENOMEM;
    }
    if (gw_conn_listen_fd (conn, ports [ch]) >= 0)
        zsock_set_use_fd (sock, gw_conn_listen_fd (conn, ports [ch]));
    //  Security options before the bind: each connection accepted takes them.
    int rc = gw_curve_server (zsock_resolve (sock), conn, ch_channel_name (ch), err, errlen);
    if (rc == 0 && zsock_bind (sock, "%s", endpoint) < 0) {
        snprintf (err, errlen, "cannot bind %s on %s: %s", ch_channel_name (ch), endpoint,
                  zmq_strerror (zmq_errno ()));
        rc = -EADDRINUSE;
    }
    if (rc < 0)
        zsock_destroy (&sock);
    self->socks [ch] = sock;
    return rc;
}

static int
s_bind_all (gw_server_t *self, const gw_conn_t *conn, size_t max_msg, char *err, size_t errlen)
{
    ch_channel_t order [] = { CH_SHELL, CH_IOPUB, CH_STDIN, CH_CONTROL };
    if (gw_curve_check (conn, err, errlen) < 0)
        return -EINVAL;
    for (size_t i = 0; i < 4; i++)
        if (s_bind (self, order [i], conn, max_msg, err, errlen) < 0)
            return -EADDRINUSE;
    self->hb = gw_heartbeat_new (conn, err, errlen);
    return self->hb ? 0 : -EADDRINUSE;
}

static void
s_setup_loop (gw_server_t *self)
{
    self->loop = zloop_new ();
    if (!self->loop)
        abort ();
    for (ch_channel_t ch = CH_SHELL; ch <= CH_STDIN; ch++) {
        zloop_reader (self->loop, self->socks [ch], s_on_client, self);
        zloop_reader_set_tolerant (self->loop, self->socks [ch]);
    }
    if (self->v55) {
        zloop_reader (self->loop, self->socks [CH_IOPUB], s_on_subscription, self);
        zloop_reader_set_tolerant (self->loop, self->socks [CH_IOPUB]);
    }
    zloop_timer (self->loop, S_TICK_MS, 0, s_on_tick, self);
    zmq_pollitem_t worker = { NULL, gw_session_worker_fd (self->session), ZMQ_POLLIN, 0 };
    zloop_poller (self->loop, &worker, s_on_worker, self);
    zloop_poller_set_tolerant (self->loop, &worker);
    if (self->signal_fd >= 0) {
        zmq_pollitem_t item = { NULL, self->signal_fd, ZMQ_POLLIN, 0 };
        zloop_poller (self->loop, &item, s_on_signal, self);
        zloop_poller_set_tolerant (self->loop, &item);
    }
}

gw_server_t *
gw_server_new (const gw_conn_t *conn, gw_backend_t **backend_p, const gw_session_opts_t *opts,
               size_t max_msg, const char *protocol, int signal_fd, char *err, size_t errlen)
{
    assert (conn && backend_p && *backend_p && err);
    gw_server_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->signal_fd = signal_fd;
    self->schedstat_fd = -1;
    self->v55 = protocol && strcmp (protocol, "5.5") == 0;
    self->replay = gw_out_replay_new (s_emit, self, 0, 0);
    size_t keylen = 0;
    const uint8_t *key = gw_conn_key (conn, &keylen);
    gw_hmac_t *hmac = gw_hmac_new (gw_conn_scheme (conn), key, keylen);
    if (!hmac) {
        snprintf (err, errlen, "signature_scheme %s is not supported", gw_conn_scheme (conn));
        goto fail;
    }
    self->wire = gw_wire_new (&hmac, max_msg);
    gw_wire_set_adopt (self->wire, s_free_zframe);
    self->max_msg = max_msg ? max_msg : GW_WIRE_MAX_DEFAULT;
    const char *slow = getenv ("CELLVM_WATCHDOG_MS");
    self->slow_ms = slow ? atoll (slow) : 0;
    if (s_bind_all (self, conn, max_msg ? max_msg : GW_WIRE_MAX_DEFAULT, err, errlen) < 0)
        goto fail;
    self->session = gw_session_new (backend_p, opts, s_emit, self);
    s_setup_loop (self);
    gw_log (GW_LOG_INFO, "gateway.listening", "transport=%s ip=%s shell=%d iopub=%d stdin=%d "
            "control=%d hb=%d protocol=%s signed=%s curve=%s prebound=%s",
            gw_conn_transport (conn),
            gw_conn_ip (conn), gw_conn_port (conn, GW_PORT_SHELL),
            gw_conn_port (conn, GW_PORT_IOPUB), gw_conn_port (conn, GW_PORT_STDIN),
            gw_conn_port (conn, GW_PORT_CONTROL), gw_conn_port (conn, GW_PORT_HB),
            self->v55 ? "5.5" : "5.3", keylen ? "yes" : "no",
            gw_conn_curve (conn, NULL, NULL) ? "yes" : "no", gw_conn_listen_fd (conn, GW_PORT_SHELL) >= 0 ? "yes" : "no");
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
    gw_out_replay_destroy (&self->replay);
    zloop_destroy (&self->loop);
    gw_heartbeat_destroy (&self->hb);
    for (int ch = 0; ch < CH_COUNT; ch++)
        zsock_destroy (&self->socks [ch]);
    gw_wire_destroy (&self->wire);
    if (self->schedstat_fd >= 0)
        close (self->schedstat_fd);
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

gw_session_t *
gw_server_session (gw_server_t *self)
{
    assert (self);
    return self->session;
}

void
gw_server_set_tick_fn (gw_server_t *self, gw_server_tick_fn *fn, void *arg)
{
    assert (self);
    self->tick_fn = fn;
    self->tick_arg = arg;
}
