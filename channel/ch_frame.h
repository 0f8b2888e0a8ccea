/*  ch_frame - length-prefixed frame codec for the cellvm channel.
 *
 *  A frame is a 4-byte big-endian length L (1..max) and L bytes. This codec is
 *  pure: it never touches a file descriptor, so tests and fuzzers drive it
 *  directly. Part of the channel library the kernel, the gateway and the
 *  guest's init all link (docs/channel.md).
 */
#ifndef CH_FRAME_H
#define CH_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define CH_FRAME_HDR 4
#define CH_FRAME_MAX_DEFAULT (64u * 1024u * 1024u)

typedef struct _ch_frame_dec_t ch_frame_dec_t;

//  Create a decoder that accepts frames of 1..max_frame bytes.
ch_frame_dec_t *ch_frame_dec_new (uint32_t max_frame);

//  Change the largest acceptable length for the frames whose header comes
//  next (1..the max given to ch_frame_dec_new).
void ch_frame_dec_set_max (ch_frame_dec_t *self, uint32_t max_frame);

//  Destroy the decoder and any partial frame; nulls *self_p.
void ch_frame_dec_destroy (ch_frame_dec_t **self_p);

//  Feed up to len bytes. Returns how many were consumed (>= 0), or -EPROTO
//  if the stream carries an out-of-range length (the decoder is then dead:
//  every later call returns -EPROTO). Stops consuming as soon as one frame is
//  complete, so the caller takes it before feeding more.
long ch_frame_dec_feed (ch_frame_dec_t *self, const uint8_t *data, size_t len);

//  True when a whole frame is ready to take.
int ch_frame_dec_ready (const ch_frame_dec_t *self);

//  Take the completed frame: ownership of the buffer moves to the caller
//  (free()). *len_p gets its length. The buffer has one extra NUL byte past
//  len so JSON parsers may treat it as a string. NULL if none is ready.
uint8_t *ch_frame_dec_take (ch_frame_dec_t *self, size_t *len_p);

//  Discard the next n frames whole, without allocating them: the rest of a
//  message that went over its cap (ch_asm). They never become ready.
void ch_frame_dec_skip (ch_frame_dec_t *self, size_t n);

//  The length that made the decoder fail, for the log line (0 if none).
uint32_t ch_frame_dec_bad_length (const ch_frame_dec_t *self);

//  The sync marker: a zero length then "CVM-SYNC". A kernel on a virtio port
//  writes it before every hello, because a kernel that died mid-write leaves
//  half a frame behind and the port itself never closes.
#define CH_FRAME_SYNC "\0\0\0\0CVM-SYNC"
#define CH_FRAME_SYNC_LEN 12

//  Accept sync markers between frames (instead of failing on length 0).
void ch_frame_dec_allow_sync (ch_frame_dec_t *self);

//  Drop any partial frame and skip every byte up to and including the next
//  sync marker. Revives a dead decoder. Implies allow_sync.
void ch_frame_dec_hunt (ch_frame_dec_t *self);

//  True while hunting for a marker.
int ch_frame_dec_hunting (const ch_frame_dec_t *self);

//  Write the 4-byte header for a frame of len bytes. Returns 0, or -EMSGSIZE
//  if len is 0 or above max_frame.
int ch_frame_encode_header (uint8_t hdr[CH_FRAME_HDR], size_t len, uint32_t max_frame);

#endif
