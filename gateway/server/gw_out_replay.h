/*  gw_out_replay - cellvm_replay_request: output a client missed, sent again.

    Keeps each cell's IOPub output as it goes out (gw_replay: the last
    GW_REPLAY_CELLS_DEFAULT cells, GW_REPLAY_BYTES_DEFAULT bytes) and
    answers cellvm_replay_request on control (docs/replay.md): busy, the
    kept messages again on IOPub (fresh header, the original parent_header,
    metadata marked as a replay), cellvm_replay_reply, idle. A long replay
    goes out one batch per reactor turn, so the reactor never waits on it
    and a client reading at a normal pace loses nothing to ZeroMQ's
    high-water mark. Everything leaves through the emit callback.
*/
#ifndef GW_OUT_REPLAY_H
#define GW_OUT_REPLAY_H

#include "session/gw_out.h"
#include "wire/gw_frames.h"
#include "ch_msg.h"

typedef struct _gw_out_replay_t gw_out_replay_t;

//  emit is where replies and replayed messages go (on iopub, ids is the
//  topic frame). 0 for a cap means its default.
gw_out_replay_t *gw_out_replay_new (gw_session_emit_fn *emit, void *arg, size_t max_cells,
                                    size_t max_bytes);
void gw_out_replay_destroy (gw_out_replay_t **self_p);

//  msg has just been signed for IOPub as frames (nids topic frames, then
//  what gw_wire_encode_head made); its buffers are still in it. A copy is
//  kept when it is a cell's output. Replayed messages are never kept.
void gw_out_replay_record (gw_out_replay_t *self, const ch_msg_t *msg,
                           const gw_frames_t *frames, size_t nids);

//  A verified cellvm_replay_request on control; takes both. session is the
//  id the headers carry (read now).
void gw_out_replay_request (gw_out_replay_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p,
                            const char *session);

//  Drop every kept message (a paused session keeps ~nothing: docs/replay.md),
//  unless a replay is under way. The bytes let go.
size_t gw_out_replay_release (gw_out_replay_t *self);

//  Send the next batch of the replays under way, if any. Call every tick.
void gw_out_replay_pump (gw_out_replay_t *self, const char *session);

#endif
