/*  gw_replay_item - one IOPub message kept for replay (see gw_replay_item.h). */
#include "server/gw_replay_item.h"
#include "base/gw_mem.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

//  Bytes shared by a cell's messages (its parent header), refcounted.
typedef struct {
    int refs;
    size_t len;
    uint8_t data [];
} s_blob_t;

struct _gw_replay_item_t {
    int refs;                                   //  the buffer's and each selection's
    char *msg_id, *type;
    s_blob_t *parent;                           //  shared with its cell's other messages
    uint8_t *parts [3];                         //  topic, metadata, content
    size_t lens [3];
    size_t nbuffers;
    uint8_t **buffers;
    size_t *buffer_lens;
};

static s_blob_t *
s_blob_new (const gw_replay_bytes_t *bytes)
{
    s_blob_t *blob = malloc (sizeof *blob + (bytes->len ? bytes->len : 1));
    if (!blob)
        abort ();
    blob->refs = 1;
    blob->len = bytes->len;
    if (bytes->len)
        memcpy (blob->data, bytes->data, bytes->len);
    return blob;
}

static void
s_blob_unref (s_blob_t **blob_p)
{
    if (*blob_p && --(*blob_p)->refs == 0)
        free (*blob_p);
    *blob_p = NULL;
}

gw_replay_item_t *
gw_replay_item_new (const gw_replay_msg_t *msg, const gw_replay_item_t *sibling)
{
    assert (msg && msg->msg_id && msg->msg_type);
    gw_replay_item_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->refs = 1;
    self->msg_id = gw_strdup (msg->msg_id);
    self->type = gw_strdup (msg->msg_type);
    self->parent = sibling ? sibling->parent : s_blob_new (&msg->parent);
    if (sibling)
        self->parent->refs++;
    const gw_replay_bytes_t *parts [3] = { &msg->topic, &msg->metadata, &msg->content };
    for (int i = 0; i < 3; i++) {
        self->parts [i] = gw_memdup (parts [i]->data, parts [i]->len);
        self->lens [i] = parts [i]->len;
    }
    self->nbuffers = msg->nbuffers;
    self->buffers = calloc (msg->nbuffers + 1, sizeof *self->buffers);
    self->buffer_lens = calloc (msg->nbuffers + 1, sizeof *self->buffer_lens);
    if (!self->buffers || !self->buffer_lens)
        abort ();
    for (size_t i = 0; i < msg->nbuffers; i++) {
        self->buffers [i] = gw_memdup (msg->buffers [i].data, msg->buffers [i].len);
        self->buffer_lens [i] = msg->buffers [i].len;
    }
    return self;
}

gw_replay_item_t *
gw_replay_item_ref (gw_replay_item_t *self)
{
    assert (self);
    self->refs++;
    return self;
}

void
gw_replay_item_destroy (gw_replay_item_t **self_p)
{
    assert (self_p);
    gw_replay_item_t *self = *self_p;
    *self_p = NULL;
    if (!self || --self->refs > 0)
        return;
    for (int i = 0; i < 3; i++)
        free (self->parts [i]);
    for (size_t i = 0; i < self->nbuffers; i++)
        free (self->buffers [i]);
    free (self->buffers);
    free (self->buffer_lens);
    s_blob_unref (&self->parent);
    free (self->msg_id);
    free (self->type);
    free (self);
}

size_t
gw_replay_item_counted (const gw_replay_msg_t *msg)
{
    assert (msg);
    size_t n = GW_REPLAY_ITEM_OVERHEAD + strlen (msg->msg_id) + strlen (msg->msg_type)
             + msg->topic.len + msg->metadata.len + msg->content.len;
    for (size_t i = 0; i < msg->nbuffers; i++)
        n += msg->buffers [i].len;
    return n;
}

const char *
gw_replay_item_type (const gw_replay_item_t *item)
{
    assert (item);
    return item->type;
}

const char *
gw_replay_item_msg_id (const gw_replay_item_t *item)
{
    assert (item);
    return item->msg_id;
}

const uint8_t *
gw_replay_item_part (const gw_replay_item_t *item, gw_replay_part_t part, size_t *len_p)
{
    assert (item && len_p);
    if (part == GW_REPLAY_PARENT) {
        *len_p = item->parent->len;
        return item->parent->data;
    }
    int i = part == GW_REPLAY_TOPIC ? 0 : part == GW_REPLAY_METADATA ? 1 : 2;
    *len_p = item->lens [i];
    return item->parts [i];
}

size_t
gw_replay_item_nbuffers (const gw_replay_item_t *item)
{
    assert (item);
    return item->nbuffers;
}

const uint8_t *
gw_replay_item_buffer (const gw_replay_item_t *item, size_t index, size_t *len_p)
{
    assert (item && len_p && index < item->nbuffers);
    *len_p = item->buffer_lens [index];
    return item->buffers [index];
}
