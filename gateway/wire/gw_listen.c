/*  gw_listen - listening sockets for a connection file's ports, made
    before the gateway runs (see gw_listen.h).
*/
#include "wire/gw_listen.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stdbool.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

//  The IPv4 address conn binds to, or -ENOTSUP.
static int
s_addr (const gw_conn_t *conn, int port, struct sockaddr_in *sa)
{
    memset (sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons ((uint16_t) port);
    const char *ip = gw_conn_ip (conn);
    if (strcmp (gw_conn_transport (conn), "tcp") != 0 || port <= 0 || port > 65535)
        return -ENOTSUP;
    if (strcmp (ip, "*") == 0)
        sa->sin_addr.s_addr = htonl (INADDR_ANY);
    else if (inet_pton (AF_INET, ip, &sa->sin_addr) != 1)
        return -ENOTSUP;
    return 0;
}

static void
s_close_all (int fds [GW_PORT_COUNT])
{
    for (int i = 0; i < GW_PORT_COUNT; i++) {
        if (fds [i] >= 0)
            close (fds [i]);
        fds [i] = -1;
    }
}

int
gw_listen_open (const gw_conn_t *conn, int fds [GW_PORT_COUNT], char *err, size_t errlen)
{
    assert (conn && fds && err);
    int rc = 0;
    for (int i = 0; i < GW_PORT_COUNT; i++)
        fds [i] = -1;
    for (int i = 0; i < GW_PORT_COUNT && rc == 0; i++) {
        struct sockaddr_in sa;
        int one = 1, port = gw_conn_port (conn, (gw_port_t) i);
        if ((rc = s_addr (conn, port, &sa)) < 0) {
            snprintf (err, errlen, "only tcp on an IPv4 address is pre-bound");
            break;
        }
        fds [i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds [i] < 0
        ||  setsockopt (fds [i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0
        ||  bind (fds [i], (struct sockaddr *) &sa, sizeof sa) < 0
        ||  listen (fds [i], SOMAXCONN) < 0) {
            rc = -errno;
            snprintf (err, errlen, "cannot listen on %s port %d: %s", gw_conn_ip (conn), port,
                      strerror (errno));
        }
    }
    if (rc < 0)
        s_close_all (fds);
    return rc;
}

int
gw_listen_parse (const char *text, int fds [GW_PORT_COUNT])
{
    assert (text && fds);
    const char *p = text;
    for (int i = 0; i < GW_PORT_COUNT; i++) {
        char *end = NULL;
        errno = 0;
        long v = strtol (p, &end, 10);
        if (errno || end == p || v < 3 || v > 65535 || *end != (i + 1 < GW_PORT_COUNT ? ',' : 0))
            return -EINVAL;
        fds [i] = (int) v;
        p = end + 1;
    }
    return 0;
}

int
gw_listen_check (const gw_conn_t *conn, const int fds [GW_PORT_COUNT], char *err,
                 size_t errlen)
{
    assert (conn && fds && err);
    for (int i = 0; i < GW_PORT_COUNT; i++) {
        struct sockaddr_in want, got;
        socklen_t len = sizeof got;
        int type = 0, listening = 0;
        socklen_t tl = sizeof type, ll = sizeof listening;
        int port = gw_conn_port (conn, (gw_port_t) i);
        bool ok = s_addr (conn, port, &want) == 0
               && getsockopt (fds [i], SOL_SOCKET, SO_TYPE, &type, &tl) == 0
               && getsockopt (fds [i], SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) == 0
               && getsockname (fds [i], (struct sockaddr *) &got, &len) == 0
               && type == SOCK_STREAM && listening && got.sin_family == AF_INET
               && got.sin_port == want.sin_port && got.sin_addr.s_addr == want.sin_addr.s_addr;
        if (!ok) {
            snprintf (err, errlen, "--listen-fds: fd %d is not a socket listening on %s port %d "
                      "(the connection file's %s port)", fds [i], gw_conn_ip (conn), port,
                      gw_conn_port_name ((gw_port_t) i));
            return -EINVAL;
        }
    }
    return 0;
}
