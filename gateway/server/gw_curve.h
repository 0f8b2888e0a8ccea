/*  gw_curve - CurveZMQ on the gateway's five ports, as ipykernel 7.3 does it.

    When the connection file carries curve_publickey and curve_secretkey,
    every socket the gateway binds (shell, control, stdin, iopub, hb) is a
    CURVE server with that keypair, set before the bind, so a connection the
    listener adopted from cellvm-launch (ZMQ_USE_FD) gets it too. There is no
    ZAP handler, as in ipykernel: a client that knows the server's public key
    completes the handshake, whatever its own keypair (jupyter_client's
    clients use the same pair from the file; its heartbeat, a fresh one). A
    client without it, or with another server key, is never delivered a
    message and is never sent one. Without the keys nothing is set: plain
    ports, as before.
*/
#ifndef GW_CURVE_H
#define GW_CURVE_H

#include "wire/gw_conn.h"

#include <stddef.h>

//  Before any socket: when conn has keys, check that this libzmq has CURVE
//  (zmq_has) and that curve_publickey is the public key of curve_secretkey
//  (a mismatch would make every handshake fail, silently). 0 also when
//  conn has no keys; -ENOTSUP or -EINVAL with the reason in err.
int gw_curve_check (const gw_conn_t *conn, char *err, size_t errlen);

//  Make handle (a libzmq socket, not bound yet) a CURVE server with conn's
//  keypair; nothing when conn has none. 0, or -errno with the reason for
//  name ("shell"...) in err.
int gw_curve_server (void *handle, const gw_conn_t *conn, const char *name, char *err,
                     size_t errlen);

#endif
