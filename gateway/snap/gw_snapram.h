/*  gw_snapram - a snapshot's guest RAM as a file of its own.

    QEMU saves a session as one pre-copy stream: devices and every page of
    RAM. Resumed as a stream, all of RAM is read before the guest runs
    (1.3 s at 512 MiB here), and each resume holds its own copy. Split
    (gw_migsplit), the memory backend's pages go into `ram`, a sparse file
    of the guest's size that a resume maps privately: pages come in on first
    touch, and every session resumed from one snapshot shares the pages none
    of them has written (docs/snapshots.md, "Resume maps RAM").
*/
#ifndef GW_SNAPRAM_H
#define GW_SNAPRAM_H

#include "snap/gw_migsplit.h"

#define GW_SNAPRAM_BLOCK "mem"                  //  the RAM block of -machine memory-backend=mem

//  Split dir/state (QEMU's whole stream) into dir/ram (mem_bytes) and a
//  dir/state of everything else, in place; the ram file's digest
//  (gw_snapram_digest) into hex. 0, or -errno with err; on failure
//  dir/state is as it was.
int gw_snapram_split (const char *dir, uint64_t mem_bytes, char hex [65],
                      gw_migsplit_stats_t *stats, char *err, size_t errlen);

//  A RAM file's digest, as meta.json's ram_digest: SHA-256 over each
//  64 KiB chunk that is not all zero, preceded by its offset (8 bytes, big
//  endian). Zero chunks are left out, so a sparse file and a dense copy of
//  it agree, and the holes are skipped (SEEK_DATA) rather than read: most
//  of a guest's RAM is never written. extra_flags go to open. 0 or -errno.
int gw_snapram_digest (const char *path, int extra_flags, char hex [65]);

#endif
