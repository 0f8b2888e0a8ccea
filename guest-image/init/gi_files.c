/*  gi_files - put/get under /workspace, symlink-proof. */
#include "gi_files.h"
#include "ch_util.h"
#include "gi_sys.h"
#include "ch_io.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS \
                   | RESOLVE_NO_XDEV)

//  Where /workspace and /notebook are on disk: themselves, except in tests.
static char s_root_dir [PATH_MAX] = GI_WORKSPACE;
static char s_notebook_dir [PATH_MAX] = GI_NOTEBOOK;

int
gi_files_set_root (const char *dir)
{
    if (dir && strlen (dir) >= sizeof s_root_dir)
        return -ENAMETOOLONG;
    snprintf (s_root_dir, sizeof s_root_dir, "%s", dir ? dir : GI_WORKSPACE);
    return 0;
}

int
gi_files_set_notebook_root (const char *dir)
{
    if (dir && strlen (dir) >= sizeof s_notebook_dir)
        return -ENAMETOOLONG;
    snprintf (s_notebook_dir, sizeof s_notebook_dir, "%s", dir ? dir : GI_NOTEBOOK);
    return 0;
}

//  1 when a ".." in rel climbs above where rel starts.
static int
s_climbs (const char *rel)
{
    long depth = 0;
    for (const char *p = rel; *p; ) {
        size_t n = strcspn (p, "/");
        if (n == 2 && p [0] == '.' && p [1] == '.')
            depth--;
        else if (n > 0 && !(n == 1 && p [0] == '.'))
            depth++;
        if (depth < 0)
            return 1;
        p += n + (p [n] == '/');
    }
    return 0;
}

//  The part of path below base; a relative path is below it already.
static const char *
s_relative_to (const char *base, const char *path, bool relative_ok)
{
    size_t n = strlen (base);
    if (!path || (path [0] != '/' && !relative_ok))
        return NULL;
    if (path [0] == '/') {
        if (strncmp (path, base, n) != 0 || (path [n] != '/' && path [n] != 0))
            return NULL;
        for (path += n; *path == '/'; path++)
            ;
    }
    return path [0] && !s_climbs (path) ? path : NULL;
}

const char *
gi_files_relative (const char *path)
{
    return s_relative_to (GI_WORKSPACE, path, true);
}

const char *
gi_files_notebook_relative (const char *path)
{
    return s_relative_to (GI_NOTEBOOK, path, false);
}

static int
s_openat2 (int dirfd, const char *rel, int flags, unsigned mode)
{
    struct open_how how = { .flags = (uint64_t) flags | O_CLOEXEC | O_NOFOLLOW,
                            .mode = flags & O_CREAT ? mode : 0, .resolve = S_RESOLVE };
    long fd = syscall (SYS_openat2, dirfd, rel, &how, sizeof how);
    return fd < 0 ? -errno : (int) fd;
}

