/*  gw_replay - the recent cells' IOPub output (see gw_replay.h).

    Every message is in two lists: the buffer's, in the order sent (what
    `since` walks), and its cell's (what eviction walks). Cells are kept
    oldest first. A message leaves both lists when its cell is evicted, but
    lives on while a selection still holds it.
*/
#include "server/gw_replay.h"

#include <czmq.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_EVICTED 256                           //  evicted cell ids remembered, for the error

//  Bytes shared by a cell's messages (its parent header), refcounted.
typedef struct {
    int refs;
    size_t len;
    uint8_t data [];
} s_blob_t;

struct _gw_replay_item_t {
    int refs;                                   //  the buffer's and each selection's
    uint64_t seq;                               //  order sent
    gw_replay_item_t *prev, *next;              //  in the buffer, while linked
    gw_replay_item_t *cnext;                    //  next of its cell
    bool linked;
    char *msg_id, *type;
    s_blob_t *parent;                           //  shared with its cell
    uint8_t *parts [3];                         //  topic, metadata, content
    size_t lens [3];
    size_t nbuffers;
    uint8_t **buffers;
    size_t *buffer_lens;
    size_t bytes;                               //  as counted against max_bytes
};

typedef struct _s_cell_t s_cell_t;
struct _s_cell_t {
    char *id;                                   //  the execute_request's msg_id
    uint64_t seq0;                              //  seq of the first message it could have
    s_cell_t *prev, *next;                      //  oldest first
    gw_replay_item_t *first, *last;
    s_blob_t *parent;
    size_t bytes;                               //  counted, parent included
    bool too_large;                             //  outgrew max_bytes: keeps nothing
};

struct _gw_replay_t {
    size_t max_cells, max_bytes;
    zhashx_t *cells;                            //  id -> s_cell_t (not owned by the hash)
    zhashx_t *items;                            //  msg_id -> linked item (not owned)
    s_cell_t *oldest, *newest;
    gw_replay_item_t *head, *tail;
    size_t ncells, bytes;
    uint64_t seq;                               //  next message's
    char *evicted [S_EVICTED];                  //  ring of evicted cell ids
    size_t evicted_next;
};

static void *
s_dup (const void *data, size_t len)
{
    uint8_t *copy = malloc (len ? len : 1);
    if (!copy)
        abort ();
    if (len)
        memcpy (copy, data, len);
    return copy;
}

static char *
s_strdup (const char *text)
{
    return s_dup (text, strlen (text) + 1);
}

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

static void
s_item_unref (gw_replay_item_t **item_p)
{
    gw_replay_item_t *item = *item_p;
    *item_p = NULL;
    if (!item || --item->refs > 0)
        return;
    for (int i = 0; i < 3; i++)
        free (item->parts [i]);
    for (size_t i = 0; i < item->nbuffers; i++)
        free (item->buffers [i]);
    free (item->buffers);
    free (item->buffer_lens);
    s_blob_unref (&item->parent);
    free (item->msg_id);
    free (item->type);
    free (item);
}

//  A copy of msg, counted; not linked anywhere yet.
static gw_replay_item_t *
s_item_new (const gw_replay_msg_t *msg, s_blob_t *parent)
{
    gw_replay_item_t *item = calloc (1, sizeof *item);
    if (!item)
        abort ();
    item->refs = 1;
    item->msg_id = s_strdup (msg->msg_id);
    item->type = s_strdup (msg->msg_type);
    item->parent = parent;
    parent->refs++;
    const gw_replay_bytes_t *parts [3] = { &msg->topic, &msg->metadata, &msg->content };
    item->bytes = GW_REPLAY_ITEM_OVERHEAD + strlen (msg->msg_id) + strlen (msg->msg_type);
    for (int i = 0; i < 3; i++) {
        item->parts [i] = s_dup (parts [i]->data, parts [i]->len);
        item->lens [i] = parts [i]->len;
        item->bytes += parts [i]->len;
    }
    item->nbuffers = msg->nbuffers;
    item->buffers = calloc (msg->nbuffers + 1, sizeof *item->buffers);
    item->buffer_lens = calloc (msg->nbuffers + 1, sizeof *item->buffer_lens);
    if (!item->buffers || !item->buffer_lens)
        abort ();
    for (size_t i = 0; i < msg->nbuffers; i++) {
        item->buffers [i] = s_dup (msg->buffers [i].data, msg->buffers [i].len);
        item->buffer_lens [i] = msg->buffers [i].len;
        item->bytes += msg->buffers [i].len;
    }
    return item;
}

