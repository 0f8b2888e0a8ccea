/*  gi_ctl - the control port (virtio-serial "cellvm.init"): framed cellvm
 *  messages in and out, never blocking PID 1.
 *
 *  The port is a character device that exists before any host connects.
 *  While nobody is connected, poll() reports POLLHUP and read() returns 0:
 *  that is "not connected", not end-of-file. gi_ctl tracks the connection:
 *  on every (re)connect the input decoder and the output queue start afresh,
 *  and nothing is written while no host is connected (QEMU would hand stale
 *  bytes to the next client and break its framing).
 */
#ifndef GI_CTL_H
#define GI_CTL_H

#include "ch_msg.h"

#include <poll.h>

//  One message with its buffers may hold at most this much; more is refused
//  (the frame limit is the caller's, CH_FRAME_MAX_DEFAULT in init).
#define GI_CTL_MSG_MAX (96u * 1024u * 1024u)

typedef struct _gi_ctl_t gi_ctl_t;

//  Open the port device at path (non-blocking, SIGIO on connection changes).
//  NULL with errno set on failure.
gi_ctl_t *gi_ctl_new (const char *path, uint32_t max_frame);
void gi_ctl_destroy (gi_ctl_t **self_p);

//  Fill pfd for poll(): fd -1 while disconnected. Returns the poll timeout
//  the caller should use at most (ms; -1 = none): while disconnected the
//  port is re-checked on that tick (and on SIGIO).
int gi_ctl_pollfd (gi_ctl_t *self, struct pollfd *pfd);

//  Do the I/O poll() reported (revents may be 0: then just re-check the
//  connection). Sets *msg_p when a whole message (with its buffers) arrived;
//  call again until it returns 0 with *msg_p NULL. Returns 0 or -errno.
int gi_ctl_io (gi_ctl_t *self, short revents, ch_msg_t **msg_p);

//  Queue a message and its buffers for sending; takes *msg_p. Dropped (not
//  an error) while disconnected. -EMSGSIZE / -ENOBUFS when it cannot fit.
int gi_ctl_send (gi_ctl_t *self, ch_msg_t **msg_p);

//  1 while a host is connected.
int gi_ctl_connected (const gi_ctl_t *self);

//  Bytes queued for sending.
size_t gi_ctl_queued (const gi_ctl_t *self);

//  The session id of init's own headers (fresh per boot).
const char *gi_ctl_session (const gi_ctl_t *self);

//  The frame limit.
uint32_t gi_ctl_max_frame (const gi_ctl_t *self);

#endif