static int
s_open_root (const char *dir)
{
    int fd = open (dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int
s_root (void)
{
    return s_open_root (s_root_dir);
}

//  Open the directory part (not the leaf) of rel beneath dir: -ELOOP names a
//  symlink, which O_NOFOLLOW | O_DIRECTORY reports as ENOTDIR.
static int
s_open_dir (int dir, const char *part)
{
    struct stat st;
    int next = s_openat2 (dir, part, O_PATH | O_DIRECTORY, 0);
    if (next == -ENOTDIR && fstatat (dir, part, &st, AT_SYMLINK_NOFOLLOW) == 0
    &&  S_ISLNK (st.st_mode))
        next = -ELOOP;
    return next;
}

//  Open (creating as needed) the directory holding the last component of
//  rel; *leaf_p points at that component. Returns the dir fd or -errno.
static int
s_open_parent (int root, char *rel, bool kernels, char **leaf_p)
{
    int dir = dup (root);
    if (dir < 0)
        return -errno;
    char *part = rel, *slash;
    while ((slash = strchr (part, '/'))) {
        *slash = 0;
        if (part [0]) {
            //  A directory we create belongs to the kernel user, like the file.
            if (mkdirat (dir, part, 0755) == 0 && kernels)
                fchownat (dir, part, GI_KERNEL_UID, GI_KERNEL_GID, AT_SYMLINK_NOFOLLOW);
            int next = s_open_dir (dir, part);
            close (dir);
            if (next < 0)
                return next;
            dir = next;
        }
        part = slash + 1;
    }
    *leaf_p = part;
    return dir;
}

//  The relative path put writes, copied into rel. A ".." before the leaf is
//  refused here, before any directory is made (the walk would refuse it).
static int
s_put_path (const char *rel0, char rel [PATH_MAX])
{
    if (!rel0)
        return -EXDEV;
    if (strlen (rel0) >= PATH_MAX)
        return -ENAMETOOLONG;
    snprintf (rel, PATH_MAX, "%s", rel0);
    for (const char *p = rel; (p = strstr (p, "..")); p += 2)
        if ((p == rel || p [-1] == '/') && p [2] == '/')
            return -EXDEV;
    return 0;
}

//  The file itself: never through a symlink, never blocking on a fifo (that
//  would hang PID 1); anything but a regular file is -EINVAL.
static int
s_open_leaf (int dir, const char *leaf, int append, unsigned mode)
{
    if (!leaf [0] || strcmp (leaf, ".") == 0 || strcmp (leaf, "..") == 0)
        return -EISDIR;
    int flags = O_WRONLY | O_CREAT | O_NONBLOCK | (append ? O_APPEND : O_TRUNC);
    int fd = s_openat2 (dir, leaf, flags, mode ? mode & 0777 : 0644);
    return fd == -ENXIO ? -EINVAL : fd;
}

//  Check the open file, hand it to the kernel user, write; *size_p after.
static int
s_write_file (int fd, const uint8_t *data, size_t len, bool kernels, uint64_t *size_p)
{
    struct stat st;
    int rc = fstat (fd, &st) < 0 ? -errno : !S_ISREG (st.st_mode) ? -EINVAL : 0;
    if (rc == 0 && (uint64_t) st.st_size + len > GI_FILE_MAX)
        rc = -EFBIG;
    if (rc == 0 && kernels && st.st_uid == 0 && fchown (fd, GI_KERNEL_UID, GI_KERNEL_GID) < 0)
        rc = -errno;
    if (rc == 0)
        rc = ch_write_bytes (fd, data, len);
    if (rc == 0 && fstat (fd, &st) < 0)
        rc = -errno;
    if (rc == 0)
        *size_p = (uint64_t) st.st_size;
    return rc;
}

int
gi_files_put (const char *path, const uint8_t *data, size_t len, int append,
              unsigned mode, gi_file_info_t *info)
{
    char rel [PATH_MAX], *leaf = NULL;
    //  /notebook is root's: what the host copies there the kernel may read, not change.
    const char *rel0 = gi_files_relative (path);
    bool kernels = rel0 != NULL;
    if (!kernels)
        rel0 = gi_files_notebook_relative (path);
    int rc = s_put_path (rel0, rel);
    if (rc < 0)
        return rc;
    int root = kernels ? s_root () : s_open_root (s_notebook_dir), dir = -1, fd = -1;
    if (root < 0)
        return root;
    if ((rc = dir = s_open_parent (root, rel, kernels, &leaf)) < 0)
        goto fail;
    if ((rc = fd = s_open_leaf (dir, leaf, append, mode)) < 0)
        goto fail;
    if ((rc = s_write_file (fd, data, len, kernels, &info->size)) < 0)
        goto fail;
    ch_sha256_hex (data ? data : (const uint8_t *) "", len, info->sha256);
    snprintf (info->path, sizeof info->path, "%s/%s", kernels ? GI_WORKSPACE : GI_NOTEBOOK,
              rel0);
fail:
    if (fd >= 0)
        close (fd);
    if (dir >= 0)
        close (dir);
    close (root);
    return rc;
}

static int
s_read_at (int fd, uint8_t *buf, size_t len, uint64_t offset, size_t *got)
{
    *got = 0;
    while (*got < len) {
        ssize_t n = pread (fd, buf + *got, len - *got, (off_t) (offset + *got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        *got += (size_t) n;
    }
    return 0;
}

//  Read the chunk [offset, offset + length) of the open file, clipped to it.
static int
s_read_chunk (int fd, uint64_t offset, size_t length, uint8_t **buf_p,
              gi_file_info_t *info)
{
    struct stat st;
    if (fstat (fd, &st) < 0)
        return -errno;
    if (!S_ISREG (st.st_mode))
        return -EINVAL;
    uint64_t size = (uint64_t) st.st_size;
    uint64_t start = offset < size ? offset : size;
    size_t want = length < GI_CHUNK_MAX ? length : GI_CHUNK_MAX, got = 0;
    if (want > size - start)
        want = (size_t) (size - start);
    if (want && !(*buf_p = malloc (want)))
        return -ENOMEM;
    int rc = want ? s_read_at (fd, *buf_p, want, start, &got) : 0;
    *info = (gi_file_info_t) { .size = size, .offset = start, .length = got,
                               .eof = start + got >= size };
    ch_sha256_hex (*buf_p ? *buf_p : (const uint8_t *) "", got, info->sha256);
    return rc;
}

int
gi_files_get (const char *path, uint64_t offset, size_t length,
              uint8_t **data_p, gi_file_info_t *info)
{
    const char *rel = gi_files_relative (path);
    *data_p = NULL;
    if (!rel)
        return -EXDEV;
    int root = s_root (), fd = -1, rc;
    if (root < 0)
        return root;
    uint8_t *buf = NULL;
    if ((rc = fd = s_openat2 (root, rel, O_RDONLY | O_NONBLOCK, 0)) < 0)
        goto fail;
    if ((rc = s_read_chunk (fd, offset, length, &buf, info)) < 0)
        goto fail;
    snprintf (info->path, sizeof info->path, "%s/%s", GI_WORKSPACE, rel);
    *data_p = buf;
    buf = NULL;
fail:
    free (buf);
    if (fd >= 0)
        close (fd);
    close (root);
    return rc;
}
