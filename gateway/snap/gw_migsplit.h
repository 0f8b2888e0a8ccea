/*  gw_migsplit - a QEMU 7.2 migration stream split into guest RAM and the rest.

    A session's snapshot is saved as QEMU's own pre-copy stream (x-ignore-
    shared off): device state and every page of guest RAM. Resuming it as a
    stream reads all of RAM before the guest runs. Split, the pages of one
    RAM block (the memory backend, "mem") go into a file that a resume maps
    privately and faults in on first touch, and what remains is a stream
    that QEMU loads unchanged: the same header, configuration and sections,
    with the block's page records dropped from the RAM sections (the block
    list, the other blocks' pages, each section's end and footer stay).

    The stream comes from a QEMU that ran guest code, so it is parsed as
    hostile input: every length and offset is checked, and anything this
    parser does not know (compression, XBZRLE, postcopy commands, another
    iterative section inside RAM's) is refused with words, never guessed.

    Pure: no I/O. The caller gives the whole stream and gets callbacks.
*/
#ifndef GW_MIGSPLIT_H
#define GW_MIGSPLIT_H

#include <stddef.h>
#include <stdint.h>

#define GW_MIGSPLIT_PAGE 4096u

typedef struct {
    //  Bytes of the stream that stays (in order; called many times).
    int (*keep) (void *ctx, const uint8_t *data, size_t len);
    //  A page of the split block at offset (page-aligned, inside the
    //  block); data NULL: the page is zero. A page may come more than once
    //  (a live save resends dirtied pages): the last one counts.
    int (*page) (void *ctx, uint64_t offset, const uint8_t *data);
    void *ctx;
} gw_migsplit_sink_t;

typedef struct {
    uint64_t pages;                             //  page records of the block (data)
    uint64_t zero_pages;                        //  zero records of the block
    uint64_t kept_bytes;                        //  bytes passed to keep
    uint64_t block_bytes;                       //  the block's length, from the stream
} gw_migsplit_stats_t;

//  Split stream [0, len) for block (its RAMBlock id, e.g. "mem"), which
//  must be block_bytes long. 0, or -errno with err: -EPROTO for a stream
//  this parser refuses (err says where and why), a sink's own error as it
//  returned it. stats may be NULL.
int gw_migsplit_run (const uint8_t *stream, size_t len, const char *block, uint64_t block_bytes,
                     const gw_migsplit_sink_t *sink, gw_migsplit_stats_t *stats, char *err,
                     size_t errlen);

#endif
