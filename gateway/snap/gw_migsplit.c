/*  gw_migsplit - a QEMU 7.2 migration stream split into guest RAM and the rest.

    The layout read here is QEMU's savevm.c and ram.c of 7.2: the file
    header, the configuration, RAM's iterative sections (START, PART, END,
    each closed by a footer), then device sections and the end, which stay
    as they are. Only RAM's records are rewritten.
*/
#include "snap/gw_migsplit.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_MAGIC         0x5145564du
#define S_VERSION       3u
#define S_CONFIGURATION 0x07
#define S_SUBSECTION    0x05
#define S_START         0x01
#define S_PART          0x02
#define S_END           0x03
#define S_FOOTER        0x7e

#define S_ZERO          0x02u
#define S_MEM_SIZE      0x04u
#define S_PAGE          0x08u
#define S_EOS           0x10u
#define S_CONTINUE      0x20u
#define S_FLAGS         0xfffu

#define S_BLOCKS_MAX    64

typedef struct {
    char id [256];
    uint64_t bytes;
} s_block_t;

typedef struct {
    const uint8_t *base, *p, *end;
    const gw_migsplit_sink_t *sink;
    const char *split_id;
    uint64_t split_bytes;
    s_block_t blocks [S_BLOCKS_MAX];
    int nblocks;
    int split;                                  //  index of the split block, -1: not listed
    int in_last;                                //  CONTINUE's block
    const uint8_t *mark;                        //  kept bytes from here not yet passed on
    gw_migsplit_stats_t stats;
    char *err;
    size_t errlen;
} s_split_t;

static int
s_fail (s_split_t *s, const char *fmt, ...)
{
    char what [300];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (what, sizeof what, fmt, ap);
    va_end (ap);
    snprintf (s->err, s->errlen, "the snapshot's migration stream, at byte %zu: %s",
              (size_t) (s->p - s->base), what);
    return -EPROTO;
}

static int
s_need (s_split_t *s, size_t n)
{
    return (size_t) (s->end - s->p) >= n ? 0 : s_fail (s, "it ends early");
}

static uint64_t
s_get (s_split_t *s, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | *s->p++;
    return v;
}

//  n big-endian bytes into *v. 0, or -EPROTO.
static int
s_num (s_split_t *s, size_t n, uint64_t *v)
{
    int rc = s_need (s, n);
    if (rc == 0)
        *v = s_get (s, n);
    return rc;
}

//  A length byte and that many bytes, as a C string.
static int
s_str (s_split_t *s, char out [256])
{
    uint64_t n = 0;
    int rc = s_num (s, 1, &n);
    if (rc == 0 && (rc = s_need (s, (size_t) n)) == 0) {
        memcpy (out, s->p, (size_t) n);
        out [n] = '\0';
        s->p += n;
    }
    return rc;
}

//  Pass the kept bytes up to upto, if any.
static int
s_flush (s_split_t *s, const uint8_t *upto)
{
    if (upto <= s->mark)
        return 0;
    size_t n = (size_t) (upto - s->mark);
    s->mark = upto;
    s->stats.kept_bytes += n;
    return s->sink->keep (s->sink->ctx, upto - n, n);
}

//  The configuration: the machine's name, and the subsections 7.2 writes.
static int
s_configuration (s_split_t *s)
{
    uint64_t v = 0, n = 0;
    char name [256];
    int rc = s_num (s, 1, &v);
    if (rc == 0 && v != S_CONFIGURATION)
        return s_fail (s, "no configuration section (0x%02x)", (unsigned) v);
    if (rc == 0 && (rc = s_num (s, 4, &n)) == 0 && (rc = s_need (s, (size_t) n)) == 0)
        s->p += n;
    while (rc == 0 && s->p < s->end && *s->p == S_SUBSECTION) {
        s->p++;
        if ((rc = s_str (s, name)) < 0 || (rc = s_num (s, 4, &v)) < 0)
            break;
        if (strcmp (name, "configuration/capabilities") == 0) {
            for (rc = s_num (s, 4, &n); rc == 0 && n > 0; n--)
                if ((rc = s_str (s, name)) == 0 && strcmp (name, "x-ignore-shared") == 0)
                    return s_fail (s, "saved with x-ignore-shared: its RAM is not in it");
        }
        else if (strcmp (name, "configuration/target-page-bits") == 0)
            rc = s_num (s, 4, &v);
        else if (strcmp (name, "configuration/uuid") == 0)
            rc = s_need (s, 16) == 0 ? (s->p += 16, 0) : -EPROTO;
        else
            return s_fail (s, "an unknown configuration subsection \"%.100s\"", name);
    }
    return rc;
}

