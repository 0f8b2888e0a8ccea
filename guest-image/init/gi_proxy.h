/*  gi_proxy - the guest's half of egress (docs/network.md): a small proxy
 *  on the guest's loopback that carries each TCP connection a cell opens
 *  as a stream over the cellvm.net port (channel/ch_mux.h, the protocol)
 *  to the gateway, which parses the proxy request, decides and connects.
 *
 *  The proxy understands no HTTP: it moves bytes. It runs in a child of
 *  init that drops to nobody (gi_proxy_spawn) and execs nothing. Its caps
 *  (streams at once, bytes buffered) are a courtesy: the gateway enforces
 *  the real ones.
 */
#ifndef GI_PROXY_H
#define GI_PROXY_H

#include <sys/types.h>

#define GI_PROXY_DEVICE "/dev/virtio-ports/cellvm.net"
#define GI_PROXY_PORT 3128          //  what HTTP_PROXY names in the guest
#define GI_PROXY_UID 65534          //  nobody
#define GI_PROXY_GID 65534
#define GI_PROXY_STREAMS 256        //  connections at once; more are closed at accept

typedef struct {
    int port_fd;                    //  the egress port, non-blocking
    int listen_fds [2];             //  listening sockets (gi_proxy_listen), -1: none
    const char *nonce;              //  1..CH_MUX_TEXT_MAX bytes, NUL-terminated
    int stop_fd;                    //  readable: return (tests); -1: none
} gi_proxy_cfg_t;

//  Listening sockets (non-blocking, close-on-exec, SO_REUSEADDR) on
//  127.0.0.1:port and [::1]:port into fds; port 0 takes an ephemeral port
//  for both. IPv6 is optional: fds [1] is -1 when it fails. 0 or -errno
//  (nothing left open).
int gi_proxy_listen (unsigned port, int fds [2]);

//  Serve until stop_fd is readable: 0; or -errno when the proxy cannot go
//  on (-EINVAL: a bad cfg). Never blocks on a peer. Closes nothing in cfg.
int gi_proxy_run (const gi_proxy_cfg_t *cfg);

//  Init's side: open device (O_RDWR | O_NONBLOCK), listen on port, fork a
//  child that keeps only those fds and stdout/stderr, drops to
//  GI_PROXY_UID (no groups, no capabilities, no new privileges) and runs
//  gi_proxy_run; *pid_p gets it. The caller reaps it. 0 or -errno
//  (-ENOENT: no such device; -EADDRINUSE: port taken).
int gi_proxy_spawn (const char *device, const char *nonce, unsigned port, pid_t *pid_p);

#endif
