/*  gw_out_replay - cellvm_replay_request (see gw_out_replay.h, docs/replay.md). */
#include "server/gw_out_replay.h"
#include "session/gw_check.h"
#include "base/gw_log.h"
#include "server/gw_replay.h"
#include "ch_jfast.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_JOBS 8                            //  replays waiting or under way
#define S_BATCH_MSGS 128                        //  per reactor turn
#define S_BATCH_BYTES (2u << 20)                //  ... and bytes per turn

//  One replay under way: what to send, and to whom the reply goes.
typedef struct {
    gw_frames_t *ids;                           //  the client's identities
    json_t *header;                             //  the request's: parent of busy, reply, idle
    gw_replay_sel_t sel;                        //  the messages, one reference each
    size_t next;                                //  sel.items [next] goes out next
    size_t bytes;                               //  content, metadata and buffers sent
} s_job_t;

struct _gw_out_replay_t {
    gw_session_emit_fn *emit;
    void *arg;
    gw_replay_t *buf;                           //  the kept output
    size_t max_cells, max_bytes;
    zlistx_t *jobs;                             //  s_job_t, oldest first
    bool sending;                               //  a replayed message is going out
};

static void
s_job_free (void **item)
{
    s_job_t *job = *item;
    if (!job)
        return;
    gw_frames_destroy (&job->ids);
    json_decref (job->header);
    gw_replay_sel_clear (&job->sel);
    free (job);
    *item = NULL;
}

gw_out_replay_t *
gw_out_replay_new (gw_session_emit_fn *emit, void *arg, size_t max_cells, size_t max_bytes)
{
    gw_out_replay_t *self = calloc (1, sizeof *self);
    if (!self || !(self->jobs = zlistx_new ()))
        abort ();
    zlistx_set_destructor (self->jobs, s_job_free);
    self->emit = emit;
    self->arg = arg;
    self->max_cells = max_cells ? max_cells : GW_REPLAY_CELLS_DEFAULT;
    self->max_bytes = max_bytes ? max_bytes : GW_REPLAY_BYTES_DEFAULT;
    self->buf = gw_replay_new (self->max_cells, self->max_bytes);
    return self;
}

void
gw_out_replay_destroy (gw_out_replay_t **self_p)
{
    assert (self_p);
    gw_out_replay_t *self = *self_p;
    if (!self)
        return;
    zlistx_destroy (&self->jobs);
    gw_replay_destroy (&self->buf);
    free (self);
    *self_p = NULL;
}

size_t
gw_out_replay_release (gw_out_replay_t *self)
{
    size_t bytes = gw_replay_bytes (self->buf);
    if (zlistx_size (self->jobs) || !gw_replay_cells (self->buf))
        return 0;
    gw_replay_destroy (&self->buf);
    self->buf = gw_replay_new (self->max_cells, self->max_bytes);
    return bytes;
}

//  --------------------------------------------------------------------------
//  Recording.

//  A cell's messages that are kept: its input and its outputs. Not status
//  (a replayed busy or idle would mislead a client about the kernel now),
//  not comm_* (replayed, they would open or change widgets twice).
static bool
s_kept_type (const char *type)
{
    static const char *types [] = {
        "execute_input", "stream", "display_data", "update_display_data", "execute_result",
        "error", "clear_output", NULL
    };
    for (int i = 0; types [i]; i++)
        if (strcmp (types [i], type) == 0)
            return true;
    return false;
}

static gw_replay_bytes_t
s_frame (const gw_frames_t *frames, size_t index)
{
    const gw_frame_t *f = gw_frames_get (frames, index);
    return (gw_replay_bytes_t) { f ? f->data : (const uint8_t *) "", f ? f->size : 0 };
}

void
gw_out_replay_record (gw_out_replay_t *self, const ch_msg_t *msg, const gw_frames_t *frames,
                      size_t nids)
{
    assert (self && msg && frames);
    const json_t *parent = ch_msg_parent (msg);
    const char *cell = json_string_value (json_object_get (parent, "msg_id"));
    const char *ptype = json_string_value (json_object_get (parent, "msg_type"));
    if (self->sending || !cell || !ptype || strcmp (ptype, "execute_request") != 0
    ||  !s_kept_type (ch_msg_type (msg)) || gw_frames_size (frames) < nids + 6)
        return;
    gw_replay_bytes_t buffers [CH_MSG_MAX_BUFFERS];
    size_t n = ch_msg_nbuffers (msg);
    for (size_t i = 0; i < n && i < CH_MSG_MAX_BUFFERS; i++)
        buffers [i].data = ch_msg_buffer (msg, i, &buffers [i].len);
    gw_replay_msg_t m = {
        .cell = cell, .msg_id = ch_msg_id (msg), .msg_type = ch_msg_type (msg),
        .topic = nids ? s_frame (frames, 0) : (gw_replay_bytes_t) { "", 0 },
        .parent = s_frame (frames, nids + 3), .metadata = s_frame (frames, nids + 4),
        .content = s_frame (frames, nids + 5), .buffers = buffers,
        .nbuffers = n < CH_MSG_MAX_BUFFERS ? n : CH_MSG_MAX_BUFFERS,
    };
    if (gw_replay_add (self->buf, &m) == -EFBIG)
        gw_log (GW_LOG_DEBUG, "replay.too_large", "cell=%.64s max_bytes=%zu", cell,
                self->max_bytes);
}

