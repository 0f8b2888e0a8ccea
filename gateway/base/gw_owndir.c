/*  gw_owndir - a private directory (see gw_owndir.h). */
#include "base/gw_owndir.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int
gw_owndir_make (const char *path, uid_t owner, char *err, size_t errlen)
{
    assert (path && err);
    struct stat st;
    const char *why = NULL;
    int rc = 0;
    if ((mkdir (path, 0700) < 0 && errno != EEXIST) || lstat (path, &st) < 0)
        rc = -errno;
    else if (!S_ISDIR (st.st_mode))
        rc = -ENOTDIR, why = "not a directory (or a symlink)";
    else if (st.st_uid != owner)
        rc = -EACCES, why = "owned by another user";
    else if ((st.st_mode & 07777) != 0700 && chmod (path, 0700) < 0)
        rc = -errno;
    if (rc < 0)
        snprintf (err, errlen, "%s: %s", path, why ? why : strerror (-rc));
    return rc;
}
