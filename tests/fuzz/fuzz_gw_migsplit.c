/*  fuzz_gw_migsplit - a snapshot's migration stream, written by a QEMU
    that ran guest code, split for block "mem" of 16 pages.

    Every page given out is page-aligned and inside the block; a refusal is
    -EPROTO and explains itself; an accepted split's stats are what the
    sinks saw, and what stays splits again into itself with no pages.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snap/gw_migsplit.h"

#define S_BLOCK_BYTES (16 * (uint64_t) GW_MIGSPLIT_PAGE)

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

typedef struct {
    uint8_t *kept;
    size_t len, cap;
    uint64_t pages, zero_pages;
} s_count_t;

static int
s_keep (void *ctx, const uint8_t *data, size_t len)
{
    s_count_t *c = ctx;
    if (len == 0)
        return 0;
    if (c->len + len > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + len)
            cap *= 2;
        uint8_t *kept = realloc (c->kept, cap);
        if (!kept)
            return -ENOMEM;
        c->kept = kept;
        c->cap = cap;
    }
    memcpy (c->kept + c->len, data, len);
    c->len += len;
    return 0;
}

static int
s_page (void *ctx, uint64_t offset, const uint8_t *data)
{
    s_count_t *c = ctx;
    if (offset % GW_MIGSPLIT_PAGE || offset >= S_BLOCK_BYTES) {
        fprintf (stderr, "fuzz_gw_migsplit: a page at %llu\n", (unsigned long long) offset);
        abort ();
    }
    if (data)
        c->pages++;
    else
        c->zero_pages++;
    return 0;
}

//  Split data into c. The sinks never fail (but for want of memory), so
//  the run's result is 0 or the codec's own refusal.
static int
s_split (const uint8_t *data, size_t size, s_count_t *c, gw_migsplit_stats_t *stats)
{
    gw_migsplit_sink_t sink = { .keep = s_keep, .page = s_page, .ctx = c };
    char err [256] = "";
    int rc = gw_migsplit_run (data, size, "mem", S_BLOCK_BYTES, &sink, stats, err, sizeof err);
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0 && (rc != -EPROTO || !err [0])) {
        fprintf (stderr, "fuzz_gw_migsplit: refused with %d, err \"%s\"\n", rc, err);
        abort ();
    }
    if (rc == 0 && (stats->kept_bytes != c->len || stats->pages != c->pages
                    || stats->zero_pages != c->zero_pages || stats->block_bytes != S_BLOCK_BYTES)) {
        fprintf (stderr, "fuzz_gw_migsplit: stats are not what the sinks saw\n");
        abort ();
    }
    return rc;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_count_t once = { 0 }, twice = { 0 };
    gw_migsplit_stats_t stats;
    if (s_split (data, size, &once, &stats) == 0) {
        int rc = s_split (once.kept, once.len, &twice, &stats);
        if (rc == -EPROTO || (rc == 0 && (stats.pages || stats.zero_pages || twice.len != once.len
                                          || memcmp (twice.kept, once.kept, once.len) != 0))) {
            fprintf (stderr, "fuzz_gw_migsplit: what stays does not split into itself\n");
            abort ();
        }
    }
    free (once.kept);
    free (twice.kept);
    return 0;
}
