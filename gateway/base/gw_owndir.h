/*  gw_owndir - a private directory: made 0700 when missing, and then only a
    real directory (not a symlink) of the expected owner will do. Under a
    shared /tmp or /run anyone could have made the name first, to see or
    swap what we put there.
*/
#ifndef GW_OWNDIR_H
#define GW_OWNDIR_H

#include <stddef.h>
#include <sys/types.h>

//  mkdir path 0700 if missing; it must be a directory owned by owner (not a
//  link), and its mode is set back to 0700 if it was another. 0, -ENOTDIR
//  (not a directory, or a symlink), -EACCES (another user's) or -errno, with
//  "path: why" in err.
int gw_owndir_make (const char *path, uid_t owner, char *err, size_t errlen);

#endif
