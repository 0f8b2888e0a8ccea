/*  gw_replay - the recent cells' IOPub output, kept for clients that missed it.

    A pure buffer: what went out on IOPub as a cell's output (its parent an
    execute_request) is copied in as the bytes that were sent (topic,
    parent_header, metadata, content, buffers), in the order it was sent.
    It keeps whole cells, the last max_cells and max_bytes of them: the
    oldest cell goes first, all of it. A cell whose output alone outgrows
    max_bytes keeps nothing and is marked too large. Selections hold a
    reference on each message they picked, so a replay that takes several
    reactor turns is not cut short by an eviction meanwhile.

    No sockets, no clocks: tests/unit/test_gw_replay.c drives it.
*/
#ifndef GW_REPLAY_H
#define GW_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/gw_replay_item.h"

#define GW_REPLAY_CELLS_DEFAULT 32
#define GW_REPLAY_BYTES_DEFAULT (16u << 20)
#define GW_REPLAY_ID_MAX 256                    //  longest msg_id kept

typedef struct _gw_replay_t gw_replay_t;

//  What a selection picked: messages in the order they were sent, one
//  reference each (gw_replay_item.h), and the cells in range that kept
//  nothing (too large).
typedef struct {
    gw_replay_item_t **items;
    size_t n;
    char **skipped;                             //  their msg_ids
    size_t nskipped;
} gw_replay_sel_t;

//  0 for either cap means its default.
gw_replay_t *gw_replay_new (size_t max_cells, size_t max_bytes);
void gw_replay_destroy (gw_replay_t **self_p);

//  Copy one message in, after the others. 0; -EFBIG when its cell has
//  outgrown max_bytes (the cell then keeps nothing); -EINVAL for an empty
//  or overlong cell or msg_id.
int gw_replay_add (gw_replay_t *self, const gw_replay_msg_t *msg);

//  since false: the messages of cell id. since true: everything sent after
//  the message id, or, when id is a cell, that cell's messages and
//  everything sent after its first one. 0 with sel filled (clear it with
//  gw_replay_sel_clear), or -ENOENT (never seen), -ESTALE (a cell that was
//  evicted), -EFBIG (a cell too large to keep).
int gw_replay_select (gw_replay_t *self, const char *id, bool since, gw_replay_sel_t *sel);
void gw_replay_sel_clear (gw_replay_sel_t *sel);

//  What is stored now: cells (too-large ones included) and counted bytes.
size_t gw_replay_cells (const gw_replay_t *self);
size_t gw_replay_bytes (const gw_replay_t *self);

#endif