static int
s_find (const s_split_t *s, const char *id)
{
    for (int i = 0; i < s->nblocks; i++)
        if (strcmp (s->blocks [i].id, id) == 0)
            return i;
    return -1;
}

//  The block list of RAM's setup: ids and lengths summing to total.
static int
s_mem_size (s_split_t *s, uint64_t total)
{
    if (s->nblocks)
        return s_fail (s, "a second RAM block list");
    int rc = 0;
    while (rc == 0 && total > 0) {
        s_block_t *b = &s->blocks [s->nblocks];
        if (s->nblocks == S_BLOCKS_MAX)
            return s_fail (s, "over %d RAM blocks", S_BLOCKS_MAX);
        if ((rc = s_str (s, b->id)) < 0 || (rc = s_num (s, 8, &b->bytes)) < 0)
            break;
        if (b->bytes > total || b->bytes % GW_MIGSPLIT_PAGE || s_find (s, b->id) >= 0)
            return s_fail (s, "RAM block \"%.100s\": a bad or repeated length", b->id);
        total -= b->bytes;
        s->nblocks++;
    }
    s->split = rc == 0 ? s_find (s, s->split_id) : -1;
    if (rc == 0 && s->split < 0)
        return s_fail (s, "no RAM block \"%.100s\"", s->split_id);
    if (rc == 0 && s->blocks [s->split].bytes != s->split_bytes)
        return s_fail (s, "RAM block \"%.100s\" is %llu bytes, not %llu", s->split_id,
                       (unsigned long long) s->blocks [s->split].bytes,
                       (unsigned long long) s->split_bytes);
    s->stats.block_bytes = rc == 0 ? s->split_bytes : 0;
    return rc;
}

//  A page record's block: named, or the last one (CONTINUE).
static int
s_record_block (s_split_t *s, unsigned flags, int *index)
{
    char id [256];
    if (flags & S_CONTINUE) {
        if (s->in_last < 0)
            return s_fail (s, "a page continues no block");
        *index = s->in_last;
        return 0;
    }
    int rc = s_str (s, id);
    if (rc == 0 && (*index = s_find (s, id)) < 0)
        return s_fail (s, "a page of an unlisted RAM block \"%.100s\"", id);
    if (rc == 0)
        s->in_last = *index;
    return rc;
}

//  One ZERO or PAGE record, from its word on: dropped (the split block's,
//  to the page sink) or kept.
static int
s_page (s_split_t *s, const uint8_t *rec, uint64_t word)
{
    unsigned flags = (unsigned) (word & S_FLAGS);
    uint64_t offset = word & ~(uint64_t) S_FLAGS;
    int index = -1, rc = s_record_block (s, flags, &index);
    const uint8_t *data = NULL;
    if (rc == 0 && (s->blocks [index].bytes < GW_MIGSPLIT_PAGE
                    || offset > s->blocks [index].bytes - GW_MIGSPLIT_PAGE))
        return s_fail (s, "a page at %llu, past RAM block \"%.100s\"",
                       (unsigned long long) offset, s->blocks [index].id);
    if (rc == 0)
        rc = s_need (s, flags & S_PAGE ? GW_MIGSPLIT_PAGE : 1);
    if (rc == 0 && (flags & S_ZERO) && *s->p != 0)
        return s_fail (s, "a zero page filled with 0x%02x", *s->p);
    if (rc == 0) {
        data = flags & S_PAGE ? s->p : NULL;
        s->p += flags & S_PAGE ? GW_MIGSPLIT_PAGE : 1;
    }
    //  A kept record that continues a block continues a kept one: CONTINUE
    //  names the block of the record before, and a dropped record's
    //  successor of another block names its own. So no word is rewritten.
    if (rc < 0 || index != s->split)
        return rc;
    if ((rc = s_flush (s, rec)) == 0)
        rc = s->sink->page (s->sink->ctx, offset, data);
    s->mark = s->p;
    if (data)
        s->stats.pages++;
    else
        s->stats.zero_pages++;
    return rc;
}