//  What msg would count, without copying it.
static size_t
s_counted (const gw_replay_msg_t *msg)
{
    size_t n = GW_REPLAY_ITEM_OVERHEAD + strlen (msg->msg_id) + strlen (msg->msg_type)
             + msg->topic.len + msg->metadata.len + msg->content.len;
    for (size_t i = 0; i < msg->nbuffers; i++)
        n += msg->buffers [i].len;
    return n;
}

//  --------------------------------------------------------------------------
//  Cells and eviction.

//  Take every message of cell out of the buffer.
static void
s_cell_drop_items (gw_replay_t *self, s_cell_t *cell)
{
    gw_replay_item_t *item = cell->first;
    while (item) {
        gw_replay_item_t *next = item->cnext;
        if (item->prev)
            item->prev->next = item->next;
        else
            self->head = item->next;
        if (item->next)
            item->next->prev = item->prev;
        else
            self->tail = item->prev;
        if (zhashx_lookup (self->items, item->msg_id) == item)
            zhashx_delete (self->items, item->msg_id);
        item->linked = false;
        item->prev = item->next = item->cnext = NULL;
        s_item_unref (&item);
        item = next;
    }
    cell->first = cell->last = NULL;
    self->bytes -= cell->bytes;
    cell->bytes = 0;
    s_blob_unref (&cell->parent);
}

static void
s_evict_oldest (gw_replay_t *self)
{
    s_cell_t *cell = self->oldest;
    s_cell_drop_items (self, cell);
    self->oldest = cell->next;
    if (cell->next)
        cell->next->prev = NULL;
    else
        self->newest = NULL;
    zhashx_delete (self->cells, cell->id);
    self->ncells--;
    free (self->evicted [self->evicted_next]);
    self->evicted [self->evicted_next] = cell->id;      //  the ring takes the id
    self->evicted_next = (self->evicted_next + 1) % S_EVICTED;
    free (cell);
}

//  Oldest cells go, whole, until both caps hold; keep never goes.
static void
s_enforce (gw_replay_t *self, const s_cell_t *keep)
{
    while (self->oldest && self->oldest != keep
       &&  (self->ncells > self->max_cells || self->bytes > self->max_bytes))
        s_evict_oldest (self);
}

static s_cell_t *
s_cell_new (gw_replay_t *self, const char *id, const gw_replay_bytes_t *parent)
{
    s_cell_t *cell = calloc (1, sizeof *cell);
    if (!cell)
        abort ();
    cell->id = s_strdup (id);
    cell->seq0 = self->seq + 1;
    cell->parent = s_blob_new (parent);
    cell->bytes = parent->len;
    cell->prev = self->newest;
    if (self->newest)
        self->newest->next = cell;
    else
        self->oldest = cell;
    self->newest = cell;
    zhashx_insert (self->cells, cell->id, cell);
    self->ncells++;
    self->bytes += cell->bytes;
    s_enforce (self, cell);
    return cell;
}

//  --------------------------------------------------------------------------
//  The public API.

gw_replay_t *
gw_replay_new (size_t max_cells, size_t max_bytes)
{
    gw_replay_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->max_cells = max_cells ? max_cells : GW_REPLAY_CELLS_DEFAULT;
    self->max_bytes = max_bytes ? max_bytes : GW_REPLAY_BYTES_DEFAULT;
    self->cells = zhashx_new ();
    self->items = zhashx_new ();
    if (!self->cells || !self->items)
        abort ();
    return self;
}

void
gw_replay_destroy (gw_replay_t **self_p)
{
    assert (self_p);
    gw_replay_t *self = *self_p;
    if (!self)
        return;
    while (self->oldest)
        s_evict_oldest (self);
    for (size_t i = 0; i < S_EVICTED; i++)
        free (self->evicted [i]);
    zhashx_destroy (&self->cells);
    zhashx_destroy (&self->items);
    free (self);
    *self_p = NULL;
}

