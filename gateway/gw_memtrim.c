/*  gw_memtrim - what a paused session's gateway gives back (see gw_memtrim.h). */
#include "gw_memtrim.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

size_t
gw_memtrim_release (void)
{
    malloc_trim (0);
    FILE *maps = fopen ("/proc/self/maps", "re");
    if (!maps)
        return 0;
    char line [512];
    size_t advised = 0;
    while (fgets (line, sizeof line, maps)) {
        uintptr_t lo, hi;
        char perms [5], path [2];
        unsigned long long off;
        //  "lo-hi perms offset dev inode path": a path that starts with '/'
        //  is a file; [heap], [stack] and anonymous mappings are not.
        if (sscanf (line, "%" SCNxPTR "-%" SCNxPTR " %4s %llx %*s %*s %1s", &lo, &hi, perms,
                    &off, path) != 5 || path [0] != '/' || perms [1] == 'w')
            continue;
        if (madvise ((void *) lo, hi - lo, MADV_PAGEOUT) == 0)
            advised += hi - lo;
        else if (errno == EINVAL)
            break;                              //  no MADV_PAGEOUT in this kernel
    }
    fclose (maps);
    return advised;
}
