/*  gw_listen - listening sockets for a connection file's ports, made
    before the gateway runs.

    A Jupyter client connects about 15 ms after it launched the kernel; the
    gateway binds about 25 ms in, because libzmq and its dependencies take
    ~15 ms to load. A refused connect costs ZMQ's 100 ms reconnect interval.
    So cellvm-launch (libc, jansson, libcrypto) binds and listens first and
    execs the gateway with the fds (--listen-fds), which ZMQ adopts
    (ZMQ_USE_FD); the kernel queues the client's connections meanwhile.
    See docs/gateway.md.
*/
#ifndef GW_LISTEN_H
#define GW_LISTEN_H

#include "wire/gw_conn.h"

//  Bind and listen on every port of conn, in gw_port_t order. Only for tcp
//  with an IPv4 literal or "*" / "0.0.0.0"; -ENOTSUP otherwise. 0, or
//  -errno + err with nothing left open.
int gw_listen_open (const gw_conn_t *conn, int fds [GW_PORT_COUNT], char *err, size_t errlen);

//  Parse "A,B,C,D,E" (five fds, gw_port_t order). 0 or -EINVAL.
int gw_listen_parse (const char *text, int fds [GW_PORT_COUNT]);

//  Check that fds came from gw_listen_open for conn: each a listening TCP
//  socket bound to its port. 0, or -EINVAL + err naming the first that is not.
int gw_listen_check (const gw_conn_t *conn, const int fds [GW_PORT_COUNT], char *err,
                     size_t errlen);

#endif
