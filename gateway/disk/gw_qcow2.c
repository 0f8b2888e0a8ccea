/*  gw_qcow2 - an empty qcow2 disk, as qemu-img creates it. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk/gw_qcow2.h"
#include "ch_io.h"

#define S_CLUSTER_BITS 16
#define S_CLUSTER (1u << S_CLUSTER_BITS)
#define S_L1_SPAN ((uint64_t) S_CLUSTER * (S_CLUSTER / 8))  //  one L2 table's reach
#define S_HEADER_LEN 112                        //  v3 with the compression type byte
#define S_EXT_BACKING_FMT 0xE2792ACAu
#define S_EXT_FEATURES 0x6803F857u

//  The feature name table qemu 7.2 writes: type (0 incompatible,
//  1 compatible, 2 autoclear), bit, name.
static const struct { uint8_t type, bit; const char *name; } s_features [] = {
    { 0, 0, "dirty bit" }, { 0, 1, "corrupt bit" }, { 0, 2, "external data file" },
    { 0, 3, "compression type" }, { 0, 4, "extended L2 entries" },
    { 1, 0, "lazy refcounts" }, { 2, 0, "bitmaps" }, { 2, 1, "raw external data" },
};
#define S_FEATURE_LEN 48

static void
s_be32 (uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p [i] = (uint8_t) v;
}

static void
s_be64 (uint8_t *p, uint64_t v)
{
    s_be32 (p, (uint32_t) (v >> 32));
    s_be32 (p + 4, (uint32_t) v);
}

//  One header extension at p: type, length, data padded to 8; its size.
static size_t
s_ext (uint8_t *p, uint32_t type, const void *data, uint32_t len)
{
    s_be32 (p, type);
    s_be32 (p + 4, len);
    if (len)
        memcpy (p + 8, data, len);
    return 8 + ((len + 7u) & ~7u);
}

//  The extensions after the header, the backing name after them; where
//  that name starts.
static size_t
s_extensions (uint8_t *img, const char *backing, const char *fmt)
{
    size_t at = S_HEADER_LEN;
    if (fmt)
        at += s_ext (img + at, S_EXT_BACKING_FMT, fmt, (uint32_t) strlen (fmt));
    size_t n = sizeof s_features / sizeof s_features [0];
    uint8_t table [sizeof s_features / sizeof s_features [0] * S_FEATURE_LEN] = { 0 };
    for (size_t i = 0; i < n; i++) {
        table [i * S_FEATURE_LEN] = s_features [i].type;
        table [i * S_FEATURE_LEN + 1] = s_features [i].bit;
        memcpy (table + i * S_FEATURE_LEN + 2, s_features [i].name, strlen (s_features [i].name));
    }
    at += s_ext (img + at, S_EXT_FEATURES, table, sizeof table);
    at += 8;                                    //  the end marker: type 0, length 0
    if (backing)
        memcpy (img + at, backing, strlen (backing));
    return at;
}

//  Clusters: 0 header, 1 refcount table, 2 refcount block, 3.. L1 table.
static void
s_header (uint8_t *img, uint64_t size, uint64_t l1_size, const char *backing,
          const char *fmt)
{
    memcpy (img, "QFI\xfb", 4);
    s_be32 (img + 4, 3);
    size_t name_at = s_extensions (img, backing, fmt);
    if (backing) {
        s_be64 (img + 8, name_at);
        s_be32 (img + 16, (uint32_t) strlen (backing));
    }
    s_be32 (img + 20, S_CLUSTER_BITS);
    s_be64 (img + 24, size);
    s_be32 (img + 36, (uint32_t) l1_size);
    s_be64 (img + 40, 3 * (uint64_t) S_CLUSTER);
    s_be64 (img + 48, S_CLUSTER);               //  refcount table offset
    s_be32 (img + 56, 1);                       //  ... and its clusters
    s_be32 (img + 96, 4);                       //  refcount order: 16 bits
    s_be32 (img + 100, S_HEADER_LEN);
}

int
gw_qcow2_encode (uint64_t size, const char *backing, const char *backing_fmt,
                 uint8_t **image, size_t *len)
{
    assert (image && len);
    *image = NULL;
    if (size == 0 || size > GW_QCOW2_SIZE_MAX || !backing != !backing_fmt
    ||  (backing && (!*backing || strlen (backing) > GW_QCOW2_BACKING_MAX))
    ||  (backing_fmt && (!*backing_fmt || strlen (backing_fmt) > 16)))
        return -EINVAL;
    size = (size + 511) & ~(uint64_t) 511;
    uint64_t l1_size = (size + S_L1_SPAN - 1) / S_L1_SPAN;
    uint64_t l1_clusters = (l1_size * 8 + S_CLUSTER - 1) / S_CLUSTER;
    size_t total = (size_t) (3 * (uint64_t) S_CLUSTER + l1_size * 8);
    uint8_t *img = calloc (1, total);
    if (!img)
        return -ENOMEM;
    s_header (img, size, l1_size, backing, backing_fmt);
    s_be64 (img + S_CLUSTER, 2 * (uint64_t) S_CLUSTER);        //  the refcount block
    for (uint64_t c = 0; c < 3 + l1_clusters; c++)
        img [2 * S_CLUSTER + c * 2 + 1] = 1;    //  each metadata cluster in use once
    *image = img;
    *len = total;
    return 0;
}

int
gw_qcow2_create (const char *path, uint64_t size, const char *backing, const char *backing_fmt)
{
    assert (path);
    uint8_t *img = NULL;
    size_t len = 0;
    int fd = -1, rc = gw_qcow2_encode (size, backing, backing_fmt, &img, &len);
    if (rc < 0)
        goto fail;
    fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = ch_write_bytes (fd, img, len)) < 0)
        unlink (path);
fail:
    if (fd >= 0 && close (fd) < 0 && rc == 0) {
        rc = -errno;
        unlink (path);
    }
    free (img);
    return rc;
}
