/*  gw_reqs - the session's table of outstanding requests.

    Two lists in arrival order. A session has a handful of requests in
    flight, so lookups are linear.
*/
#include "session/gw_reqs.h"
#include "session/gw_check.h"

#include <assert.h>
#include <czmq.h>
#include <string.h>

struct _gw_reqs_t {
    zlistx_t *live;                             //  gw_req_t, outstanding, oldest first
    zlistx_t *recent;                           //  gw_req_t, finished, oldest first
};

static void
s_req_destroy (gw_req_t **self_p)
{
    gw_req_t *self = *self_p;
    if (!self)
        return;
    free (self->msg_id);
    gw_frames_destroy (&self->ids);
    json_decref (self->header);
    free (self);
    *self_p = NULL;
}

static void
s_req_free (void **item)
{
    s_req_destroy ((gw_req_t **) item);
}

gw_reqs_t *
gw_reqs_new (void)
{
    gw_reqs_t *self = calloc (1, sizeof *self);
    if (!self || !(self->live = zlistx_new ()) || !(self->recent = zlistx_new ()))
        abort ();
    zlistx_set_destructor (self->live, s_req_free);
    zlistx_set_destructor (self->recent, s_req_free);
    return self;
}

void
gw_reqs_destroy (gw_reqs_t **self_p)
{
    assert (self_p);
    gw_reqs_t *self = *self_p;
    if (!self)
        return;
    zlistx_destroy (&self->live);
    zlistx_destroy (&self->recent);
    free (self);
    *self_p = NULL;
}

gw_req_t *
gw_reqs_add (gw_reqs_t *self, const ch_msg_t *msg, gw_frames_t **ids_p)
{
    assert (self && msg);
    gw_req_t *req = calloc (1, sizeof *req);
    if (!req || !(req->msg_id = strdup (ch_msg_id (msg))))
        abort ();
    json_t *content = ch_msg_content (msg);
    req->channel = ch_msg_channel (msg);
    req->ids = ids_p ? *ids_p : NULL;
    if (ids_p)
        *ids_p = NULL;
    req->own = !req->ids;
    req->header = json_deep_copy (ch_msg_header (msg));
    ch_msg_reply_type (ch_msg_type (msg), req->reply_type, sizeof req->reply_type);
    req->execute = strcmp (ch_msg_type (msg), "execute_request") == 0;
    req->allow_stdin = json_is_true (json_object_get (content, "allow_stdin"));
    req->restart = json_is_true (json_object_get (content, "restart"));
    zlistx_add_end (self->live, req);
    return req;
}

static gw_req_t *
s_find (zlistx_t *list, const char *msg_id)
{
    for (gw_req_t *req = zlistx_first (list); req; req = zlistx_next (list))
        if (strcmp (req->msg_id, msg_id) == 0)
            return req;
    return NULL;
}

gw_req_t *
gw_reqs_find (gw_reqs_t *self, const char *msg_id)
{
    assert (self && msg_id);
    return s_find (self->live, msg_id);
}

gw_req_t *
gw_reqs_find_any (gw_reqs_t *self, const char *msg_id)
{
    assert (self && msg_id);
    gw_req_t *req = s_find (self->live, msg_id);
    return req ? req : s_find (self->recent, msg_id);
}

gw_req_t *
gw_reqs_oldest (gw_reqs_t *self, bool sent_only)
{
    assert (self);
    for (gw_req_t *req = zlistx_first (self->live); req; req = zlistx_next (self->live))
        if (req->sent || !sent_only)
            return req;
    return NULL;
}

gw_req_t *
gw_reqs_running_cell (gw_reqs_t *self)
{
    assert (self);
    for (gw_req_t *req = zlistx_first (self->live); req; req = zlistx_next (self->live))
        if (req->execute && req->sent && !req->replied)
            return req;
    return NULL;
}

void
gw_reqs_retire (gw_reqs_t *self, gw_req_t *req)
{
    assert (self && req);
    void *handle = zlistx_find (self->live, req);
    assert (handle);
    zlistx_detach (self->live, handle);
    zlistx_add_end (self->recent, req);
    if (zlistx_size (self->recent) > GW_REQS_RECENT)
        zlistx_delete (self->recent, NULL);     //  the oldest
}

void
gw_reqs_remove (gw_reqs_t *self, gw_req_t *req)
{
    assert (self && req);
    void *handle = zlistx_find (self->live, req);
    assert (handle);
    zlistx_delete (self->live, handle);
}

size_t
gw_reqs_size (const gw_reqs_t *self)
{
    assert (self);
    return zlistx_size (self->live);
}