static bool
s_id_ok (const char *id)
{
    return id && id [0] && strlen (id) <= GW_REPLAY_ID_MAX;
}

int
gw_replay_add (gw_replay_t *self, const gw_replay_msg_t *msg)
{
    assert (self && msg && msg->msg_type);
    if (!s_id_ok (msg->cell) || !s_id_ok (msg->msg_id))
        return -EINVAL;
    s_cell_t *cell = zhashx_lookup (self->cells, msg->cell);
    if (!cell)
        cell = s_cell_new (self, msg->cell, &msg->parent);
    self->seq++;
    if (cell->too_large)
        return -EFBIG;
    size_t counted = s_counted (msg);
    if (cell->bytes + counted > self->max_bytes) {
        s_cell_drop_items (self, cell);         //  alone it would not fit: keep nothing
        cell->too_large = true;
        return -EFBIG;
    }
    gw_replay_item_t *item = s_item_new (msg, cell->parent);
    item->seq = self->seq;
    item->linked = true;
    item->prev = self->tail;
    if (self->tail)
        self->tail->next = item;
    else
        self->head = item;
    self->tail = item;
    if (cell->last)
        cell->last->cnext = item;
    else
        cell->first = item;
    cell->last = item;
    zhashx_insert (self->items, item->msg_id, item);
    cell->bytes += item->bytes;
    self->bytes += item->bytes;
    s_enforce (self, cell);
    return 0;
}

static bool
s_was_evicted (const gw_replay_t *self, const char *id)
{
    for (size_t i = 0; i < S_EVICTED; i++)
        if (self->evicted [i] && strcmp (self->evicted [i], id) == 0)
            return true;
    return false;
}

static void
s_pick (gw_replay_sel_t *sel, gw_replay_item_t *item, size_t cap)
{
    assert (sel->n < cap);
    item->refs++;
    sel->items [sel->n++] = item;
}

//  The cell's messages, or from seq on (with the too-large cells in range).
static void
s_collect (gw_replay_t *self, s_cell_t *only, uint64_t from, gw_replay_sel_t *sel)
{
    size_t cap = 0;
    for (gw_replay_item_t *it = only ? only->first : self->head; it;
         it = only ? it->cnext : it->next)
        cap += it->seq >= from;
    sel->items = calloc (cap + 1, sizeof *sel->items);
    if (!sel->items)
        abort ();
    for (gw_replay_item_t *it = only ? only->first : self->head; it;
         it = only ? it->cnext : it->next)
        if (it->seq >= from)
            s_pick (sel, it, cap);
    sel->skipped = calloc (self->ncells + 1, sizeof *sel->skipped);
    if (!sel->skipped)
        abort ();
    for (s_cell_t *c = self->oldest; !only && c; c = c->next)
        if (c->too_large && c->seq0 >= from)
            sel->skipped [sel->nskipped++] = s_strdup (c->id);
}

int
gw_replay_select (gw_replay_t *self, const char *id, bool since, gw_replay_sel_t *sel)
{
    assert (self && id && sel);
    memset (sel, 0, sizeof *sel);
    s_cell_t *cell = zhashx_lookup (self->cells, id);
    gw_replay_item_t *item = since && !cell ? zhashx_lookup (self->items, id) : NULL;
    if (!cell && !item)
        return s_was_evicted (self, id) ? -ESTALE : -ENOENT;
    if (!since && cell->too_large)
        return -EFBIG;
    s_collect (self, since ? NULL : cell, item ? item->seq + 1 : cell->seq0, sel);
    return 0;
}

void
gw_replay_sel_clear (gw_replay_sel_t *sel)
{
    assert (sel);
    for (size_t i = 0; i < sel->n; i++)
        s_item_unref (&sel->items [i]);
    for (size_t i = 0; i < sel->nskipped; i++)
        free (sel->skipped [i]);
    free (sel->items);
    free (sel->skipped);
    memset (sel, 0, sizeof *sel);
}

size_t
gw_replay_cells (const gw_replay_t *self)
{
    assert (self);
    return self->ncells;
}

size_t
gw_replay_bytes (const gw_replay_t *self)
{
    assert (self);
    return self->bytes;
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
