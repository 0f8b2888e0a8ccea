/*  gw_wire - Jupyter multipart wire codec.

    Pure: frames are plain byte arrays, no socket is touched, so tests and
    fuzzers drive it directly. A message on the wire is

        [identities...] "<IDS|MSG>" signature header parent metadata content [buffers...]

    Incoming messages are size-capped, structurally checked and their
    signature verified (constant time) BEFORE any JSON is parsed; replayed
    signatures are refused like jupyter_client's digest history does.
    A codec holds that history: use one codec from one thread at a time.
*/
#ifndef GW_WIRE_H
#define GW_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/gw_frames.h"
#include "wire/gw_hmac.h"
#include "ch_msg.h"

#define GW_WIRE_DELIM "<IDS|MSG>"
#define GW_WIRE_DELIM_LEN 9
#define GW_WIRE_HISTORY_DEFAULT 65536
#define GW_WIRE_MAX_DEFAULT (64u * 1024u * 1024u)

typedef struct _gw_wire_t gw_wire_t;

//  New codec. Takes ownership of *hmac_p (nulls it). max_bytes caps the total
//  size of one incoming message, all frames included (0 means
//  GW_WIRE_MAX_DEFAULT, 64 MiB).
gw_wire_t *gw_wire_new (gw_hmac_t **hmac_p, size_t max_bytes);
void gw_wire_destroy (gw_wire_t **self_p);

//  Resize the replay history (default GW_WIRE_HISTORY_DEFAULT signatures) and
//  forget everything remembered so far. 0 turns replay protection off.
void gw_wire_set_history (gw_wire_t *self, size_t max_entries);

//  Buffer frames whose owner is set are attached to decoded messages as they
//  are, released later by free_fn (data, owner), instead of being copied: a
//  256 MiB upload is never copied on the reactor. After a successful decode
//  the caller gives up every such frame whose data is now a buffer of the
//  message (compare ch_msg_buffer pointers). NULL (the default): copy.
void gw_wire_set_adopt (gw_wire_t *self, ch_free_fn *free_fn);

//  The signer this codec owns (borrowed).
gw_hmac_t *gw_wire_hmac (gw_wire_t *self);

//  Decode one received multipart message. On success returns 0, *msg_p is a
//  new message on channel ch with the buffers attached, and *ids_p the
//  identity frames before the delimiter (possibly an empty list). On failure
//  returns -EMSGSIZE (too big, too many buffers), -EBADMSG (malformed),
//  -EACCES (unsigned or bad signature) or -EALREADY (replayed signature),
//  *msg_p and *ids_p are NULL and *why points at a static reason. why may be
//  NULL. Never crashes on any input.
int gw_wire_decode (gw_wire_t *self, ch_channel_t ch, const gw_frame_t *frames,
                    size_t nframes, ch_msg_t **msg_p, gw_frames_t **ids_p,
                    const char **why);

//  The part of a message gw_wire_decode refused as too large that can still
//  be trusted: identities, signature and the four JSON frames (at most
//  GW_WIRE_ENVELOPE_MAX bytes together), verified like any message, without
//  its buffers. So the sender can be told why, instead of waiting forever.
//  Same returns as gw_wire_decode.
#define GW_WIRE_ENVELOPE_MAX (1u << 20)
int gw_wire_decode_envelope (gw_wire_t *self, ch_channel_t ch, const gw_frame_t *frames,
                             size_t nframes, ch_msg_t **msg_p, gw_frames_t **ids_p,
                             const char **why);

//  Total bytes of nframes frames.
size_t gw_wire_size (const gw_frame_t *frames, size_t nframes);

//  Encode msg: the ids (may be NULL: routing identities, or a single topic
//  frame for iopub), "<IDS|MSG>", the hex signature of the four compact UTF-8
//  JSON frames exactly as sent, the four frames, then the buffers. Returns a
//  new list, or NULL if signing failed.
gw_frames_t *gw_wire_encode (gw_wire_t *self, const gw_frames_t *ids, const ch_msg_t *msg);

//  The same without the buffers, which the caller sends itself (without a
//  copy, straight from the message).
gw_frames_t *gw_wire_encode_head (gw_wire_t *self, const gw_frames_t *ids,
                                  const ch_msg_t *msg);

#endif
