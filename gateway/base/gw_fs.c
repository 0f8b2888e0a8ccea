/*  gw_fs - whole files and trees on disk (see gw_fs.h). */
#include "base/gw_fs.h"
#include "ch_io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define S_MAX_DEPTH 256                         //  a local workspace is the user's tree; one fd per level

static int
s_remove_at (int parent, const char *name, int depth)
{
    if (unlinkat (parent, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    if (depth >= S_MAX_DEPTH)
        return -ELOOP;
    int fd = openat (parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir (fd) : NULL;
    if (!dir) {
        int e = errno;
        if (fd >= 0)
            close (fd);
        return -e;
    }
    struct dirent *de;
    while ((de = readdir (dir)))
        if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
            s_remove_at (dirfd (dir), de->d_name, depth + 1);
    closedir (dir);
    return unlinkat (parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -errno;
}

int
gw_fs_remove_tree (const char *path)
{
    assert (path);
    return s_remove_at (AT_FDCWD, path, 0);
}

//  read/write from the start, for where copy_file_range will not go.
static int
s_copy_plain (int in, int out)
{
    static __thread char buf [1 << 16];
    if (lseek (in, 0, SEEK_SET) < 0 || lseek (out, 0, SEEK_SET) < 0 || ftruncate (out, 0) < 0)
        return -errno;
    for (;;) {
        ssize_t n = read (in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : 0;
        int rc = ch_write_bytes (out, buf, (size_t) n);
        if (rc < 0)
            return rc;
    }
}

int
gw_fs_copy (const char *src, const char *dst, bool durable)
{
    assert (src && dst);
    int in = open (src, O_RDONLY | O_CLOEXEC), rc = 0;
    int out = open (dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (in < 0 || out < 0)
        rc = -errno;
    if (rc == 0 && ioctl (out, FICLONE, in) < 0) {
        ssize_t n = 1;
        while (rc == 0 && n > 0)
            if ((n = copy_file_range (in, NULL, out, NULL, 1 << 30, 0)) < 0)
                rc = -errno;
        if (rc == -EXDEV || rc == -EINVAL || rc == -EOPNOTSUPP)
            rc = s_copy_plain (in, out);        //  across filesystems on newer kernels
    }
    if (in >= 0)
        close (in);
    if (out >= 0 && ((durable && fsync (out) < 0) || close (out) < 0) && rc == 0)
        rc = -EIO;
    if (rc < 0 && out >= 0)
        unlink (dst);
    return rc;
}
