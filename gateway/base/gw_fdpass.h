/*  gw_fdpass - a short text and up to two file descriptors over a unix
    socket (SCM_RIGHTS), as the pool's daemon, holders and gateways pass
    connections and VM ports to each other (gw_pool.h, gw_poold.h).
*/
#ifndef GW_FDPASS_H
#define GW_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

#define GW_FDPASS_MAX 2

//  Send text (whole, in one sendmsg) with nfd (0..GW_FDPASS_MAX) fds. 0 or
//  -EPIPE.
int gw_fdpass_send (int sock, const char *text, const int *fds, int nfd);

//  Receive one message into text (NUL-terminated, at most cap - 1 bytes)
//  and the fds that came with it (CLOEXEC; unused slots -1, extra fds
//  closed). Bytes read, 0 at end of stream, or -errno.
ssize_t gw_fdpass_recv (int sock, char *text, size_t cap, int fds [GW_FDPASS_MAX]);

#endif
