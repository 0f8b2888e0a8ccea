/*  gw_frames - a growable array of owned byte strings. */
#include "wire/gw_frames.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct _gw_frames_t {
    gw_frame_t *items;                          //  the frames
    size_t size;                                //  frames in use
    size_t cap;                                 //  frames allocated
};

static void *
s_alloc (size_t size)
{
    void *p = malloc (size ? size : 1);
    if (!p)
        abort ();                               //  out of memory: nothing sane to do
    return p;
}

gw_frames_t *
gw_frames_new (void)
{
    gw_frames_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    return self;
}

void
gw_frames_destroy (gw_frames_t **self_p)
{
    assert (self_p);
    gw_frames_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->size; i++)
        free (self->items [i].data);
    free (self->items);
    free (self);
    *self_p = NULL;
}

void
gw_frames_append_take (gw_frames_t *self, uint8_t **data_p, size_t size)
{
    assert (self && data_p && (*data_p || size == 0));
    if (self->size == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 8;
        gw_frame_t *items = realloc (self->items, cap * sizeof *items);
        if (!items)
            abort ();
        self->items = items;
        self->cap = cap;
    }
    uint8_t *data = *data_p ? *data_p : s_alloc (1);
    self->items [self->size++] = (gw_frame_t) { .data = data, .size = size };
    *data_p = NULL;
}

void
gw_frames_append (gw_frames_t *self, const void *data, size_t size)
{
    assert (self && (data || size == 0));
    assert (size < SIZE_MAX);
    uint8_t *copy = s_alloc (size + 1);
    if (size)
        memcpy (copy, data, size);
    copy [size] = 0;                            //  lets text frames be read as strings
    gw_frames_append_take (self, &copy, size);
}

size_t
gw_frames_size (const gw_frames_t *self)
{
    assert (self);
    return self->size;
}

const gw_frame_t *
gw_frames_get (const gw_frames_t *self, size_t index)
{
    assert (self);
    return index < self->size ? &self->items [index] : NULL;
}

const gw_frame_t *
gw_frames_array (const gw_frames_t *self)
{
    assert (self);
    return self->size ? self->items : NULL;
}

gw_frames_t *
gw_frames_dup (const gw_frames_t *self)
{
    assert (self);
    gw_frames_t *copy = gw_frames_new ();
    for (size_t i = 0; i < self->size; i++)
        gw_frames_append (copy, self->items [i].data, self->items [i].size);
    return copy;
}
