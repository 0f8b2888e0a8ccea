/*  gw_memtrim - what a paused session's gateway gives back (see gw_memtrim.h). */
#include "session/gw_memtrim.h"
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

typedef struct {
    uintptr_t lo, hi;
    bool file;                                  //  backed by a file (path starts with '/')
    bool writable;
    unsigned long anon_kib;                     //  pages copied on write: not the file's any more
} s_vma_t;

//  A header line of /proc/self/smaps: "lo-hi perms offset dev inode [path]".
static bool
s_header (const char *line, s_vma_t *vma)
{
    char perms [5], path [2] = "";
    if (sscanf (line, "%" SCNxPTR "-%" SCNxPTR " %4s %*s %*s %*s %1s", &vma->lo, &vma->hi,
                perms, path) < 3)
        return false;
    vma->file = path [0] == '/';
    vma->writable = perms [1] == 'w';
    vma->anon_kib = 0;
    return true;
}

//  A read-only file mapping with no copied-on-write page holds nothing but the file's
//  own pages: PAGEOUT reclaims those only we map; DONTNEED drops our mapping of the
//  shared ones (they stay in the page cache). Either refaults identical bytes. A
//  RELRO segment (relocated, then made read-only) has anonymous pages and is left.
static size_t
s_release (const s_vma_t *vma, bool *pageout)
{
    if (!vma->file || vma->writable || vma->anon_kib > 0)
        return 0;
    void *p = (void *) vma->lo;
    size_t len = vma->hi - vma->lo;
    if (*pageout && madvise (p, len, MADV_PAGEOUT) < 0 && errno == EINVAL)
        *pageout = false;                       //  before Linux 5.4
    return madvise (p, len, MADV_DONTNEED) == 0 ? len : 0;
}

size_t
gw_memtrim_release (void)
{
    malloc_trim (0);
    FILE *smaps = fopen ("/proc/self/smaps", "re");
    if (!smaps)
        return 0;
    char line [512];
    s_vma_t vma = { 0 };
    bool have = false, pageout = true;
    size_t released = 0;
    unsigned long kib;
    while (fgets (line, sizeof line, smaps)) {
        s_vma_t next;
        if (!strchr (line, '\n')) {            //  a long path: its tail is no header
            int c;
            while ((c = fgetc (smaps)) != EOF && c != '\n')
                ;
        }
        if (sscanf (line, "Anonymous: %lu", &kib) == 1)
            vma.anon_kib += kib;
        else
        if (strchr (line, '-') && s_header (line, &next)) {
            if (have)
                released += s_release (&vma, &pageout);
            vma = next;
            have = true;
        }
    }
    if (have)
        released += s_release (&vma, &pageout);
    fclose (smaps);
    return released;
}
