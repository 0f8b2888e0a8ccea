/*  gw_server - the Jupyter-facing side of the gateway, and its reactor.

    Binds exactly the five endpoints of the connection file: shell, control
    and stdin as ROUTER, iopub as PUB (XPUB with protocol 5.5), hb as an
    echo actor. One zloop runs
    everything else on the calling thread: client sockets, the kernel's
    channel fd (through gw_session), a signal fd and a short tick.

    Every incoming client message goes through gw_wire_decode (size,
    delimiter, frames, signature, replay, JSON) before the session sees it;
    a message that fails is logged and dropped, and the gateway keeps
    serving. Every outgoing message is signed by gw_wire_encode.
*/
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include <stddef.h>

#include "backend/gw_backend.h"
#include "wire/gw_conn.h"
#include "session/gw_session.h"

typedef struct _gw_server_t gw_server_t;

//  Bind the sockets of conn (borrowed) and set up a session over
//  *backend_p (ownership moves in). max_msg caps one client message (0: 64
//  MiB). protocol "5.5" makes iopub an XPUB that welcomes each subscriber
//  and stamps 5.5 on what goes out; NULL or "5.3": as before. signal_fd
//  (-1: none) is a signalfd the reactor watches: SIGTERM and SIGHUP shut
//  down cleanly, SIGCHLD reaps. NULL with a reason in err.
gw_server_t *gw_server_new (const gw_conn_t *conn, gw_backend_t **backend_p,
                            const gw_session_opts_t *opts, size_t max_msg,
                            const char *protocol, int signal_fd, char *err, size_t errlen);

//  Close every socket (short linger, so the ports can be bound again at
//  once) and stop the kernel; nulls *self_p. NULL-safe.
void gw_server_destroy (gw_server_t **self_p);

//  Shut down cleanly once process pid is gone: the Jupyter client that
//  started us (JPY_PARENT_PID), as ipykernel does.
void gw_server_watch_parent (gw_server_t *self, int pid);

//  Start the kernel and serve until the session has shut down. Returns the
//  process exit code (0 after a clean shutdown).
int gw_server_run (gw_server_t *self);

//  The session (borrowed).
gw_session_t *gw_server_session (gw_server_t *self);
//  Also call fn (arg, session) on every reactor tick (status files).
typedef void (gw_server_tick_fn) (void *arg, gw_session_t *session);
void gw_server_set_tick_fn (gw_server_t *self, gw_server_tick_fn *fn, void *arg);

#endif
