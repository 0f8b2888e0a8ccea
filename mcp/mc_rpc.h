/*  mc_rpc - JSON-RPC 2.0 messages, as MCP's stdio transport carries them.

    Pure: one line in, one decoded message out (or a JSON-RPC error code and
    a reason in words); replies and notifications out as lines ending in
    "\n". Touches no socket or file, so the unit tests and the fuzz target
    reach all of it.

    Accepted: a request (id + method), a notification (method, no id), and
    the client's responses to our own requests (id + result or error), which
    cellvm-mcp reads and ignores. Refused: anything not UTF-8 JSON (-32700),
    a batch (array; MCP removed batches in 2025-06-18), and objects that are
    not JSON-RPC 2.0 (-32600), each with a reason that names what is wrong.
*/
#ifndef MC_RPC_H
#define MC_RPC_H

#include <jansson.h>
#include <stddef.h>

#define MC_RPC_PARSE_ERROR      -32700
#define MC_RPC_INVALID_REQUEST  -32600
#define MC_RPC_METHOD_NOT_FOUND -32601
#define MC_RPC_INVALID_PARAMS   -32602
#define MC_RPC_INTERNAL_ERROR   -32603
//  Implementation-defined server errors (-32000..-32099).
#define MC_RPC_NOT_INITIALIZED  -32000
#define MC_RPC_REQUEST_TOO_LARGE -32001
#define MC_RPC_RESOURCE_NOT_FOUND -32002   //  MCP's code for resources/read

typedef enum { MC_RPC_REQUEST, MC_RPC_NOTIFICATION, MC_RPC_RESPONSE } mc_rpc_kind_t;

typedef struct _mc_rpc_t mc_rpc_t;

//  Decode one line. 0 and a new *msg_p (*id_p NULL); or -EBADMSG with
//  *code_p the JSON-RPC error code, why the reason (NUL-terminated, cut to
//  cap) and *id_p a new reference to the id when one could be read (else
//  NULL: the error reply then carries id null).
int mc_rpc_decode (const char *line, size_t len, mc_rpc_t **msg_p, int *code_p,
                   json_t **id_p, char *why, size_t cap);

//  Best effort: the id of a message whose line was too long to decode,
//  from its first bytes ("id":N or "id":"S" before any nested object).
//  A new reference, or NULL.
json_t *mc_rpc_sniff_id (const char *head, size_t len);

void mc_rpc_destroy (mc_rpc_t **self_p);

mc_rpc_kind_t mc_rpc_kind (const mc_rpc_t *self);
//  Borrowed. method is NULL for a response; id NULL for a notification;
//  params is NULL when absent (else an object or an array).
const char *mc_rpc_method (const mc_rpc_t *self);
json_t *mc_rpc_id (const mc_rpc_t *self);
json_t *mc_rpc_params (const mc_rpc_t *self);
//  params._meta.progressToken (a string or an integer), or NULL. Borrowed.
json_t *mc_rpc_progress_token (const mc_rpc_t *self);

//  Lines to send, each ending in "\n"; the caller frees them. *len_p gets
//  the length. Steals *result_p / *params_p (NULL means {}). id may be NULL
//  (null). Never NULL: a result that cannot be encoded becomes an internal
//  error reply.
char *mc_rpc_result (json_t *id, json_t **result_p, size_t *len_p);
char *mc_rpc_error (json_t *id, int code, const char *message, size_t *len_p);
char *mc_rpc_notification (const char *method, json_t **params_p, size_t *len_p);

#endif
