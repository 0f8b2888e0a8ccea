/*  gw_wsfiles - read and write files beneath a workspace directory on the
    host, for the unsafe-local backend (the microvm backend asks the guest's
    init instead). Paths resolve with openat2 RESOLVE_BENEATH |
    RESOLVE_NO_SYMLINKS: neither "..", nor an absolute path elsewhere, nor a
    symlink the cell planted leads outside.
*/
#ifndef GW_WSFILES_H
#define GW_WSFILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  root is the workspace directory; path is relative to it or absolute
//  under it (the guest's /workspace/x spelling works too). Write len bytes,
//  after what is there when append, else replacing it. 0 and *reply_p
//  {status, path, size (the file's now), written}, or -errno + err.
int gw_wsfiles_put (const char *root, const char *path, bool append, const uint8_t *data,
                    size_t len, json_t **reply_p, char *err, size_t errlen);

//  Read up to len bytes at offset: 0, the bytes (malloc'ed) in *data_p /
//  *len_p and *reply_p {status, size, offset, eof}; or -errno + err.
int gw_wsfiles_get (const char *root, const char *path, uint64_t offset, size_t len,
                    uint8_t **data_p, size_t *len_p, json_t **reply_p, char *err,
                    size_t errlen);

#endif
