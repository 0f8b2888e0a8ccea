/*  gw_heartbeat - the Jupyter heartbeat: echo every message, always.

    A ROUTER socket that sends each message back as it came (identity
    first), as xeus-zmq does: it answers REQ and DEALER clients alike. The
    actor reports its bind result on the pipe ("OK" or the reason), then
    serves until $TERM, in both cases, so destroy never waits on a dead
    thread.
*/
#include "server/gw_heartbeat.h"
#include "server/gw_curve.h"
#include "base/gw_log.h"

#include <assert.h>
#include <czmq.h>
#include <stdio.h>
#include <string.h>

struct _gw_heartbeat_t {
    zactor_t *actor;                            //  the echo thread
};

//  Echo until $TERM; sock may be NULL after a failed bind.
static void
s_serve (zsock_t *pipe, zsock_t *sock)
{
    zpoller_t *poller = zpoller_new (pipe, sock, NULL);
    assert (poller);
    while (true) {
        void *which = zpoller_wait (poller, -1);
        if (which == sock) {
            zmsg_t *msg = zmsg_recv (sock);
            if (msg)
                zmsg_send (&msg, sock);         //  ROUTER drops it if the peer left
            continue;
        }
        if (which != pipe)
            break;                              //  interrupted or context terminated
        char *command = zstr_recv (pipe);
        bool term = !command || streq (command, "$TERM");
        zstr_free (&command);
        if (term)
            break;
    }
    zpoller_destroy (&poller);
}

typedef struct {
    const char *endpoint;
    const gw_conn_t *conn;                      //  its hb listen fd and CurveZMQ keys
} s_args_t;

static void
s_actor (zsock_t *pipe, void *arg)
{
    const s_args_t *args = arg;
    const char *endpoint = args->endpoint;
    zsock_t *sock = zsock_new (ZMQ_ROUTER);
    assert (sock);
    zsock_set_linger (sock, 0);
    if (gw_conn_listen_fd (args->conn, GW_PORT_HB) >= 0)
        zsock_set_use_fd (sock, gw_conn_listen_fd (args->conn, GW_PORT_HB));
    char report [300] = "";
    int rc = gw_curve_server (zsock_resolve (sock), args->conn, "hb", report, sizeof report);
    if (rc == 0 && zsock_bind (sock, "%s", endpoint) < 0)
        snprintf (report, sizeof report, "cannot bind hb on %s: %s", endpoint,
                  zmq_strerror (zmq_errno ()));
    if (report [0])
        zsock_destroy (&sock);
    else
        snprintf (report, sizeof report, "OK");
    zsock_signal (pipe, 0);
    zstr_send (pipe, report);
    s_serve (pipe, sock);
    zsock_destroy (&sock);
}

gw_heartbeat_t *
gw_heartbeat_new (const gw_conn_t *conn, char *err, size_t errlen)
{
    assert (conn && err);
    char endpoint [300];
    if (gw_conn_endpoint (conn, GW_PORT_HB, endpoint, sizeof endpoint) < 0) {
        snprintf (err, errlen, "cannot form the hb endpoint");
        return NULL;
    }
    gw_heartbeat_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    s_args_t args = { endpoint, conn };         //  read before the actor reports
    self->actor = zactor_new (s_actor, &args);
    char *report = self->actor ? zstr_recv (self->actor) : NULL;
    if (!report || !streq (report, "OK")) {
        snprintf (err, errlen, "%s", report ? report : "cannot start the heartbeat thread");
        zstr_free (&report);
        gw_heartbeat_destroy (&self);
        return NULL;
    }
    zstr_free (&report);
    gw_log (GW_LOG_DEBUG, "heartbeat.ready", "endpoint=%s", endpoint);
    return self;
}

void
gw_heartbeat_destroy (gw_heartbeat_t **self_p)
{
    assert (self_p);
    gw_heartbeat_t *self = *self_p;
    if (!self)
        return;
    zactor_destroy (&self->actor);
    free (self);
    *self_p = NULL;
}
