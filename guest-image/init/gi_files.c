/*  gi_files - put/get under /workspace, symlink-proof. */
#include "gi_files.h"
#include "gi_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS \
                   | RESOLVE_NO_XDEV)

void
gi_sha256_hex (const uint8_t *data, size_t len, char out [65])
{
    unsigned char md [EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest (data, len, md, &mdlen, EVP_sha256 (), NULL);
    for (unsigned i = 0; i < mdlen && i < 32; i++)
        snprintf (out + 2 * i, 3, "%02x", md [i]);
    out [64] = 0;
}

//  The part of path below /workspace ("" for /workspace itself), or NULL
//  when it is absolute elsewhere, empty, or holds a NUL-free oddity.
static const char *
s_relative (const char *path)
{
    size_t n = strlen (GI_WORKSPACE);
    if (!path || !path [0])
        return NULL;
    if (path [0] != '/')
        return path;
    if (strncmp (path, GI_WORKSPACE, n) != 0 || (path [n] != '/' && path [n] != 0))
        return NULL;
    while (path [n] == '/')
        n++;
    return path + n;
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
s_root (void)
{
    int fd = open (GI_WORKSPACE, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

//  Open (creating as needed) the directory holding the last component of
//  rel; *leaf_p points at that component. Returns the dir fd or -errno.
static int
s_open_parent (int root, char *rel, char **leaf_p)
{
    int dir = dup (root);
    if (dir < 0)
        return -errno;
    char *part = rel, *slash;
    while ((slash = strchr (part, '/'))) {
        *slash = 0;
        if (part [0]) {
            //  A directory we create belongs to the kernel user, like the file.
            if (mkdirat (dir, part, 0755) == 0)
                fchownat (dir, part, GI_KERNEL_UID, GI_KERNEL_GID, AT_SYMLINK_NOFOLLOW);
            int next = s_openat2 (dir, part, O_PATH | O_DIRECTORY, 0);
            struct stat st;
            //  O_NOFOLLOW | O_DIRECTORY on a symlink says ENOTDIR: name it.
            if (next == -ENOTDIR && fstatat (dir, part, &st, AT_SYMLINK_NOFOLLOW) == 0
            &&  S_ISLNK (st.st_mode))
                next = -ELOOP;
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

static int
s_write_all (int fd, const uint8_t *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write (fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        data += n;
        len -= (size_t) n;
    }
    return 0;
}

int
gi_files_put (const char *path, const uint8_t *data, size_t len, int append,
              unsigned mode, gi_file_info_t *info)
{
    const char *rel0 = s_relative (path);
    char rel [4096], *leaf = NULL;
    if (!rel0 || !rel0 [0] || strlen (rel0) >= sizeof rel)
        return rel0 && rel0 [0] ? -ENAMETOOLONG : -EXDEV;
    snprintf (rel, sizeof rel, "%s", rel0);
    int root = s_root (), dir = -1, fd = -1, rc;
    if (root < 0)
        return root;
    if ((rc = dir = s_open_parent (root, rel, &leaf)) < 0)
        goto fail;
    rc = -EISDIR;
    if (!leaf [0] || strcmp (leaf, ".") == 0 || strcmp (leaf, "..") == 0)
        goto fail;
    int flags = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC);
    if ((rc = fd = s_openat2 (dir, leaf, flags, mode ? mode & 0777 : 0644)) < 0)
        goto fail;
    struct stat st;
    rc = fstat (fd, &st) < 0 ? -errno : !S_ISREG (st.st_mode) ? -EINVAL : 0;
    if (rc == 0 && (uint64_t) st.st_size + len > GI_FILE_MAX)
        rc = -EFBIG;
    if (rc == 0 && st.st_uid == 0 && fchown (fd, GI_KERNEL_UID, GI_KERNEL_GID) < 0)
        rc = -errno;
    if (rc == 0)
        rc = s_write_all (fd, data, len);
    if (rc == 0 && fstat (fd, &st) < 0)
        rc = -errno;
    if (rc < 0)
        goto fail;
    info->size = (uint64_t) st.st_size;
    gi_sha256_hex (data, len, info->sha256);
    snprintf (info->path, sizeof info->path, "%s/%s", GI_WORKSPACE, rel0);
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

int
gi_files_get (const char *path, uint64_t offset, size_t length,
              uint8_t **data_p, gi_file_info_t *info)
{
    const char *rel = s_relative (path);
    *data_p = NULL;
    if (!rel || !rel [0])
        return -EXDEV;
    int root = s_root (), fd = -1, rc;
    if (root < 0)
        return root;
    uint8_t *buf = NULL;
    struct stat st;
    if ((rc = fd = s_openat2 (root, rel, O_RDONLY | O_NONBLOCK, 0)) < 0)
        goto fail;
    rc = fstat (fd, &st) < 0 ? -errno : !S_ISREG (st.st_mode) ? -EINVAL : 0;
    if (rc < 0)
        goto fail;
    uint64_t size = (uint64_t) st.st_size;
    uint64_t start = offset < size ? offset : size;
    size_t want = length < GI_CHUNK_MAX ? length : GI_CHUNK_MAX;
    if (want > size - start)
        want = (size_t) (size - start);
    size_t got = 0;
    if (want && !(buf = malloc (want)))
        rc = -ENOMEM;
    if (rc == 0 && want)
        rc = s_read_at (fd, buf, want, start, &got);
    if (rc < 0)
        goto fail;
    *info = (gi_file_info_t) { .size = size, .offset = start, .length = got,
                               .eof = start + got >= size };
    gi_sha256_hex (buf ? buf : (const uint8_t *) "", got, info->sha256);
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
