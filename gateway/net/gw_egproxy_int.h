/*  gw_egproxy_int - what gw_egproxy.c (the port, frames, relay) and
    gw_egstream.c (one connection's decision: the request, the lookup, the
    checks, the TLS peek) share. Private to those two files.
*/
#ifndef GW_EGPROXY_INT_H
#define GW_EGPROXY_INT_H

#include "net/gw_egproxy.h"
#include "net/gw_proxyreq.h"
#include "base/gw_worker.h"
#include "ch_bytes.h"
#include "ch_mux.h"

#include <stdbool.h>
#include <stdint.h>

#define S_ADDRS_MAX 16                          //  addresses tried for one name

typedef enum {
    S_HEAD,                                     //  reading the request
    S_RESOLVE,                                  //  the name is being looked up
    S_CONNECT,                                  //  connecting upstream
    S_PEEK,                                     //  a tunnel to a name: reading the ClientHello
    S_RELAY                                     //  bytes both ways
} s_phase_t;

typedef struct s_stream_t {
    struct s_stream_t *next;
    uint32_t id;
    s_phase_t phase;
    ch_bytes_t *in;                             //  the guest's bytes not yet sent upstream
    uint8_t *pre;                               //  sent before them: a plain request's head
    size_t pre_len, pre_off;
    gw_proxyreq_t req;
    bool parsed;                                //  req holds the request
    bool need_sni;                              //  allowed by a name rule only
    bool first_checked;                         //  a tunnel's first bytes were looked at
    gw_egress_addr_t addrs [S_ADDRS_MAX];       //  checked and allowed, in order
    size_t naddrs, next_addr;
    unsigned port;
    char dest [300];                            //  "host:port" as asked, for the log
    char addr [64];                             //  the address connected to
    char rule [300];                            //  why it was allowed
    int fd;                                     //  upstream, -1 none
    uint32_t watched;                           //  its epoll events, 0: not in the set
    uint32_t credit;                            //  DATA bytes we may still send the guest
    uint32_t unacked;                           //  guest DATA bytes we have not credited
    uint32_t consumed;                          //  ... of which left `in`: credit them
    bool guest_eof, up_eof, up_shut;
    uint64_t out, inb;                          //  guest to destination, and back
    int64_t t0, deadline;                       //  deadline: 0 none
} s_stream_t;

struct _gw_egproxy_t {
    gw_egproxy_cfg_t cfg;
    int port, epfd, timerfd;
    ch_mux_dec_t *dec;
    ch_bytes_t *outq;                           //  frames for the guest
    bool ready;                                 //  the proxy's HELLO came
    uint32_t last_id;
    s_stream_t *streams;
    unsigned nstreams;
    int64_t *opens;                             //  a ring of the last max_conns_per_min opens
    unsigned opens_at;
    gw_worker_t *worker;                        //  lookups
    gw_egproxy_stats_t stats;
    char err [400];                             //  a violation: why
};

//  gw_egproxy.c, for gw_egstream.c
//  Queue a frame for the guest; false (and err set) when the guest stopped
//  reading and the queue is full.
bool gw_egproxy__send (gw_egproxy_t *self, ch_mux_type_t type, uint32_t id,
                       const void *data, size_t len);
//  Watch fd for what the stream now needs.
void gw_egproxy__watch (gw_egproxy_t *self, s_stream_t *s);
s_stream_t *gw_egproxy__find (gw_egproxy_t *self, uint32_t id);
gw_worker_t *gw_egproxy__worker (gw_egproxy_t *self);
//  Close the upstream socket (a connect that failed), out of the epoll set.
void gw_egproxy__forget_fd (gw_egproxy_t *self, s_stream_t *s);
//  End the stream: CLOSE with words unless the guest already closed it, log
//  it, free it.
void gw_egproxy__end (gw_egproxy_t *self, s_stream_t *s, const char *words, bool tell);

//  gw_egstream.c
//  The guest's bytes arrived while the stream is not relaying yet: go on.
void gw_egstream__advance (gw_egproxy_t *self, s_stream_t *s);
//  A tunnel's first bytes, before they go upstream: a TLS hello that names a
//  server must name the CONNECT's host. 0: go on; -EAGAIN: the rest of the
//  hello first; -ECANCELED: refused, the stream is gone.
int gw_egstream__first (gw_egproxy_t *self, s_stream_t *s);
//  The upstream connect finished (fd writable).
void gw_egstream__connected (gw_egproxy_t *self, s_stream_t *s);
//  Deadlines: a request or a connect that takes too long.
void gw_egstream__tick (gw_egproxy_t *self, s_stream_t *s, int64_t now);

#endif