//  --------------------------------------------------------------------------
//  Sending.

static void
s_iopub (gw_out_replay_t *self, ch_msg_t *msg, const void *topic, size_t topic_len)
{
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, topic, topic_len);
    if (self->emit)
        self->emit (self->arg, CH_IOPUB, ids, msg);
    gw_frames_destroy (&ids);
}

static void
s_status (gw_out_replay_t *self, const json_t *parent, const char *state, const char *session)
{
    json_t *content = json_pack ("{s:s}", "execution_state", state);
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, "status", parent, &content, session);
    char topic [128];
    snprintf (topic, sizeof topic, "kernel.%s.status", session);
    s_iopub (self, msg, topic, strlen (topic));
    ch_msg_destroy (&msg);
}

//  The reply, then idle. Takes content.
static void
s_reply (gw_out_replay_t *self, const gw_frames_t *ids, const json_t *header, json_t *content,
         const char *session)
{
    ch_msg_t *msg = ch_msg_new (CH_CONTROL, "cellvm_replay_reply", header, &content, session);
    if (self->emit && ids)
        self->emit (self->arg, CH_CONTROL, ids, msg);
    ch_msg_destroy (&msg);
    s_status (self, header, "idle", session);
}

//  Metadata as kept, marked: this is a replay, of which message, for which request.
static json_t *
s_replay_metadata (const gw_replay_item_t *item, const json_t *request)
{
    size_t len = 0;
    const uint8_t *text = gw_replay_item_part (item, GW_REPLAY_METADATA, &len);
    json_t *metadata = ch_jfast_loadb (text, len, 0, NULL);
    if (!json_is_object (metadata)) {
        json_decref (metadata);
        metadata = json_object ();
    }
    json_object_set_new (metadata, "cellvm_replay", json_true ());
    json_object_set_new (metadata, "cellvm_replay_of", json_string (gw_replay_item_msg_id (item)));
    json_object_set (metadata, "cellvm_replay_request", json_object_get (request, "msg_id"));
    return metadata;
}

//  One kept message again: fresh header, the original parent and content.
//  Returns the bytes it carried (content, metadata, buffers).
static size_t
s_send_item (gw_out_replay_t *self, const s_job_t *job, const gw_replay_item_t *item,
             const char *session)
{
    size_t plen = 0, clen = 0, tlen = 0, blen = 0, bytes = 0;
    const uint8_t *ptext = gw_replay_item_part (item, GW_REPLAY_PARENT, &plen);
    json_t *parent = ch_jfast_loadb (ptext, plen, 0, NULL);
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, gw_replay_item_type (item), parent, NULL, session);
    json_decref (parent);
    json_t *metadata = s_replay_metadata (item, job->header);
    size_t mlen = 0;
    char *mtext = ch_jfast_dump (metadata, JSON_COMPACT, &mlen);
    bytes += mtext ? mlen : 0;
    free (mtext);
    ch_msg_set_metadata (msg, &metadata);
    const uint8_t *content = gw_replay_item_part (item, GW_REPLAY_CONTENT, &clen);
    uint8_t *raw = malloc (clen ? clen : 1);
    if (!raw)
        abort ();
    memcpy (raw, content, clen);
    ch_msg_set_raw_content (msg, &raw, clen);
    bytes += clen;
    for (size_t i = 0; i < gw_replay_item_nbuffers (item); i++) {
        const uint8_t *buf = gw_replay_item_buffer (item, i, &blen);
        uint8_t *copy = malloc (blen ? blen : 1);
        if (!copy)
            abort ();
        memcpy (copy, buf, blen);
        ch_msg_add_buffer (msg, &copy, blen);
        bytes += blen;
    }
    const uint8_t *topic = gw_replay_item_part (item, GW_REPLAY_TOPIC, &tlen);
    self->sending = true;
    s_iopub (self, msg, topic, tlen);
    self->sending = false;
    ch_msg_destroy (&msg);
    return bytes;
}

