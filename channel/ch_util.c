/*  ch_util - small helpers the kernel, the gateway and init all need. */
#include "ch_util.h"

#include <assert.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void
ch_hex32 (const unsigned char md [32], char hex [65])
{
    static const char digits [] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex [2 * i] = digits [md [i] >> 4];
        hex [2 * i + 1] = digits [md [i] & 15];
    }
    hex [64] = 0;
}

void
ch_sha256_hex (const uint8_t *data, size_t len, char hex [65])
{
    unsigned char md [32];
    unsigned int n = 0;
    EVP_Digest (data, len, md, &n, EVP_sha256 (), NULL);
    ch_hex32 (md, hex);
}

//  Hex SHA-256 of everything readable from fd (read to its end); *size_p
//  gets the byte count when not NULL. 0, or -EIO on a read error.
static int
s_sha256_fd (int fd, char hex [65], off_t *size_p)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new ();
    if (!ctx)
        abort ();
    EVP_DigestInit_ex (ctx, EVP_sha256 (), NULL);
    unsigned char buf [65536], md [32];
    ssize_t n;
    off_t total = 0;
    while ((n = read (fd, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        EVP_DigestUpdate (ctx, buf, (size_t) n);
        total += n;
    }
    EVP_DigestFinal_ex (ctx, md, NULL);
    EVP_MD_CTX_free (ctx);
    ch_hex32 (md, hex);
    if (size_p)
        *size_p = total;
    return n < 0 ? -EIO : 0;
}

int
ch_sha256_file (const char *path, int extra_flags, char hex [65], off_t *size_p)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC | extra_flags);
    if (fd < 0)
        return -errno;
    int rc = s_sha256_fd (fd, hex, size_p);
    close (fd);
    return rc;
}

int
ch_mkdir_p (const char *path, mode_t mode)
{
    char tmp [4096];
    if (!path || !*path || snprintf (tmp, sizeof tmp, "%s", path) >= (int) sizeof tmp)
        return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir (tmp, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir (tmp, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

ssize_t
ch_read_small (const char *path, char *buf, size_t cap)
{
    assert (path && buf && cap);
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t n;
    do
        n = read (fd, buf, cap - 1);
    while (n < 0 && errno == EINTR);
    int e = errno;
    close (fd);
    if (n < 0)
        return -e;
    buf [n] = 0;
    return n;
}
