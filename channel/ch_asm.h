/*  ch_asm - the message assembler of the cellvm channel.

    Bytes in, whole messages out: frames (ch_frame) are decoded, the first
    frame of a message is its JSON envelope (ch_msg), and the message is
    complete once the buffers it announced have arrived. Every message is
    bounded: one frame by max_frame, one buffer by max_buffer, the JSON and
    all its buffers together by max_msg. The assembler is pure (no fd, no
    clock), so tests and fuzzers drive it directly; the kernel, the gateway
    and init all read their peer through it.

    Faults, and what survives them:
    - a frame length out of range breaks the stream (-EPROTO): nothing more
      is accepted until ch_asm_reset or ch_asm_hunt;
    - a JSON frame that is not an envelope is dropped (-EBADMSG), framing
      stays intact;
    - a message over its caps is dropped (-EMSGSIZE) and its remaining
      buffer frames are skipped without being stored; ch_asm_dropped tells
      whose message it was, so the receiver can answer the sender.
*/
#ifndef CH_ASM_H
#define CH_ASM_H

#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t max_frame;                         //  one frame (0: CH_FRAME_MAX_DEFAULT)
    size_t max_msg;                             //  JSON + buffers (0: max_frame)
    size_t max_buffer;                          //  one buffer (0: max_frame)
    size_t max_json;                            //  one message's JSON frame (0: max_frame):
                                                //  a longer one breaks the stream (-EPROTO)
                                                //  before any of it is read or parsed
} ch_limits_t;

typedef struct _ch_asm_t ch_asm_t;

//  New assembler; limits may be NULL (all defaults).
ch_asm_t *ch_asm_new (const ch_limits_t *limits);

//  Free it and any partial message; nulls *self_p. NULL-safe.
void ch_asm_destroy (ch_asm_t **self_p);

//  A new stream (the peer reconnected): drop partial frames and messages.
void ch_asm_reset (ch_asm_t *self);

//  Drop everything partial and skip to the next sync marker (a virtio port
//  after a kernel death, docs/channel.md); accept markers from then on.
void ch_asm_hunt (ch_asm_t *self);

//  Stream messages of at least min bytes keep their content as it came
//  (ch_msg_decode_lazy): the gateway passes large texts on without a parse
//  and a dump. Raw stream texts (a stream with content {"name": ...} and
//  its text as its one buffer, docs/channel.md) are escaped into such a
//  content, whatever their size. 0 (the default): every message is parsed,
//  and a raw text stays a buffer.
void ch_asm_set_raw_stream (ch_asm_t *self, size_t min);
//  Accept sync markers between frames.
void ch_asm_allow_sync (ch_asm_t *self);

//  Feed up to len bytes; *used_p gets how many were consumed (always set).
//  Stops after one complete message: 0 and *msg_p (caller owns), or 0 and
//  *msg_p NULL when all of data was consumed without completing one. Call
//  again with the rest. Negative returns as in the header comment; the
//  reason is in ch_asm_why.
int ch_asm_feed (ch_asm_t *self, const uint8_t *data, size_t len, size_t *used_p,
                 ch_msg_t **msg_p);

//  Why the last feed failed ("" when it did not).
const char *ch_asm_why (const ch_asm_t *self);

//  The envelope (no buffers) of the message the last -EMSGSIZE dropped, when
//  its JSON frame could be read; else NULL. Borrowed until the next feed.
const ch_msg_t *ch_asm_dropped (const ch_asm_t *self);

//  True while the stream is broken (-EPROTO seen, no reset since).
bool ch_asm_broken (const ch_asm_t *self);

//  The limits in force (defaults filled in).
const ch_limits_t *ch_asm_limits (const ch_asm_t *self);

#endif
