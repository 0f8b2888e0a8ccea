/*  gw_replay - the recent cells' IOPub output (see gw_replay.h).

    Every message is in two lists: the buffer's, in the order sent (what
    `since` walks), and its cell's (what eviction walks). Cells are kept
    oldest first. A message leaves both lists when its cell is evicted, but
    lives on (gw_replay_item) while a selection still holds it.
*/
#include "server/gw_replay.h"
#include "base/gw_mem.h"

#include <czmq.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_EVICTED 256                           //  evicted cell ids remembered, for the error

//  A stored message's place in both lists.
typedef struct s_node_t {
    gw_replay_item_t *item;                     //  the buffer's reference
    uint64_t seq;                               //  order sent
    struct s_node_t *prev, *next;               //  in the buffer
    struct s_node_t *cnext;                     //  next of its cell
} s_node_t;

typedef struct _s_cell_t s_cell_t;
struct _s_cell_t {
    char *id;                                   //  the execute_request's msg_id
    uint64_t seq0;                              //  seq of the first message it could have
    s_cell_t *prev, *next;                      //  oldest first
    s_node_t *first, *last;
    size_t bytes;                               //  counted, parent included
    bool too_large;                             //  outgrew max_bytes: keeps nothing
};

struct _gw_replay_t {
    size_t max_cells, max_bytes;
    zhashx_t *cells;                            //  id -> s_cell_t (not owned by the hash)
    zhashx_t *items;                            //  msg_id -> s_node_t (not owned)
    s_cell_t *oldest, *newest;
    s_node_t *head, *tail;
    size_t ncells, bytes;
    uint64_t seq;                               //  next message's
    char *evicted [S_EVICTED];                  //  ring of evicted cell ids
    size_t evicted_next;
};

//  --------------------------------------------------------------------------
//  Cells and eviction.

//  Take every message of cell out of the buffer.
static void
s_cell_drop_items (gw_replay_t *self, s_cell_t *cell)
{
    s_node_t *node = cell->first;
    while (node) {
        s_node_t *next = node->cnext;
        if (node->prev)
            node->prev->next = node->next;
        else
            self->head = node->next;
        if (node->next)
            node->next->prev = node->prev;
        else
            self->tail = node->prev;
        const char *msg_id = gw_replay_item_msg_id (node->item);
        if (zhashx_lookup (self->items, msg_id) == node)
            zhashx_delete (self->items, msg_id);
        gw_replay_item_destroy (&node->item);
        free (node);
        node = next;
    }
    cell->first = cell->last = NULL;
    self->bytes -= cell->bytes;
    cell->bytes = 0;
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
    cell->id = gw_strdup (id);
    cell->seq0 = self->seq + 1;
    cell->bytes = parent->len;                  //  its messages share one copy
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
    size_t counted = gw_replay_item_counted (msg);
    if (cell->bytes + counted > self->max_bytes) {
        s_cell_drop_items (self, cell);         //  alone it would not fit: keep nothing
        cell->too_large = true;
        return -EFBIG;
    }
    s_node_t *node = calloc (1, sizeof *node);
    if (!node)
        abort ();
    node->item = gw_replay_item_new (msg, cell->last ? cell->last->item : NULL);
    node->seq = self->seq;
    node->prev = self->tail;
    if (self->tail)
        self->tail->next = node;
    else
        self->head = node;
    self->tail = node;
    if (cell->last)
        cell->last->cnext = node;
    else
        cell->first = node;
    cell->last = node;
    zhashx_insert (self->items, gw_replay_item_msg_id (node->item), node);
    cell->bytes += counted;
    self->bytes += counted;
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
    sel->items [sel->n++] = gw_replay_item_ref (item);
}

//  The cell's messages, or from seq on (with the too-large cells in range).
static void
s_collect (gw_replay_t *self, s_cell_t *only, uint64_t from, gw_replay_sel_t *sel)
{
    size_t cap = 0;
    for (s_node_t *it = only ? only->first : self->head; it; it = only ? it->cnext : it->next)
        cap += it->seq >= from;
    sel->items = calloc (cap + 1, sizeof *sel->items);
    if (!sel->items)
        abort ();
    for (s_node_t *it = only ? only->first : self->head; it; it = only ? it->cnext : it->next)
        if (it->seq >= from)
            s_pick (sel, it->item, cap);
    sel->skipped = calloc (self->ncells + 1, sizeof *sel->skipped);
    if (!sel->skipped)
        abort ();
    for (s_cell_t *c = self->oldest; !only && c; c = c->next)
        if (c->too_large && c->seq0 >= from)
            sel->skipped [sel->nskipped++] = gw_strdup (c->id);
}

int
gw_replay_select (gw_replay_t *self, const char *id, bool since, gw_replay_sel_t *sel)
{
    assert (self && id && sel);
    memset (sel, 0, sizeof *sel);
    s_cell_t *cell = zhashx_lookup (self->cells, id);
    s_node_t *node = since && !cell ? zhashx_lookup (self->items, id) : NULL;
    if (!cell && !node)
        return s_was_evicted (self, id) ? -ESTALE : -ENOENT;
    if (!since && cell->too_large)
        return -EFBIG;
    s_collect (self, since ? NULL : cell, node ? node->seq + 1 : cell->seq0, sel);
    return 0;
}

void
gw_replay_sel_clear (gw_replay_sel_t *sel)
{
    assert (sel);
    for (size_t i = 0; i < sel->n; i++)
        gw_replay_item_destroy (&sel->items [i]);
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
