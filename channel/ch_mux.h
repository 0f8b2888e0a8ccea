/*  ch_mux - many byte streams over one pipe: the egress port (docs/network.md).

    The guest's proxy carries each TCP connection a cell opens as a stream
    over the cellvm.net virtio port; the gateway decides, connects and
    relays. A frame is a 9-byte header and a payload:

        type (1 byte) | stream (4, big-endian) | len (4, big-endian) | payload

    type       stream  len            from   meaning
    HELLO   1  0       1..TEXT_MAX    both   the proxy's nonce; the gateway
                                             answers with the same bytes
    OPEN    2  >0      0              guest  a new stream (ids only grow)
    DATA    3  >0      1..DATA_MAX    both   bytes of the stream
    EOF     4  >0      0              both   the sender sends no more (half close)
    CLOSE   5  >0      0..TEXT_MAX    both   the stream is gone; why, in words
    CREDIT  6  >0      4              both   the sender of DATA may send this
                                             many more bytes (1..WINDOW, BE)

    Each side may have at most CH_MUX_WINDOW bytes of DATA per stream that
    the other has not yet credited back. Between frames the sync marker
    (ch_frame.h's CH_FRAME_SYNC) may appear: the proxy writes it before
    every HELLO, because the port outlives a proxy and a proxy that died
    mid-write leaves half a frame behind. A decoder that hunts skips every
    byte up to the next marker.

    This module is the pure codec: bytes in, frames out, no file
    descriptors, no stream state (each side keeps its own ledger). Fuzzed.
*/
#ifndef CH_MUX_H
#define CH_MUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CH_MUX_HDR 9
#define CH_MUX_DATA_MAX 16384u                  //  payload of one DATA frame
#define CH_MUX_TEXT_MAX 512u                    //  a HELLO's nonce, a CLOSE's words
#define CH_MUX_WINDOW (256u * 1024u)            //  uncredited DATA bytes per stream and side

typedef enum {
    CH_MUX_HELLO = 1,
    CH_MUX_OPEN = 2,
    CH_MUX_DATA = 3,
    CH_MUX_EOF = 4,
    CH_MUX_CLOSE = 5,
    CH_MUX_CREDIT = 6,
} ch_mux_type_t;

//  A decoded frame, borrowed from the decoder until its next feed.
typedef struct {
    ch_mux_type_t type;
    uint32_t stream;
    uint32_t len;
    const uint8_t *data;                        //  len bytes (NUL-terminated past them)
    uint32_t credit;                            //  CREDIT: the amount
} ch_mux_frame_t;

typedef struct _ch_mux_dec_t ch_mux_dec_t;

ch_mux_dec_t *ch_mux_dec_new (void);
void ch_mux_dec_destroy (ch_mux_dec_t **self_p);

//  Feed up to len bytes. Returns how many were consumed (>= 0); stops as
//  soon as a frame is complete, so the caller takes it (ch_mux_dec_frame)
//  before feeding more: until then a feed consumes nothing (returns 0).
//  -EPROTO when the bytes break the table above: the decoder is then dead
//  (every later feed returns -EPROTO) until hunted, and ch_mux_dec_error
//  says what was wrong.
long ch_mux_dec_feed (ch_mux_dec_t *self, const uint8_t *data, size_t len);

//  The frame the last feed completed, or NULL. Taking it makes room for
//  the next: a second call returns NULL.
const ch_mux_frame_t *ch_mux_dec_frame (ch_mux_dec_t *self);

//  Drop any frame not yet taken, whole or partial, and skip every byte up
//  to and including the next sync marker; revives a dead decoder.
void ch_mux_dec_hunt (ch_mux_dec_t *self);
bool ch_mux_dec_hunting (const ch_mux_dec_t *self);

//  Why the decoder died, in words ("" while it lives).
const char *ch_mux_dec_error (const ch_mux_dec_t *self);

//  Write a frame's header: 0, or -EINVAL when type, stream and len break
//  the table above (nothing a peer would accept is ever encoded).
int ch_mux_encode_header (uint8_t hdr [CH_MUX_HDR], ch_mux_type_t type, uint32_t stream,
                          uint32_t len);

//  A whole CREDIT frame (header and amount) into out: 0 or -EINVAL.
int ch_mux_encode_credit (uint8_t out [CH_MUX_HDR + 4], uint32_t stream, uint32_t amount);

//  The frame type's name for logs ("DATA"), "?" for none.
const char *ch_mux_type_name (int type);

#endif
