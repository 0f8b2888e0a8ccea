/*  gi_files - file transfer into and out of /workspace for the control port.
 *
 *  Paths are "/workspace/..." or relative to /workspace. They are resolved
 *  with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from /workspace, so
 *  no path, "..", or symlink (planted by the cell at any moment) can reach
 *  outside it; symlinks are refused, not followed. Files are created owned
 *  by the kernel user. put also writes below /notebook (see below).
 */
#ifndef GI_FILES_H
#define GI_FILES_H

#include <stddef.h>
#include <stdint.h>

//  Largest file put may grow (by appends) and largest chunk get returns.
#define GI_FILE_MAX (1024ull * 1024ull * 1024ull)
#define GI_CHUNK_MAX (16u * 1024u * 1024u)

typedef struct {
    uint64_t size;              //  put: file size after; get: whole file size
    uint64_t offset;            //  get: where the chunk starts
    size_t length;              //  get: chunk length
    int eof;                    //  get: chunk reaches the end of the file
    char sha256 [65];           //  of the bytes put / of the chunk got
    char path [4096];           //  absolute guest path ("/workspace/...")
} gi_file_info_t;

//  Write data (len may be 0) to path, creating parent directories; with
//  append, add to the end. mode 0 means 0644 (only a new file takes it).
//  0 or -errno (-EXDEV: outside /workspace; -ELOOP: a symlink on the way;
//  -EFBIG: past GI_FILE_MAX; -EINVAL / -EISDIR: not a regular file).
int gi_files_put (const char *path, const uint8_t *data, size_t len, int append,
                  unsigned mode, gi_file_info_t *info);

//  Read up to length bytes (capped at GI_CHUNK_MAX) from offset of a regular
//  file. *data_p gets a malloc'ed buffer (NULL when the chunk is empty).
int gi_files_get (const char *path, uint64_t offset, size_t length,
                  uint8_t **data_p, gi_file_info_t *info);

//  The part of path below /workspace, judged by its letters alone: NULL when
//  path is empty, names /workspace itself, is absolute elsewhere, or has a
//  ".." that climbs above /workspace. Symlinks and mounts are openat2's job.
const char *gi_files_relative (const char *path);

//  The part of an absolute path below /notebook, by the same rules, or NULL.
//  put writes there too, as root (files 0644 unless mode says otherwise):
//  the host's copy of a notebook's folder, which the kernel user only reads.
const char *gi_files_notebook_relative (const char *path);

//  Tests only: the directory that stands for /notebook on disk (NULL: back).
int gi_files_set_notebook_root (const char *dir);

//  Tests only: the directory that stands for /workspace on disk (NULL: back
//  to /workspace). Paths on the wire still say /workspace. 0 or -ENAMETOOLONG.
int gi_files_set_root (const char *dir);

#endif
