/*  gw_chan - the gateway's end of the cellvm channel, non-blocking.

    Frames and messages of the channel library (channel/ch_asm, ch_io) over one
    file descriptor, driven by the reactor: gw_chan_read when the fd is
    readable, gw_chan_flush when it is writable and gw_chan_wants_write says
    so. Nothing here blocks.

    The peer is untrusted. Every frame is bounded by max_frame, every message
    (JSON plus buffers) by max_msg, and the first broken frame ends the
    stream: gw_chan_read reports it and the owner is expected to end the
    kernel.
*/
#ifndef GW_CHAN_H
#define GW_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ch_msg.h"

typedef struct _gw_chan_t gw_chan_t;

//  Called for each complete message; takes *msg_p. Return 0 to go on, or
//  non-zero to stop reading (gw_chan_read then returns that value).
typedef int (gw_chan_msg_fn) (void *arg, ch_msg_t **msg_p);

//  Wrap fd, taking ownership (closed on destroy); makes it non-blocking.
//  max_out caps the bytes queued for the peer (0: 4 * max_msg).
gw_chan_t *gw_chan_new (int fd, uint32_t max_frame, size_t max_msg, size_t max_out);

//  Close the fd and free everything; nulls *self_p. NULL-safe.
void gw_chan_destroy (gw_chan_t **self_p);

//  For a channel that is a virtio port: drop everything up to the next sync
//  marker (a kernel that died mid-write may have left half a frame), and
//  accept markers between frames from then on (docs/channel.md).
void gw_chan_hunt (gw_chan_t *self);

int gw_chan_fd (const gw_chan_t *self);

//  Queue msg (JSON frame + buffer frames) and try to write it out. Returns
//  0; -EMSGSIZE when a frame exceeds max_frame; -ENOBUFS when the queue is
//  full (the peer stopped reading); -EPIPE once the peer is gone.
int gw_chan_send (gw_chan_t *self, const ch_msg_t *msg);

//  True while bytes wait for the fd to become writable.
bool gw_chan_wants_write (const gw_chan_t *self);

//  Write as much queued data as the fd takes. 0, or -EPIPE.
int gw_chan_flush (gw_chan_t *self);

//  One read() from the fd; every complete message goes to on_msg. Returns 0
//  (read something or nothing to read), the callback's non-zero stop value,
//  -EPIPE at end of stream, or on bad input -EPROTO (frame length out of
//  range), -EBADMSG (not a valid envelope), -EMSGSIZE (message over
//  max_msg), with *why set to a static or chan-owned reason.
int gw_chan_read (gw_chan_t *self, gw_chan_msg_fn *on_msg, void *arg, const char **why);

//  How long (ms) the channel has been stuck, 0 when it is not: bytes sent
//  (queued here or in the socket) of which the peer has taken none since
//  (it stopped reading; call this often: each call looks), or a message it
//  began and has not completed (it stopped writing mid-message). A live
//  peer that reads and writes whole messages, however slowly, is never
//  stuck for long. why (may be NULL) gets the words.
int64_t gw_chan_stalled (gw_chan_t *self, char *why, size_t whylen);

//  Start both clocks of gw_chan_stalled afresh (the peer is paused on purpose).
void gw_chan_stall_reset (gw_chan_t *self);

#endif
