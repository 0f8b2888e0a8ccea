/*  gw_reqs - the session's table of outstanding requests.

    One entry per shell or control request, from the moment a client sends
    it until the kernel's idle for it: where the reply goes (identities,
    channel) and the header that becomes the parent_header of everything
    the request causes. Finished requests are kept a little longer (the
    last GW_REQS_RECENT) so output that arrives late keeps its parent.

    gw_req_t is a plain record the session reads and marks; the table owns
    every entry.
*/
#ifndef GW_REQS_H
#define GW_REQS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/gw_frames.h"
#include "ch_msg.h"

#define GW_REQS_RECENT 64

typedef struct {
    char *msg_id;                               //  the request's header.msg_id
    ch_channel_t channel;                       //  shell or control
    gw_frames_t *ids;                           //  client identities, NULL for our own
    json_t *header;                             //  as the client sent it: every parent_header
    char reply_type [64];                       //  expected reply, "" for none (comm_*)
    bool own;                                   //  the gateway's own request
    bool execute;                               //  an execute_request
    bool allow_stdin;                           //  content.allow_stdin
    bool restart;                               //  shutdown_request content.restart
    bool sent;                                  //  handed to the current kernel
    bool busy;                                  //  its busy has gone out
    bool replied;                               //  its reply came from the kernel
    bool held;                                  //  ... and waits for its artifacts
    bool interrupted;                           //  the cell timeout interrupted it
    int64_t busy_at, interrupted_at;            //  ch_clock_mono_ms
} gw_req_t;

typedef struct _gw_reqs_t gw_reqs_t;

gw_reqs_t *gw_reqs_new (void);
void gw_reqs_destroy (gw_reqs_t **self_p);

//  Add an entry for request msg (copied from); takes *ids_p (NULL: the
//  gateway's own request). Returns the entry, owned by the table.
gw_req_t *gw_reqs_add (gw_reqs_t *self, const ch_msg_t *msg, gw_frames_t **ids_p);

//  The outstanding entry for msg_id, or NULL.
gw_req_t *gw_reqs_find (gw_reqs_t *self, const char *msg_id);

//  An outstanding or recently finished entry for msg_id, or NULL.
gw_req_t *gw_reqs_find_any (gw_reqs_t *self, const char *msg_id);

//  The oldest outstanding entry (NULL when none), optionally only among
//  those already sent to the kernel.
gw_req_t *gw_reqs_oldest (gw_reqs_t *self, bool sent_only);

//  The running cell: the oldest sent execute_request without a reply.
gw_req_t *gw_reqs_running_cell (gw_reqs_t *self);

//  req is finished: keep it among the recent ones.
void gw_reqs_retire (gw_reqs_t *self, gw_req_t *req);

//  req is finished and forgotten (freed).
void gw_reqs_remove (gw_reqs_t *self, gw_req_t *req);

size_t gw_reqs_size (const gw_reqs_t *self);

#endif
