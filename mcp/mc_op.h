/*  mc_op - one tool call on a session: what it sends, what it waits for,
    and the result it makes.

    run_python and list_files are execute_requests; upload_file is one or
    more cellvm_put_requests (32 MiB each, "append" after the first);
    download_file (and resources/read) a cellvm_get_request; restart and
    close are done by the session itself (mc_session), which only asks the
    op for their results. An op never touches a socket: mc_op_begin and
    mc_op_tick return the requests to send through a callback, and the
    session feeds it the messages whose parent is one of its requests.
*/
#ifndef MC_OP_H
#define MC_OP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ch_msg.h"
#include "mc_args.h"
#include "mc_shape.h"
#include "mc_tools.h"

typedef struct _mc_op_t mc_op_t;

//  How an op sends a request: its msg_id into msg_id. 0 or -errno. The
//  buffer, when not NULL, is sent as the message's one buffer.
typedef int (mc_send_fn) (void *ctx, ch_channel_t ch, const char *msg_type, json_t **content_p,
                          const uint8_t *buf, size_t len, char msg_id [37]);

//  What a tick asks of the session.
typedef enum { MC_OP_WAIT, MC_OP_DONE, MC_OP_RESTART } mc_op_step_t;

//  New op for call (taken: *call_p nulled), answering JSON-RPC request id
//  (a new reference is kept) with progress token (may be NULL). as_resource:
//  a download for resources/read (its result is {contents: [...]}).
mc_op_t *mc_op_new (mc_call_t **call_p, json_t *rpc_id, json_t *token, bool as_resource,
                    const mc_options_t *opts, const mc_shape_opts_t *shape,
                    const char *session);
void mc_op_destroy (mc_op_t **self_p);

mc_tool_t mc_op_tool (const mc_op_t *self);
//  The msg_id of the request in flight ("" before mc_op_begin).
const char *mc_op_msg_id (const mc_op_t *self);
json_t *mc_op_rpc_id (const mc_op_t *self);
json_t *mc_op_token (const mc_op_t *self);

//  Send the first request. 0, or -errno (the op is then done, with words).
int mc_op_begin (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms);

//  A message for this op? msg is borrowed. Returns MC_OP_DONE when the op
//  has all it needs.
mc_op_step_t mc_op_on_msg (mc_op_t *self, const ch_msg_t *msg, mc_send_fn *send, void *ctx,
                           int64_t now_ms);

//  Timers: the time limit (interrupt, then MC_OP_RESTART when the grace is
//  over), progress (*progress_p set to a new message when one is due).
mc_op_step_t mc_op_tick (mc_op_t *self, mc_send_fn *send, void *ctx, int64_t now_ms,
                         char **progress_p, double *elapsed_p);

//  The session ended the op: MC_END_LOST with words (the session is gone),
//  or MC_END_TIMEOUT_RESTART after the restart that follows a timeout.
void mc_op_end (mc_op_t *self, mc_end_t end, const char *words, int64_t now_ms);

//  Cancelled by the client (notifications/cancelled): a running cell is
//  interrupted, and no result is sent.
void mc_op_cancel (mc_op_t *self, mc_send_fn *send, void *ctx);
bool mc_op_cancelled (const mc_op_t *self);

//  The CallToolResult (or resources/read result), new.
json_t *mc_op_result (mc_op_t *self);

//  The result of an op whose session ended by itself (words from
//  mc_life_words): a close has nothing left to do (not an error), anything
//  else is an error (run_python's with status "lost"). New.
json_t *mc_op_ended_result (mc_op_t *self, const char *words, int64_t now_ms);

//  restart and close results, in words.
json_t *mc_op_text_result (const char *text, bool is_error);

#endif
