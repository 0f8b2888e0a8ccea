/*  gw_replay_item - one IOPub message kept for replay, as it was sent.

    A copy of the bytes that went out (topic, parent_header, metadata,
    content, buffers), refcounted: the replay buffer (gw_replay) holds one
    reference while the message is stored, and each selection one per
    message it picked, so a replay that takes several reactor turns keeps
    what it picked after an eviction. The messages of one cell share their
    parent_header's bytes.
*/
#ifndef GW_REPLAY_ITEM_H
#define GW_REPLAY_ITEM_H

#include <stddef.h>
#include <stdint.h>

//  Counted against max_bytes per message on top of its bytes: a flood of
//  tiny messages must not cost far more memory than the cap says.
#define GW_REPLAY_ITEM_OVERHEAD 128

//  Bytes borrowed from the caller.
typedef struct {
    const void *data;
    size_t len;
} gw_replay_bytes_t;

//  One message as it was sent. All borrowed; copied by gw_replay_add.
typedef struct {
    const char *cell;                           //  its parent's msg_id (the execute_request)
    const char *msg_id;                         //  its own header.msg_id
    const char *msg_type;
    gw_replay_bytes_t topic, parent, metadata, content;
    const gw_replay_bytes_t *buffers;
    size_t nbuffers;
} gw_replay_msg_t;

//  The parts of a stored message.
typedef enum {
    GW_REPLAY_TOPIC, GW_REPLAY_PARENT, GW_REPLAY_METADATA, GW_REPLAY_CONTENT
} gw_replay_part_t;

typedef struct _gw_replay_item_t gw_replay_item_t;

//  A copy of msg, one reference. Its parent_header is sibling's (a message
//  of the same cell) when sibling is not NULL, else a copy of msg->parent.
gw_replay_item_t *gw_replay_item_new (const gw_replay_msg_t *msg,
                                      const gw_replay_item_t *sibling);
//  One more reference; returns self.
gw_replay_item_t *gw_replay_item_ref (gw_replay_item_t *self);
//  Drop one reference (the last frees it); nulls *self_p. NULL-safe.
void gw_replay_item_destroy (gw_replay_item_t **self_p);

//  What an item of msg counts against max_bytes (its parent_header, shared
//  by the cell, not included), without copying it.
size_t gw_replay_item_counted (const gw_replay_msg_t *msg);

//  Its parts, borrowed.
const char *gw_replay_item_type (const gw_replay_item_t *item);
const char *gw_replay_item_msg_id (const gw_replay_item_t *item);
const uint8_t *gw_replay_item_part (const gw_replay_item_t *item, gw_replay_part_t part,
                                    size_t *len_p);
size_t gw_replay_item_nbuffers (const gw_replay_item_t *item);
const uint8_t *gw_replay_item_buffer (const gw_replay_item_t *item, size_t index,
                                      size_t *len_p);

#endif
