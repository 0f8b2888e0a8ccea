/*  gw_remote_serve - cellvm-remote once the reply is out: EG's comm
    requests, the launcher's own signals, and the control messages that
    carry interrupts and shutdowns to the gateway (see gw_remote.h).
*/
#include "cli/gw_remote_int.h"
#include "base/gw_log.h"
#include "ch_clock.h"
#include "ch_msg.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_REAP_MS 1000

//  The DEALER that speaks to the gateway's control port as a client would,
//  signed with the connection's key; made on first use.
static int
s_control_open (gw_remote_t *self)
{
    if (self->control)
        return 0;
    gw_hmac_t *hmac = gw_hmac_new ("hmac-sha256", (const uint8_t *) self->key,
                                   strlen (self->key));
    if (!hmac || !(self->wire = gw_wire_new (&hmac, 0))) {
        gw_hmac_destroy (&hmac);
        return -EIO;
    }
    //  The ports listen on the wildcard address, or on this one.
    const char *ip = strcmp (self->args->ip, "0.0.0.0") == 0 ? "127.0.0.1" : self->args->ip;
    self->control = zsock_new (ZMQ_DEALER);
    if (!self->control)
        return -EIO;
    zsock_set_linger (self->control, 1000);
    zsock_set_sndtimeo (self->control, 1000);
    if (zsock_connect (self->control, "tcp://%s:%d", ip, self->ports [GW_PORT_CONTROL]) != 0) {
        zsock_destroy (&self->control);
        return -EIO;
    }
    return 0;
}

//  One signed control request (content steals *content_p).
static int
s_control (gw_remote_t *self, const char *msg_type, json_t *content)
{
    int rc = s_control_open (self);
    ch_msg_t *msg = rc == 0 ? ch_msg_new (CH_CONTROL, msg_type, NULL, &content, self->session)
                            : NULL;
    json_decref (content);
    gw_frames_t *frames = msg ? gw_wire_encode (self->wire, NULL, msg) : NULL;
    zmsg_t *zmsg = frames ? zmsg_new () : NULL;
    for (size_t i = 0; zmsg && i < gw_frames_size (frames); i++) {
        const gw_frame_t *f = gw_frames_get (frames, i);
        zmsg_addmem (zmsg, f->data, f->size);
    }
    if (!zmsg || zmsg_send (&zmsg, self->control) != 0)
        rc = -EIO;
    zmsg_destroy (&zmsg);
    gw_frames_destroy (&frames);
    ch_msg_destroy (&msg);
    gw_log (rc == 0 ? GW_LOG_INFO : GW_LOG_ERROR, "remote.control", "msg_type=%s sent=%s",
            msg_type, rc == 0 ? "yes" : "no");
    return rc;
}

static void
s_signal_child (gw_remote_t *self, int sig)
{
    if (!gw_remote__reap (self))
        kill (self->child, sig);
}

//  The end: the gateway discards the session, then exits; killed if it
//  has not within grace_ms.
static void
s_shutdown (gw_remote_t *self, int grace_ms)
{
    int64_t at = ch_clock_mono_ms () + grace_ms;
    if (!self->kill_at_ms)
        s_control (self, "shutdown_request", json_pack ("{s:b}", "restart", 0));
    if (!self->kill_at_ms || at < self->kill_at_ms)
        self->kill_at_ms = at;
}

//  One request from the front.
static void
s_request (gw_remote_t *self, const gw_egreq_t *req)
{
    if (req->signum > 0)
        gw_log (GW_LOG_INFO, "remote.request", "signum=%d", req->signum);
    if (req->signum == 0 && gw_remote__reap (self))
        gw_rcomm_close (self->comm);            //  refused from now on: "dead"
    else if (req->signum == SIGINT)
        s_control (self, "interrupt_request", NULL);
    else if (req->signum == SIGTERM || req->signum == SIGKILL)
        s_shutdown (self, req->signum == SIGKILL ? GW_REMOTE_KILL_MS : GW_REMOTE_SHUTDOWN_MS);
    else if (req->signum > 0)
        gw_log (GW_LOG_WARN, "remote.request_ignored", "signum=%d reason=\"only 0, 2, 9 and "
                "15 have a meaning for cellvm\"", req->signum);
    if (req->shutdown)
        s_shutdown (self, GW_REMOTE_SHUTDOWN_MS);
}

//  The launcher's own signals.
static void
s_signals (gw_remote_t *self)
{
    struct signalfd_siginfo si;
    while (read (self->sig_fd, &si, sizeof si) == (ssize_t) sizeof si) {
        int sig = (int) si.ssi_signo;
        if (sig == SIGCHLD)
            gw_remote__reap (self);
        else if (sig == SIGINT)
            s_control (self, "interrupt_request", NULL);
        else {
            gw_log (GW_LOG_INFO, "remote.signal", "signal=%d forwarded_to=%d", sig,
                    (int) self->child);
            s_signal_child (self, sig);
        }
    }
}

static int
s_exit_code (int status)
{
    return WIFEXITED (status) ? WEXITSTATUS (status)
         : WIFSIGNALED (status) ? 128 + WTERMSIG (status) : 1;
}

int
gw_remote_serve (gw_remote_t *self)
{
    assert (self && self->child > 0);
    while (!gw_remote__reap (self)) {
        struct pollfd pfds [1 + GW_RCOMM_POLLFDS] = { { .fd = self->sig_fd, .events = POLLIN } };
        int64_t now = ch_clock_mono_ms ();
        //  At most S_REAP_MS between looks at the child: a SIGCHLD lost (one that
        //  was ignored when sent) cannot leave us waiting for ever.
        int timeout = self->kill_at_ms ? (int) (self->kill_at_ms > now ? self->kill_at_ms - now
                                                                       : 0) : S_REAP_MS;
        if (timeout > S_REAP_MS)
            timeout = S_REAP_MS;
        int n = 1 + gw_rcomm_pollfds (self->comm, pfds + 1, &timeout);
        if (poll (pfds, (nfds_t) n, timeout) < 0 && errno != EINTR)
            break;
        if (pfds [0].revents)
            s_signals (self);
        gw_egreq_t reqs [GW_RCOMM_CONNS];
        int got = gw_rcomm_step (self->comm, pfds + 1, n - 1, reqs, GW_RCOMM_CONNS);
        for (int i = 0; i < got; i++)
            s_request (self, &reqs [i]);
        if (self->kill_at_ms && ch_clock_mono_ms () >= self->kill_at_ms) {
            gw_log (GW_LOG_WARN, "remote.shutdown_kill", "reason=\"the gateway did not end "
                    "within %d ms of shutdown_request\"", GW_REMOTE_SHUTDOWN_MS);
            s_signal_child (self, SIGKILL);
            self->kill_at_ms = 0;
        }
    }
    gw_rcomm_close (self->comm);                //  EG's next poll: refused, "dead"
    if (!self->reaped) {
        waitpid (self->child, &self->status, 0);
        self->reaped = true;
    }
    gw_log (GW_LOG_INFO, "remote.gateway_exited", "status=%d", s_exit_code (self->status));
    return s_exit_code (self->status);
}
