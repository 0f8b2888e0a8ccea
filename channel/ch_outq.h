/*  ch_outq - a queue of framed channel messages that a reactor flushes when
    the fd is writable: the gateway and init must never wait on their peer
    (the writers that may wait use ch_write_msg, ch_io.h). A message is
    checked whole before it is queued (every frame 1..max_frame), so a
    refusal never leaves half a message in the stream.
*/
#ifndef CH_OUTQ_H
#define CH_OUTQ_H

#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
