/*  gw_rcomm - cellvm-remote's comm port: the listening socket on which
    Enterprise Gateway sends one JSON request per connection ({"signum": N},
    {"shutdown": 1}) and then closes its side; it reads nothing back.

    Nothing a peer does stops the launcher: a request is at most
    GW_EGREPLY_REQ_MAX bytes (more closes the connection), a connection
    that has not finished within GW_RCOMM_READ_MS is closed, at most
    GW_RCOMM_CONNS are open at once (a new one pushes out the oldest, so a
    flood of half-open connections cannot keep EG's liveness poll out), and
    garbage is logged and dropped. Non-blocking throughout; the caller owns
    the poll loop.
*/
#ifndef GW_RCOMM_H
#define GW_RCOMM_H

#include <poll.h>
#include <stdint.h>

#include "wire/gw_egreply.h"

typedef struct _gw_rcomm_t gw_rcomm_t;

#define GW_RCOMM_CONNS 8
#define GW_RCOMM_READ_MS 2000
#define GW_RCOMM_POLLFDS (GW_RCOMM_CONNS + 1)

//  Serve requests on listen_fd (a listening TCP socket), which is taken
//  (closed on destroy).
gw_rcomm_t *gw_rcomm_new (int listen_fd);
void gw_rcomm_destroy (gw_rcomm_t **self_p);

//  The fds to poll into pfds (at least GW_RCOMM_POLLFDS): their count.
//  *timeout_ms is lowered to the next connection's deadline.
int gw_rcomm_pollfds (gw_rcomm_t *self, struct pollfd *pfds, int *timeout_ms);

//  After poll (pfds, n as pollfds gave them): accept, read, expire. Up to
//  cap finished, valid requests into reqs; their count.
int gw_rcomm_step (gw_rcomm_t *self, const struct pollfd *pfds, int n, gw_egreq_t *reqs,
                   int cap);

//  Stop listening: from now on a connect is refused (how EG tells a dead
//  kernel from a live one). Open connections are closed too.
void gw_rcomm_close (gw_rcomm_t *self);

#endif
