/*  gw_wsfiles - read and write files beneath a workspace directory on the
    host, for the unsafe-local backend (the microvm backend asks the guest's
    init instead). Paths resolve with openat2 RESOLVE_BENEATH |
    RESOLVE_NO_SYMLINKS: neither "..", nor an absolute path elsewhere, nor a
    symlink the cell planted leads outside.
*/
#ifndef GW_WSFILES_H
#define GW_WSFILES_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

//  root is the workspace directory; path is relative to it or absolute
//  under it. 0 and *reply_p {status, path, size, sha256}, or -errno + err.
int gw_wsfiles_put (const char *root, const char *path, const uint8_t *data, size_t len,
                    json_t **reply_p, char *err, size_t errlen);

//  0 and the bytes (malloc'ed) in *data_p / *len_p, at most max; -EFBIG
//  past it; other -errno + err.
int gw_wsfiles_get (const char *root, const char *path, size_t max, uint8_t **data_p,
                    size_t *len_p, char *err, size_t errlen);

//  Lowercase hex SHA-256 of data into hex (65 bytes).
void gw_sha256_hex (const uint8_t *data, size_t len, char hex [65]);

#endif
