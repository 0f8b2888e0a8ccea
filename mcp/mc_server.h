/*  mc_server - the MCP server: JSON-RPC lines in, replies and notifications
    out, sessions behind the tools.

    Lifecycle (initialize with version negotiation, notifications/initialized,
    ping), tools/list, tools/call, resources/read for the cellvm:// links its
    results carry, notifications/cancelled, and notifications/progress for
    calls that sent a progressToken. It never writes anything but whole
    JSON-RPC lines, through the writer it was given.
*/
#ifndef MC_SERVER_H
#define MC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "mc_args.h"
#include "mc_spec.h"

//  The MCP revisions accepted, newest first; the first is offered when the
//  client asks for one not on the list.
extern const char *const mc_server_versions [];

typedef void (mc_write_fn) (void *ctx, const char *line, size_t len);

typedef struct _mc_server_t mc_server_t;

//  New server; spec and opts are borrowed (they outlive it). Session files
//  go into dir (private, 0700).
mc_server_t *mc_server_new (const mc_options_t *opts, const mc_spec_t *spec, const char *dir,
                            mc_write_fn *write, void *ctx);

//  Destroys every session (SIGKILL for any still running).
void mc_server_destroy (mc_server_t **self_p);

//  One line from the client (without its newline).
void mc_server_line (mc_server_t *self, const char *line, size_t len);

//  A line over --max-request: its first bytes, its length.
void mc_server_oversize (mc_server_t *self, const char *head, size_t len, size_t total);

//  Sockets to poll, at most cap; how many.
size_t mc_server_pollitems (mc_server_t *self, zmq_pollitem_t *items, size_t cap);

//  After the poll, with the same items; then timers and reaping.
void mc_server_on_poll (mc_server_t *self, zmq_pollitem_t *items, size_t n, int64_t now_ms);

//  The client is gone: shut every session down.
void mc_server_shutdown (mc_server_t *self, int64_t now_ms);

//  Sessions not yet fully ended.
size_t mc_server_sessions (const mc_server_t *self);

#endif
