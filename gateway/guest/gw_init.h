/*  gw_init - the host side of the guest init's control port (docs/init.md).

    Frames and envelopes as on the kernel channel (the channel library).
    Nothing here blocks the reactor: gw_init_send queues (gw_init_flush
    writes more when the fd is writable, as gw_init_wants_write asks), and
    gw_init_pump reads what is there. Drivers off the reactor (the template
    builder, the pool's holder) may wait: gw_init_call does, with a
    deadline, keeping any notice that arrives meanwhile.

    The guest is untrusted: every message is capped (GW_INIT_MAX_MSG, JSON
    and buffers together; a bigger one is a broken stream, -EPROTO),
    replies are matched by msg_id, anything else is logged and dropped.
*/
#ifndef GW_INIT_H
#define GW_INIT_H

#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  The largest message init may send: a get_reply carries one 16 MiB chunk.
#define GW_INIT_MAX_MSG (20u << 20)
//  The largest JSON frame of a message from init (its bytes are buffers): a
//  longer one is not read, let alone parsed, on the reactor.
#define GW_INIT_MAX_JSON (1u << 20)
//  The most we queue for init: a few put chunks.
#define GW_INIT_MAX_OUT (80u << 20)

typedef struct _gw_init_t gw_init_t;

//  Take ownership of fd, a connected control port.
gw_init_t *gw_init_new (int fd, uint32_t max_frame);
void gw_init_destroy (gw_init_t **self_p);

int gw_init_fd (const gw_init_t *self);

//  Why the last -EPROTO was returned, in words.
const char *gw_init_why (const gw_init_t *self);

//  Queue a request (or the hello) with an optional buffer, copied; takes
//  *content_p. id_out (37 bytes) gets its msg_id when not NULL. 0, -EPIPE,
//  -ENOBUFS (the queue is full: init stopped reading), -EMSGSIZE.
int gw_init_send (gw_init_t *self, const char *msg_type, json_t **content_p,
                  const uint8_t *buf, size_t buflen, char *id_out);

//  True while queued bytes wait for the fd to become writable.
bool gw_init_wants_write (const gw_init_t *self);

//  Write what the fd takes now. 0, or -EPIPE.
int gw_init_flush (gw_init_t *self);

//  Let gw_init_pump read at most this many more bytes from the fd (then it
//  returns -EAGAIN while the rest waits in the fd, so a poll on it wakes up
//  again): the reactor's turn stays short however fast init writes. 0: no
//  limit (the default; gw_init_call sets it).
void gw_init_set_budget (gw_init_t *self, size_t bytes);

//  Read what is there. Returns 0 and *msg_p for each complete message (call
//  again until -EAGAIN), -EPIPE when the port closed (QEMU gone), -EPROTO
//  on a broken stream.
int gw_init_pump (gw_init_t *self, ch_msg_t **msg_p);

//  Send a request and wait up to timeout_ms for its reply. Other messages
//  read meanwhile are queued and come out of gw_init_pump later. 0 and
//  *reply_p, -ETIMEDOUT, -EPIPE, -EPROTO.
int gw_init_call (gw_init_t *self, const char *msg_type, json_t **content_p,
                  const uint8_t *buf, size_t buflen, int timeout_ms, ch_msg_t **reply_p);

//  The second half of gw_init_call: wait up to timeout_ms for the reply to
//  the request gw_init_send sent as id; called again after -ETIMEDOUT, it
//  goes on waiting for the same reply. Same returns.
int gw_init_wait_reply (gw_init_t *self, const char *id, int timeout_ms, ch_msg_t **reply_p);

#endif
