/*  gw_out - what the session sends to clients, stamped as the gateway's.

    Every message to a client leaves through here: IOPub messages get their
    topic (stream.<name>, kernel.<session>.<msg_type>), messages of the
    gateway's own making get a fresh 5.3 header with the session id, and
    kernel messages are re-stamped (fresh header, the stored request header
    as parent, never the kernel's). The socket side is a callback, so unit
    tests see exactly what a client would.
*/
#ifndef GW_OUT_H
#define GW_OUT_H

#include "wire/gw_frames.h"
#include "ch_msg.h"

#include <jansson.h>

//  Send msg to clients: on shell/control/stdin to the identities ids, on
//  iopub with ids holding the single topic frame. Both are borrowed; the
//  callee may take msg's buffers (to send them without a copy).
typedef void (gw_session_emit_fn) (void *arg, ch_channel_t channel,
                                   const gw_frames_t *ids, ch_msg_t *msg);

typedef struct _gw_out_t gw_out_t;

//  session is the id headers carry: borrowed, and read at each send (it
//  changes with each kernel). emit may be NULL (nothing goes out).
gw_out_t *gw_out_new (gw_session_emit_fn *emit, void *arg, const char *session);
void gw_out_destroy (gw_out_t **self_p);

//  Send msg on ch (iopub gets its topic; elsewhere nothing goes out without
//  ids). msg's buffers may be taken.
void gw_out_send (gw_out_t *self, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg);

//  A message of the gateway's own making, parent copied; takes *content_p
//  (nulled; NULL means {}).
void gw_out_new_msg (gw_out_t *self, ch_channel_t ch, const gw_frames_t *ids,
                     const char *type, const json_t *parent, json_t **content_p);

//  iopub status with that execution_state.
void gw_out_status (gw_out_t *self, const json_t *parent, const char *state);

//  A validated kernel message, re-stamped: fresh header, the session id,
//  parent_header = parent (the stored request header, or NULL for {}). Its
//  buffers move to the copy that goes out.
void gw_out_relay (gw_out_t *self, ch_msg_t *kmsg, const gw_frames_t *ids,
                   const json_t *parent);

//  Protocol 5.5 (docs/gateway.md): msg's header says version "5.5", and a
//  kernel_info_reply says protocol_version "5.5" with its
//  supported_features: "debugger" when the kernel says so ("debugger":
//  true, or in its own supported_features), nothing else (no subshells).
void gw_out_stamp_5_5 (ch_msg_t *msg);

#endif
