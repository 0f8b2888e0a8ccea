/*  kn_chan - blocking message I/O for the cellvm channel on a file descriptor.
 *
 *  Sending is thread-safe: the main thread, the reader thread and the capture
 *  thread all send. Receiving is done by one thread only (the reader).
 */
#ifndef KN_CHAN_H
#define KN_CHAN_H

#include "ch_msg.h"

#include <sys/uio.h>

typedef struct _kn_chan_t kn_chan_t;

//  Wrap fd (used both ways). Does not take ownership of fd.
kn_chan_t *kn_chan_new (int fd, uint32_t max_frame);
void kn_chan_destroy (kn_chan_t **self_p);

//  Send the message and its buffers. Takes *msg_p. 0, or -EPIPE once the peer
//  is gone, or -EMSGSIZE (message dropped, logged) when a frame is too big.
int kn_chan_send (kn_chan_t *self, ch_msg_t **msg_p);

//  Send one message the caller encoded itself: its JSON frame is the
//  concatenation of iov[0..n), then one buffer frame (buf NULL: none),
//  written in the same go. For the kernel's own hot paths (stream text
//  escaped once, content JSON from Python spliced in as it is; a raw stream
//  text, docs/channel.md, goes from the caller's memory to the channel
//  without a copy of ours). 0, -EPIPE, or -EMSGSIZE (nothing sent, logged)
//  when over max_frame.
int kn_chan_send_json_buf (kn_chan_t *self, const char *msg_type, const struct iovec *iov,
                           int n, const struct iovec *buf);

//  Receive one complete message (with its buffers). Returns 0; -EPIPE on end
//  of stream; -EPROTO on a broken frame length (fatal: the stream cannot be
//  resynchronised); -EBADMSG when a frame was not a valid envelope (dropped;
//  err says why, the next call reads on).
int kn_chan_recv (kn_chan_t *self, ch_msg_t **msg_p, char *err, size_t errlen);

uint32_t kn_chan_max_frame (const kn_chan_t *self);

//  A virtio-serial port reads 0 bytes while no host is connected: in device
//  mode that is not end of stream. The kernel drops any partial frame and
//  waits for the host to (re)connect and say hello.
void kn_chan_set_device_mode (kn_chan_t *self, int on);

#endif
