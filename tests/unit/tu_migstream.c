/*  tu_migstream - QEMU 7.2 migration streams built byte by byte for the
    snapshot tests (tu_migstream.h).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tu_migstream.h"

#define PG TU_MIGSTREAM_PAGE
#define RAM_ID TU_MIGSTREAM_RAM_ID

void
tu_migstream_put (tu_migstream_buf_t *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len)
            cap *= 2;
        b->data = realloc (b->data, cap);
        assert_non_null (b->data);
        b->cap = cap;
    }
    if (len)
        memcpy (b->data + b->len, data, len);
    b->len += len;
}

void
tu_migstream_u8 (tu_migstream_buf_t *b, uint8_t v)
{
    tu_migstream_put (b, &v, 1);
}

void
tu_migstream_be32 (tu_migstream_buf_t *b, uint32_t v)
{
    uint8_t x [4] = { (uint8_t) (v >> 24), (uint8_t) (v >> 16), (uint8_t) (v >> 8), (uint8_t) v };
    tu_migstream_put (b, x, sizeof x);
}

void
tu_migstream_be64 (tu_migstream_buf_t *b, uint64_t v)
{
    tu_migstream_be32 (b, (uint32_t) (v >> 32));
    tu_migstream_be32 (b, (uint32_t) v);
}

void
tu_migstream_name (tu_migstream_buf_t *b, const char *name)
{
    size_t n = strlen (name);
    assert_true (n < 256);
    tu_migstream_u8 (b, (uint8_t) n);
    tu_migstream_put (b, name, n);
}

void
tu_migstream_free (tu_migstream_buf_t *b)
{
    free (b->data);
    *b = (tu_migstream_buf_t) { 0 };
}

void
tu_migstream_header (tu_migstream_buf_t *b)
{
    tu_migstream_be32 (b, 0x5145564d);
    tu_migstream_be32 (b, 3);
    tu_migstream_u8 (b, 0x07);
    tu_migstream_be32 (b, 7);
    tu_migstream_put (b, "microvm", 7);
}

void
tu_migstream_section (tu_migstream_buf_t *b, uint8_t type, uint32_t id)
{
    tu_migstream_u8 (b, type);
    tu_migstream_be32 (b, id);
}

void
tu_migstream_eos_footer (tu_migstream_buf_t *b, uint32_t id)
{
    tu_migstream_be64 (b, TU_MIGSTREAM_F_EOS);
    tu_migstream_u8 (b, 0x7e);
    tu_migstream_be32 (b, id);
}

void
tu_migstream_ram_start (tu_migstream_buf_t *b, uint64_t total,
                        const tu_migstream_block_t *blocks, size_t n)
{
    tu_migstream_section (b, TU_MIGSTREAM_START, RAM_ID);
    tu_migstream_name (b, "ram");
    tu_migstream_be32 (b, 0);
    tu_migstream_be32 (b, 4);
    tu_migstream_be64 (b, total | TU_MIGSTREAM_F_MEM_SIZE);
    for (size_t i = 0; i < n; i++) {
        tu_migstream_name (b, blocks [i].name);
        tu_migstream_be64 (b, blocks [i].bytes);
    }
    tu_migstream_eos_footer (b, RAM_ID);
}

//  An xorshift from a seed that is never 0: no page of zeros, and the
//  seed (hence the page) differs from tag to tag.
void
tu_migstream_page_data (uint8_t *page, uint32_t tag)
{
    uint32_t x = tag * 2654435761u ^ 0x9e3779b9u;
    x = x ? x : 1;
    for (size_t i = 0; i < PG; i += 4) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        memcpy (page + i, &x, 4);
    }
}

void
tu_migstream_record (tu_migstream_buf_t *b, const tu_migstream_rec_t *r)
{
    uint64_t flags = (r->zero ? TU_MIGSTREAM_F_ZERO : TU_MIGSTREAM_F_PAGE)
                   | (r->cont ? TU_MIGSTREAM_F_CONT : 0);
    tu_migstream_be64 (b, r->page * PG | flags);
    if (!r->cont)
        tu_migstream_name (b, r->block);
    if (r->zero)
        tu_migstream_u8 (b, r->fill);
    else {
        uint8_t page [PG];
        tu_migstream_page_data (page, r->tag);
        tu_migstream_put (b, page, PG);
    }
}

void
tu_migstream_tail (tu_migstream_buf_t *b)
{
    tu_migstream_put (b, "\x04\x00\x00\x00\x03\x05timer\x00\x00\x00\x00\x00\x00\x00\x02", 19);
    tu_migstream_section (b, TU_MIGSTREAM_PART, RAM_ID);
    tu_migstream_be64 (b, TU_MIGSTREAM_F_PAGE);
    tu_migstream_name (b, "mem");
    tu_migstream_put (b, "device bytes\x7e\x00\x00\x00\x03\x00\x06\x00\x00\x00\x0e{\"devices\":[]}",
                      37);
}

void
tu_migstream_stream (tu_migstream_buf_t *b, const tu_migstream_block_t *blocks, size_t nblocks,
                     const tu_migstream_rec_t *recs, size_t n, const char *drop)
{
    uint64_t total = 0;
    for (size_t i = 0; i < nblocks; i++)
        total += blocks [i].bytes;
    tu_migstream_header (b);
    tu_migstream_ram_start (b, total, blocks, nblocks);
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        left += recs [i].block == NULL;
    tu_migstream_section (b, left ? TU_MIGSTREAM_PART : TU_MIGSTREAM_END, RAM_ID);
    for (size_t i = 0; i < n; i++) {
        if (recs [i].block == NULL) {
            tu_migstream_eos_footer (b, RAM_ID);
            tu_migstream_section (b, --left ? TU_MIGSTREAM_PART : TU_MIGSTREAM_END, RAM_ID);
        } else if (!drop || strcmp (recs [i].block, drop) != 0)
            tu_migstream_record (b, &recs [i]);
    }
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_tail (b);
}
