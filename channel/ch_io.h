/*  ch_io - writing channel messages to a file descriptor.

    Two ways out, for two kinds of writer:
    - ch_write_all / ch_write_msg: the whole message now, for threads that
      may wait (the kernel, blocking drivers such as the template builder);
    - ch_outq: a queue that a reactor flushes when the fd is writable, for
      the gateway and init, which must never wait on their peer.
    A message is checked whole before any byte leaves (every frame 1..max),
    so a refusal never leaves half a message in the stream.
*/
#ifndef CH_IO_H
#define CH_IO_H

#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

//  Write all of iov (modified as it goes), riding out EINTR and short
//  writes. On a non-blocking fd, waits for POLLOUT up to timeout_ms in all
//  (-1: no limit). 0, -ETIMEDOUT, or -EPIPE (the peer is gone, or any other
//  write error).
int ch_write_all (int fd, struct iovec *iov, int iovcnt, int timeout_ms);

//  Bytes msg takes on the wire with its JSON of json_len bytes: 0 when a
//  frame is out of 1..max_frame (an empty buffer cannot be framed).
size_t ch_wire_size (const ch_msg_t *msg, size_t json_len, uint32_t max_frame);

//  Write msg whole (JSON frame, then its buffer frames), after the sync
//  marker when sync is true. -EMSGSIZE (nothing written) or ch_write_all's.
int ch_write_msg (int fd, const ch_msg_t *msg, uint32_t max_frame, bool sync,
                  int timeout_ms);

typedef struct _ch_outq_t ch_outq_t;

//  A queue of at most max_bytes of framed output (0: 4 * max_frame).
ch_outq_t *ch_outq_new (uint32_t max_frame, size_t max_bytes);
void ch_outq_destroy (ch_outq_t **self_p);

//  Queue msg whole, after the sync marker when sync is true. 0, -EMSGSIZE
//  (a frame out of range), -ENOBUFS (over max_bytes: the peer stopped
//  reading). Nothing is queued on failure.
int ch_outq_put (ch_outq_t *self, const ch_msg_t *msg, bool sync);

//  Write what fd takes now without blocking. 0 (maybe some left), -EPIPE.
int ch_outq_flush (ch_outq_t *self, int fd);

//  Bytes waiting; drop them all (the peer went away).
size_t ch_outq_bytes (const ch_outq_t *self);
void ch_outq_clear (ch_outq_t *self);

#endif
