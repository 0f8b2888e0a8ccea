/*  gw_frames - a growable list of owned frames: one multipart message's byte
    strings, as ZeroMQ carries them and gw_wire encodes and decodes them.

    Every frame's data is a valid pointer, with a NUL after its last byte so
    a text frame reads as a string.
*/
#ifndef GW_FRAMES_H
#define GW_FRAMES_H

#include <stddef.h>
#include <stdint.h>

//  One frame: data is never NULL (a zero-length frame points at a valid
//  byte). owner, when set by the caller of gw_wire_decode, lets the decoder
//  adopt a large buffer without copying it (gw_wire_set_adopt).
typedef struct { uint8_t *data; size_t size; void *owner; } gw_frame_t;

typedef struct _gw_frames_t gw_frames_t;

gw_frames_t *gw_frames_new (void);
void gw_frames_destroy (gw_frames_t **self_p);
//  Append a copy of size bytes (data may be NULL when size is 0).
void gw_frames_append (gw_frames_t *self, const void *data, size_t size);
//  Append, stealing *data_p (malloc'ed, may be NULL when size is 0); nulls it.
void gw_frames_append_take (gw_frames_t *self, uint8_t **data_p, size_t size);
size_t gw_frames_size (const gw_frames_t *self);
//  Borrowed; NULL when index is out of range.
const gw_frame_t *gw_frames_get (const gw_frames_t *self, size_t index);
//  Deep copy.
gw_frames_t *gw_frames_dup (const gw_frames_t *self);
//  Borrowed array of all frames (for gw_wire_decode); NULL when empty.
const gw_frame_t *gw_frames_array (const gw_frames_t *self);

#endif