//  The job is done: the reply says how much went out.
static void
s_finish (gw_out_replay_t *self, s_job_t *job, const char *session)
{
    json_t *content = json_pack ("{s:s, s:I, s:I}", "status", "ok", "count",
                                 (json_int_t) job->sel.n, "bytes", (json_int_t) job->bytes);
    if (job->sel.nskipped) {
        json_t *skipped = json_array ();
        for (size_t i = 0; i < job->sel.nskipped; i++)
            json_array_append_new (skipped, json_string (job->sel.skipped [i]));
        json_object_set_new (content, "skipped", skipped);
    }
    s_reply (self, job->ids, job->header, content, session);
}

void
gw_out_replay_pump (gw_out_replay_t *self, const char *session)
{
    assert (self && session);
    size_t msgs = 0, bytes = 0;
    s_job_t *job = zlistx_first (self->jobs);
    while (job && msgs < S_BATCH_MSGS && bytes < S_BATCH_BYTES) {
        if (job->next < job->sel.n) {
            size_t n = s_send_item (self, job, job->sel.items [job->next++], session);
            job->bytes += n;
            bytes += n;
            msgs++;
            continue;
        }
        s_finish (self, job, session);
        zlistx_delete (self->jobs, zlistx_cursor (self->jobs));
        job = zlistx_first (self->jobs);
    }
}

//  --------------------------------------------------------------------------
//  Requests.

static json_t *
s_error (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback");
}

//  Why the selection failed, in words.
static void
s_unavailable (const gw_out_replay_t *self, int rc, const char *id, bool since,
               char *text, size_t cap)
{
    size_t mib = self->max_bytes >> 20;
    if (rc == -ESTALE)
        snprintf (text, cap, "The output of cell %.256s is no longer kept: it was evicted. The "
                  "gateway keeps the output of the last %zu cells, %zu MiB at most; the oldest "
                  "cells go first.", id, self->max_cells, mib);
    else if (rc == -EFBIG)
        snprintf (text, cap, "The output of cell %.256s was larger than the replay buffer "
                  "(%zu MiB), so none of it was kept.", id, mib);
    else
        snprintf (text, cap, "Nothing is kept for msg_id %.256s: it is not %s, or its cell "
                  "was evicted long ago. The gateway keeps the output of the last %zu cells, "
                  "%zu MiB at most.", id, since ? "an execute_request or an IOPub message the "
                  "gateway sent" : "an execute_request that ran here", self->max_cells, mib);
}

//  Start a replay for the request; content is its checked content. Returns
//  NULL when it started, else the error reply's content.
static json_t *
s_start (gw_out_replay_t *self, gw_frames_t **ids_p, const json_t *header, const json_t *content)
{
    char text [800];
    if (zlistx_size (self->jobs) >= S_MAX_JOBS) {
        snprintf (text, sizeof text, "%d replays are already under way; ask again when one "
                  "has replied.", S_MAX_JOBS);
        return s_error ("ReplayBusy", text);
    }
    const char *since = json_string_value (json_object_get (content, "since"));
    const char *id = since ? since : json_string_value (json_object_get (content, "msg_id"));
    s_job_t *job = calloc (1, sizeof *job);
    if (!job)
        abort ();
    int rc = gw_replay_select (self->buf, id, since != NULL, &job->sel);
    if (rc < 0) {
        free (job);
        s_unavailable (self, rc, id, since != NULL, text, sizeof text);
        return s_error ("ReplayUnavailable", text);
    }
    job->ids = *ids_p;
    *ids_p = NULL;
    job->header = json_incref ((json_t *) header);
    zlistx_add_end (self->jobs, job);
    return NULL;
}

void
gw_out_replay_request (gw_out_replay_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p,
                       const char *session)
{
    assert (self && ids_p && msg_p && *msg_p && session);
    const json_t *header = ch_msg_header (*msg_p);
    char why [256];
    s_status (self, header, "busy", session);
    json_t *error = NULL;
    if (gw_check_replay_request (ch_msg_content (*msg_p), why, sizeof why) < 0)
        error = s_error ("BadRequest", why);
    else
        error = s_start (self, ids_p, header, ch_msg_content (*msg_p));
    if (error) {
        gw_log (GW_LOG_INFO, "replay.refused", "ename=%s",
                json_string_value (json_object_get (error, "ename")));
        s_reply (self, *ids_p, header, error, session);
    }
    else
        gw_out_replay_pump (self, session);
    ch_msg_destroy (msg_p);
    gw_frames_destroy (ids_p);
}
