/*  gw_memtrim - what a paused session's gateway gives back.

    A paused session keeps its gateway (sockets, heartbeats) and nothing
    else. gw_memtrim_release frees the heap's unused pages (malloc_trim) and
    lets go of the read-only file pages it maps (libraries' text and
    constants): MADV_PAGEOUT reclaims those no other process maps,
    MADV_DONTNEED drops the mapping of the shared rest. They stay in the
    page cache and come back on a minor fault. Mappings holding pages copied
    on write (RELRO) are left: their bytes are no longer the file's.
*/
#ifndef GW_MEMTRIM_H
#define GW_MEMTRIM_H
#include <stddef.h>

//  Trim and let go; the bytes of read-only file mappings released.
size_t gw_memtrim_release (void);

#endif
