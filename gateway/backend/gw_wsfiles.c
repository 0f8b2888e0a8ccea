/*  gw_wsfiles - files beneath a workspace directory on the host. */
#include "backend/gw_wsfiles.h"
#include "ch_io.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

//  The part of path below root ("" never), or NULL when it is not beneath.
static const char *
s_relative (const char *root, const char *path)
{
    size_t n = strlen (root);
    while (n > 1 && root [n - 1] == '/')
        n--;
    if (path [0] != '/')
        return path [0] ? path : NULL;
    if (strncmp (path, root, n) == 0 && path [n] == '/' && path [n + 1])
        return path + n + 1;
    //  The guest's spelling works too: /workspace/x is root/x.
    if (strncmp (path, "/workspace/", 11) == 0 && path [11])
        return path + 11;
    return NULL;
}

static int
s_open_beneath (const char *root, const char *rel, int flags, mode_t mode)
{
    int dfd = open (root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    struct open_how how = { .flags = (uint64_t) (flags | O_CLOEXEC), .mode = mode,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
                                     | RESOLVE_NO_MAGICLINKS };
    long fd = syscall (SYS_openat2, dfd, rel, &how, sizeof how);
    int e = errno;
    close (dfd);
    return fd < 0 ? -e : (int) fd;
}

//  The same words init uses (docs/files.md), so clients can match on them.
static const char *
s_why (int rc)
{
    return rc == -EXDEV ? "PathOutsideWorkspace: the path leads outside the workspace"
         : rc == -ELOOP ? "SymlinkRefused: the path goes through a symlink"
         : strerror (-rc);
}

//  Create the missing directories of rel's parent, each opened beneath root.
static int
s_mkdirs_beneath (const char *root, const char *rel)
{
    char prefix [4096];
    if (snprintf (prefix, sizeof prefix, "%s", rel) >= (int) sizeof prefix)
        return -ENAMETOOLONG;
    for (char *p = strchr (prefix, '/'); p; p = strchr (p + 1, '/')) {
        *p = 0;
        int fd = s_open_beneath (root, prefix, O_RDONLY | O_DIRECTORY, 0);
        if (fd == -ENOENT) {
            char *slash = strrchr (prefix, '/');
            int parent = slash ? (*slash = 0, s_open_beneath (root, prefix, O_RDONLY | O_DIRECTORY, 0))
                               : open (root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (slash)
                *slash = '/';
            if (parent < 0)
                return parent;
            int rc = mkdirat (parent, slash ? slash + 1 : prefix, 0755);
            int e = errno;
            close (parent);
            if (rc < 0 && e != EEXIST)
                return -e;
        }
        else if (fd < 0)
            return fd;
        else
            close (fd);
        *p = '/';
    }
    return 0;
}

int
gw_wsfiles_put (const char *root, const char *path, bool append, const uint8_t *data,
                size_t len, json_t **reply_p, char *err, size_t errlen)
{
    const char *rel = s_relative (root, path);
    if (!rel) {
        snprintf (err, errlen, "PathOutsideWorkspace: %.200s is not under the workspace", path);
        return -EPERM;
    }
    int fd = s_mkdirs_beneath (root, rel);
    if (fd == 0)
        fd = s_open_beneath (root, rel, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC),
                             0644);
    if (fd < 0) {
        snprintf (err, errlen, "cannot write %.200s: %s", path, s_why (fd));
        return fd;
    }
    int rc = ch_write_bytes (fd, data, len);
    struct stat st;
    if (rc == 0 && fstat (fd, &st) < 0)
        rc = -errno;
    close (fd);
    if (rc < 0) {
        snprintf (err, errlen, "cannot write %.200s: %s", path, strerror (-rc));
        return rc;
    }
    char abs [4200];
    snprintf (abs, sizeof abs, "%s/%s", root, rel);
    *reply_p = json_pack ("{s:s, s:s, s:I, s:I}", "status", "ok", "path", abs,
                          "size", (json_int_t) st.st_size, "written", (json_int_t) len);
    return 0;
}

int
gw_wsfiles_get (const char *root, const char *path, uint64_t offset, size_t len,
                uint8_t **data_p, size_t *len_p, json_t **reply_p, char *err, size_t errlen)
{
    const char *rel = s_relative (root, path);
    if (!rel) {
        snprintf (err, errlen, "PathOutsideWorkspace: %.200s is not under the workspace", path);
        return -EPERM;
    }
    int fd = s_open_beneath (root, rel, O_RDONLY, 0);
    struct stat st;
    if (fd < 0 || fstat (fd, &st) < 0 || !S_ISREG (st.st_mode)) {
        int rc = fd < 0 ? fd : -EISDIR;
        snprintf (err, errlen, "cannot read %.200s: %s", path,
                  rc == -EISDIR ? "not a regular file" : s_why (rc));
        if (fd >= 0)
            close (fd);
        return rc;
    }
    uint64_t size = (uint64_t) st.st_size, start = offset < size ? offset : size;
    size_t want = len < size - start ? len : (size_t) (size - start);
    uint8_t *buf = malloc (want + 1);
    if (!buf)
        abort ();
    ssize_t n = want ? pread (fd, buf, want, (off_t) start) : 0;
    close (fd);
    if (n < 0) {
        free (buf);
        snprintf (err, errlen, "cannot read %.200s: %s", path, strerror (errno));
        return -EIO;
    }
    *data_p = buf;
    *len_p = (size_t) n;
    *reply_p = json_pack ("{s:s, s:I, s:I, s:b}", "status", "ok", "size", (json_int_t) size,
                          "offset", (json_int_t) start, "eof", start + (uint64_t) n >= size);
    return 0;
}
