/*  mc_session - one cellvm session: a cellvm-gateway process, driven as a
    Jupyter client, and the tool calls queued on it.

    Started from the kernelspec with a connection file of its own in the
    private run directory; ready once a kernel_info_request is answered and
    IOPub is known to be subscribed. Tool calls run one at a time, in order.
    restart is shutdown_request {restart: true} and a new gateway on the same
    connection file (the gateway keeps /workspace across it: docs/sessions.md);
    close is shutdown_request {restart: false}. Each stop is escalated: SIGTERM
    after 3 s, SIGKILL after 6 s. Each gateway gets --idle-timeout and --ttl
    (ours, else the kernelspec's own, else the defaults: docs/mcp.md). A
    gateway that exits by itself ends the session, and every call on it is
    answered in words: the gateway's own when it said why (its lifetimes),
    else how its process ended and the end of its log. When no call was
    there to hear them, mc_session_unheard gives them to the server, which
    tells the next call on that name.
*/
#ifndef MC_SESSION_H
#define MC_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "mc_args.h"
#include "mc_op.h"
#include "mc_spec.h"
#include "mc_shape.h"

//  Where results and progress go (the MCP server).
typedef struct {
    //  Steals *result_p. rpc_id is borrowed.
    void (*result) (void *ctx, json_t *rpc_id, json_t **result_p);
    void (*progress) (void *ctx, json_t *token, double progress, const char *message);
    void *ctx;
} mc_sink_t;

typedef struct _mc_session_t mc_session_t;

#define MC_SESSION_POLLITEMS 3

//  New session name, its files in dir, its gateway started at once. NULL
//  with err in words when the gateway cannot be started.
mc_session_t *mc_session_new (const char *name, const char *dir, const mc_spec_t *spec,
                              const mc_options_t *opts, const mc_shape_opts_t *shape,
                              const mc_sink_t *sink, char *err, size_t errlen);

//  Kills the gateway if it still runs (SIGKILL), reaps it, removes the
//  session's files. Queued calls are dropped without a result.
void mc_session_destroy (mc_session_t **self_p);

const char *mc_session_name (const mc_session_t *self);

//  Queue a call (taken: *op_p nulled).
void mc_session_submit (mc_session_t *self, mc_op_t **op_p);

//  Cancel the call answering rpc_id (notifications/cancelled): a queued
//  one is dropped, a running cell interrupted; no result is sent. False
//  when the session has no such call.
bool mc_session_cancel (mc_session_t *self, const json_t *rpc_id);

//  The sockets to poll (readable) into items: how many (0 when none).
size_t mc_session_pollitems (mc_session_t *self, zmq_pollitem_t *items);

//  After a poll: take what arrived on the sockets of items.
void mc_session_on_poll (mc_session_t *self, const zmq_pollitem_t *items, int64_t now_ms);

//  Timers: start, time limits, progress, stops, and the process's exit.
void mc_session_tick (mc_session_t *self, int64_t now_ms);

//  End the session for good (the client is gone): calls are dropped,
//  the gateway is asked to shut down, then escalated.
void mc_session_shutdown (mc_session_t *self, int64_t now_ms);

//  The gateway has exited and the session is over: destroy it.
bool mc_session_dead (const mc_session_t *self);

//  The session is over by itself and no call was told why: true, with why
//  (a clause: mc_life_why) and the end of the gateway's log ("" when the
//  gateway said why), borrowed until the session is destroyed.
bool mc_session_unheard (const mc_session_t *self, const char **why_p, const char **tail_p);

#endif
