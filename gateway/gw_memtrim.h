/*  gw_memtrim - what a paused session's gateway gives back.

    A paused session keeps its gateway (sockets, heartbeats) and nothing
    else. gw_memtrim_release frees the heap's unused pages (malloc_trim) and
    asks the kernel to reclaim the process's read-only file pages
    (MADV_PAGEOUT on its libraries' text and constants): they stay in the
    page cache, shared and reclaimable, and come back on a minor fault when
    the session wakes. Heartbeats touch a few of them again.
*/
#ifndef GW_MEMTRIM_H
#define GW_MEMTRIM_H
#include <stddef.h>

//  Trim and page out; the bytes of read-only file mappings advised (0 when
//  the kernel has no MADV_PAGEOUT, before Linux 5.4).
size_t gw_memtrim_release (void);

#endif