//  A RAM section's records, through its EOS.
static int
s_records (s_split_t *s, bool setup)
{
    while (true) {
        const uint8_t *rec = s->p;
        uint64_t word = 0;
        int rc = s_num (s, 8, &word);
        unsigned flags = (unsigned) (word & S_FLAGS), kind = flags & ~S_CONTINUE;
        if (rc < 0)
            return rc;
        if (flags == S_EOS)
            return 0;
        if (flags == S_MEM_SIZE && setup)
            rc = s_mem_size (s, word & ~(uint64_t) S_FLAGS);
        else if ((kind == S_ZERO || kind == S_PAGE) && s->nblocks)
            rc = s_page (s, rec, word);
        else
            return s_fail (s, "a RAM record QEMU 7.2 does not write here (flags 0x%x)", flags);
        if (rc < 0)
            return rc;
    }
}

//  RAM's sections, START through END. Anything else before END is refused.
static int
s_ram (s_split_t *s)
{
    uint64_t type = 0, id = 0, section = 0, v = 0;
    char name [256];
    int rc = s_num (s, 1, &type);
    if (rc == 0 && type != S_START)
        return s_fail (s, "the first section is not RAM's (type 0x%02x)", (unsigned) type);
    if (rc == 0 && (rc = s_num (s, 4, &section)) == 0 && (rc = s_str (s, name)) == 0
    &&  strcmp (name, "ram") != 0)
        return s_fail (s, "the first section is \"%.100s\", not RAM", name);
    if (rc == 0 && (rc = s_num (s, 4, &v)) == 0 && (rc = s_num (s, 4, &v)) == 0 && v != 4)
        return s_fail (s, "RAM's section version %llu, not 4", (unsigned long long) v);
    for (bool setup = true; rc == 0; setup = false) {
        if ((rc = s_records (s, setup)) < 0 || (rc = s_num (s, 1, &v)) < 0
        ||  (rc = s_num (s, 4, &id)) < 0)
            break;
        if (v != S_FOOTER || id != section)
            return s_fail (s, "RAM's section has no footer");
        if (type == S_END)
            return 0;
        if ((rc = s_num (s, 1, &type)) == 0 && (rc = s_num (s, 4, &id)) == 0
        &&  ((type != S_PART && type != S_END) || id != section))
            return s_fail (s, "section type 0x%02x (id %llu) before RAM's end",
                           (unsigned) type, (unsigned long long) id);
    }
    return rc;
}

int
gw_migsplit_run (const uint8_t *stream, size_t len, const char *block, uint64_t block_bytes,
                 const gw_migsplit_sink_t *sink, gw_migsplit_stats_t *stats, char *err,
                 size_t errlen)
{
    assert (stream || len == 0);
    assert (block && sink && sink->keep && sink->page && err && errlen);
    s_split_t s = { .base = stream, .p = stream, .end = stream + len, .sink = sink,
                    .split_id = block, .split_bytes = block_bytes, .split = -1,
                    .in_last = -1, .mark = stream, .err = err,
                    .errlen = errlen };
    err [0] = '\0';
    uint64_t magic = 0, version = 0;
    int rc = s_num (&s, 4, &magic);
    if (rc == 0 && (rc = s_num (&s, 4, &version)) == 0
    &&  (magic != S_MAGIC || version != S_VERSION))
        rc = s_fail (&s, "not a QEMU migration stream of version 3");
    if (rc == 0 && block_bytes % GW_MIGSPLIT_PAGE)
        rc = s_fail (&s, "a block length that is not whole pages");
    if (rc == 0 && (rc = s_configuration (&s)) == 0 && (rc = s_ram (&s)) == 0 && s.split < 0)
        rc = s_fail (&s, "RAM's sections list no blocks, so no \"%.100s\"", block);
    if (rc == 0 && s.p == s.end)
        rc = s_fail (&s, "nothing follows RAM: no device state");
    if (rc == 0)
        rc = s_flush (&s, s.end);               //  devices and the end, as they are
    if (stats)
        *stats = s.stats;
    return rc;
}
