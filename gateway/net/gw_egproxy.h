/*  gw_egproxy - a session's egress point on the host (docs/network.md).

    The guest's proxy carries each connection a cell opens as a stream over
    the cellvm.net port (channel/ch_mux.h). This side reads the request
    that opens it (CONNECT host:port, or a plain http:// request,
    gw_proxyreq), checks the name against the session's policy before any
    lookup, resolves it here on the host (the guest has no DNS), checks
    every address it got, connects to the one it checked, and for a tunnel
    to a name reads the TLS ClientHello and requires its server name to be
    that name (an allowed name cannot front for another). Then it relays,
    with flow control both ways. A refusal reaches the cell as an HTTP 403
    (or a TLS access_denied alert inside a tunnel) whose words name the
    rule; every connection, allowed or refused, is one log line with the
    destination, the bytes and the reason.

    The guest is hostile: a frame that breaks the protocol, DATA past the
    window, a stream id reused, make on_event return -EPROTO and the caller
    stops the VM. Streams at once, new connections per minute and bytes per
    session are capped; going over a cap refuses connections, it does not
    stop the VM.

    Runs on the reactor and never blocks it: names resolve on a worker
    thread, sockets are non-blocking, each event handles a bounded amount.
*/
#ifndef GW_EGPROXY_H
#define GW_EGPROXY_H

#include "net/gw_egress.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const gw_egress_t *policy;                  //  borrowed, read at each new connection
    const char *nonce;                          //  the proxy's, given to init (hex)
    unsigned max_streams;                       //  at once; 0: 64
    unsigned max_conns_per_min;                 //  new connections a minute; 0: 600
    uint64_t max_bytes;                         //  both ways, this VM's life; 0: no cap
    int connect_ms;                             //  a connect's deadline; 0: 10 s
    //  Resolve name into up to cap addresses: the count (>= 0) or a negative
    //  errno, and words in err. Runs on the worker thread. NULL: getaddrinfo.
    int (*resolve) (const char *name, gw_egress_addr_t *out, size_t cap, char *err,
                    size_t errlen);
    //  Tests: where a checked address:port is dialed instead. NULL: itself.
    void (*route) (gw_egress_addr_t *addr, unsigned *port);
} gw_egproxy_cfg_t;

#define GW_EGPROXY_GUEST_PORT 3128              //  the guest proxy's, by default

typedef struct _gw_egproxy_t gw_egproxy_t;

//  Take *port_fd_p (the connected cellvm.net port); cfg is copied, its
//  strings must outlive the proxy. NULL with err.
gw_egproxy_t *gw_egproxy_new (const gw_egproxy_cfg_t *cfg, int *port_fd_p, char *err,
                              size_t errlen);

//  Close every connection (logged) and the port; nulls *self_p.
void gw_egproxy_destroy (gw_egproxy_t **self_p);

//  An epoll fd: readable when on_event has work.
int gw_egproxy_fd (const gw_egproxy_t *self);

//  Do what is ready, a bounded amount. 0; -EPIPE when the port closed (the
//  VM went away); -EPROTO when the guest broke the protocol, why in err.
int gw_egproxy_on_event (gw_egproxy_t *self, char *err, size_t errlen);

//  Counters since new, for `cellvm ls`, tests and the log.
typedef struct {
    uint64_t allowed, refused;                  //  connections
    uint64_t bytes_out, bytes_in;               //  guest to destination, and back
    unsigned open;                              //  streams now
    bool ready;                                 //  the proxy said hello
} gw_egproxy_stats_t;
void gw_egproxy_stats (const gw_egproxy_t *self, gw_egproxy_stats_t *out);

#endif
