/*  gw_heartbeat - the Jupyter heartbeat: echo every message, always.

    An actor (a thread of its own with its own socket) so the echo never
    waits behind a running cell, a booting VM or a busy reactor. Clients
    that did not start the kernel (jupyter console --existing) judge
    liveness by it alone, with a one-second deadline.
*/
#ifndef GW_HEARTBEAT_H
#define GW_HEARTBEAT_H

#include "wire/gw_conn.h"

#include <stddef.h>

typedef struct _gw_heartbeat_t gw_heartbeat_t;

//  Bind conn's hb endpoint (tcp://IP:PORT or ipc://PATH), adopting its hb
//  listen fd when it has one (gw_listen) and as a CURVE server when it has
//  the keys (gw_curve), and start echoing. conn is read only here. NULL
//  with a reason in err when the bind fails.
gw_heartbeat_t *gw_heartbeat_new (const gw_conn_t *conn, char *err, size_t errlen);

//  Stop the thread and close the socket; nulls *self_p. NULL-safe.
void gw_heartbeat_destroy (gw_heartbeat_t **self_p);

#endif
