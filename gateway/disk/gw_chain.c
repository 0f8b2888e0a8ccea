/*  gw_chain - a /workspace disk's layer chain as files (see gw_chain.h). */
#include "disk/gw_chain.h"
#include "base/gw_fs.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define S_NAME_MAX 1023             //  qcow2 allows 1023 bytes of backing name

static uint64_t
s_be64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p [i];
    return v;
}

int
gw_chain_backing (const char *path, char *out, size_t cap)
{
    assert (path && out && cap);
    uint8_t hdr [20];
    int rc = 0, fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    if (pread (fd, hdr, sizeof hdr, 0) != (ssize_t) sizeof hdr || memcmp (hdr, "QFI\xfb", 4)) {
        rc = -EBADMSG;
        goto done;
    }
    uint64_t off = s_be64 (hdr + 8);
    uint32_t len = (uint32_t) hdr [16] << 24 | hdr [17] << 16 | hdr [18] << 8 | hdr [19];
    out [0] = '\0';
    if (off == 0)
        goto done;
    if (len == 0 || len > S_NAME_MAX || len >= cap || off > (1u << 20)) {
        rc = -EBADMSG;
        goto done;
    }
    if (pread (fd, out, len, (off_t) off) != (ssize_t) len || memchr (out, 0, len))
        rc = -EBADMSG;
    out [rc == 0 ? len : 0] = '\0';
done:
    close (fd);
    return rc;
}

//  A layer name that stays inside its directory.
static bool
s_local_name (const char *name)
{
    return name [0] && !strchr (name, '/') && strcmp (name, ".") && strcmp (name, "..")
        && strcmp (name, GW_CHAIN_TOP);
}

//  Walk from top through names local to dir: names [0] is the top. Count
//  or -errno (err says why).
static int
s_walk (const char *dir, const char *top, char names [][NAME_MAX + 1], char *err, size_t errlen)
{
    int n = 0;
    char name [S_NAME_MAX + 1], path [PATH_MAX];
    snprintf (name, sizeof name, "%s", top);
    while (s_local_name (name)) {
        if (n == GW_CHAIN_MAX || strlen (name) > NAME_MAX) {
            snprintf (err, errlen, "disk chain in %s: too long or bad name", dir);
            return -ELOOP;
        }
        snprintf (names [n++], NAME_MAX + 1, "%s", name);
        snprintf (path, sizeof path, "%s/%s", dir, name);
        int rc = gw_chain_backing (path, name, sizeof name);
        if (rc < 0) {
            snprintf (err, errlen, "disk layer %s: %s", path,
                      rc == -EBADMSG ? "not a qcow2 image" : strerror (-rc));
            return rc;
        }
    }
    return n;
}

//  dir/name into out (PATH_MAX). 0 or -ENAMETOOLONG.
static int
s_join (char *out, const char *dir, const char *name)
{
    int n = snprintf (out, PATH_MAX, "%s/%s", dir, name);
    return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

//  Link src to dst, or copy it across filesystems.
static int
s_link (const char *src, const char *dst)
{
    if (link (src, dst) == 0)
        return 0;
    return errno == EXDEV || errno == EPERM ? gw_fs_copy (src, dst, false) : -errno;
}

int
gw_chain_write_top (const char *dir, const char *top)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/" GW_CHAIN_TOP, dir);
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    int rc = write (fd, top, strlen (top)) == (ssize_t) strlen (top) ? 0 : -EIO;
    close (fd);
    return rc;
}

int
gw_chain_export (const char *src_dir, const char *top, const char *dst_dir, char *err,
                 size_t errlen)
{
    assert (src_dir && top && dst_dir);
    static __thread char names [GW_CHAIN_MAX][NAME_MAX + 1];
    int n = s_walk (src_dir, top, names, err, errlen);
    for (int i = 0; i < n; i++) {
        char src [PATH_MAX], dst [PATH_MAX];
        int rc = s_join (src, src_dir, names [i]);
        if (rc == 0 && (rc = s_join (dst, dst_dir, names [i])) == 0)
            rc = s_link (src, dst);
        if (rc < 0) {
            snprintf (err, errlen, "keeping %s: %s", src, strerror (-rc));
            return rc;
        }
    }
    int rc = n < 0 ? n : gw_chain_write_top (dst_dir, top);
    if (rc < 0 && n >= 0)
        snprintf (err, errlen, "writing %s/top: %s", dst_dir, strerror (-rc));
    return rc;
}

int
gw_chain_top (const char *dir, char *out, size_t cap)
{
    assert (dir && out && cap);
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/" GW_CHAIN_TOP, dir);
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t n = read (fd, out, cap - 1);
    close (fd);
    out [n > 0 ? n : 0] = '\0';
    snprintf (path, sizeof path, "%s/%s", dir, out);
    return n > 0 && s_local_name (out) && access (path, R_OK) == 0 ? 0 : -EBADMSG;
}

int
gw_chain_import (const char *dir, const char *dst_dir, char *err, size_t errlen)
{
    assert (dir && dst_dir);
    static __thread char names [GW_CHAIN_MAX][NAME_MAX + 1];
    char top [NAME_MAX + 1];
    int rc = gw_chain_top (dir, top, sizeof top);
    if (rc < 0) {
        snprintf (err, errlen, "kept disk in %s: no valid top layer", dir);
        return rc;
    }
    int n = s_walk (dir, top, names, err, errlen);
    for (int i = 0; i < n; i++) {
        char src [PATH_MAX], dst [PATH_MAX];
        rc = s_join (src, dir, names [i]);
        if (rc == 0 && (rc = s_join (dst, dst_dir, names [i])) == 0)
            rc = s_link (src, dst);
        if (rc < 0) {
            snprintf (err, errlen, "adopting %s: %s", src, strerror (-rc));
            return rc;
        }
    }
    return n < 0 ? n : 0;
}
