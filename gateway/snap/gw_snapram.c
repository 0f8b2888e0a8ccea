/*  gw_snapram - a snapshot's guest RAM as a file of its own (see gw_snapram.h). */
#include "snap/gw_snapram.h"
#include "snap/gw_snapstore.h"
#include "ch_io.h"
#include "ch_util.h"

#include <assert.h>
#include <openssl/evp.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define S_RUN_MAX 256                           //  pages per pwritev: 1 MiB

//  The sink: kept bytes into the new state, pages into ram, consecutive
//  ones gathered into one write (a page per syscall cost 1.4 s per 400 MB).
typedef struct {
    int state_fd, ram_fd;
    struct iovec run [S_RUN_MAX];
    int run_n;
    uint64_t run_off;
    uint8_t *written;                           //  a bit per page: holds data
} s_sink_t;

static int
s_keep (void *ctx, const uint8_t *data, size_t len)
{
    return ch_write_bytes (((s_sink_t *) ctx)->state_fd, data, len);
}

static int
s_flush (s_sink_t *k)
{
    uint64_t off = k->run_off;
    for (int i = 0; i < k->run_n; ) {
        ssize_t n = pwritev (k->ram_fd, k->run + i, k->run_n - i, (off_t) off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        for (size_t left = (size_t) n; left; ) {   //  a short write: on from where it stopped
            size_t take = left < k->run [i].iov_len ? left : k->run [i].iov_len;
            k->run [i].iov_base = (uint8_t *) k->run [i].iov_base + take;
            k->run [i].iov_len -= take;
            left -= take;
            off += take;
            if (k->run [i].iov_len == 0)
                i++;
        }
    }
    k->run_n = 0;
    return 0;
}

static int
s_page (void *ctx, uint64_t offset, const uint8_t *data)
{
    s_sink_t *k = ctx;
    uint64_t page = offset / GW_MIGSPLIT_PAGE;
    bool follows = k->run_n && offset == k->run_off + (uint64_t) k->run_n * GW_MIGSPLIT_PAGE;
    int rc = 0;
    if (k->run_n && (!data || !follows || k->run_n == S_RUN_MAX))
        rc = s_flush (k);
    if (rc == 0 && !data && (k->written [page / 8] >> (page % 8) & 1)
    &&  fallocate (k->ram_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) offset,
                   GW_MIGSPLIT_PAGE) < 0)
        rc = -errno;                            //  a page that was data is zero now
    if (rc < 0 || !data) {
        k->written [page / 8] &= (uint8_t) ~(1u << (page % 8));
        return rc;
    }
    if (k->run_n == 0)
        k->run_off = offset;
    k->run [k->run_n++] = (struct iovec) { (void *) data, GW_MIGSPLIT_PAGE };
    k->written [page / 8] |= (uint8_t) (1u << (page % 8));
    return 0;
}

//  The stream mapped, split into the open files.
static int
s_split_fd (int in, s_sink_t *k, uint64_t mem_bytes, gw_migsplit_stats_t *stats, char *err,
            size_t errlen)
{
    struct stat st;
    if (fstat (in, &st) < 0) {
        snprintf (err, errlen, "the saved state cannot be read back: %s", strerror (errno));
        return -EIO;
    }
    if (st.st_size <= 0) {
        snprintf (err, errlen, "the saved state is empty");
        return -EIO;
    }
    uint8_t *map = mmap (NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, in, 0);
    if (map == MAP_FAILED) {
        snprintf (err, errlen, "the saved state cannot be mapped: %s", strerror (errno));
        return -EIO;
    }
    madvise (map, (size_t) st.st_size, MADV_SEQUENTIAL);
    gw_migsplit_sink_t sink = { .keep = s_keep, .page = s_page, .ctx = k };
    int rc = gw_migsplit_run (map, (size_t) st.st_size, GW_SNAPRAM_BLOCK, mem_bytes, &sink,
                              stats, err, errlen);
    if (rc == 0)
        rc = s_flush (k);
    if (rc < 0 && rc != -EPROTO && !*err)
        snprintf (err, errlen, "writing the snapshot's RAM file: %s", strerror (-rc));
    munmap (map, (size_t) st.st_size);
    return rc;
}

//  The new state and the RAM file, only once the stream is there. The RAM
//  is 0644 in a 0700 store: what a jail would chmod it to (gw_jail), so no
//  resume changes its ctime, which its stamp records.
static void
s_open_outputs (int in, s_sink_t *k, const char *tmp, const char *ram)
{
    if (in >= 0)
        k->state_fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (k->state_fd >= 0)
        k->ram_fd = open (ram, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
}

int
gw_snapram_split (const char *dir, uint64_t mem_bytes, char hex [65],
                  gw_migsplit_stats_t *stats, char *err, size_t errlen)
{
    assert (dir && hex && err && errlen);
    char state [PATH_MAX], ram [PATH_MAX], tmp [PATH_MAX];
    snprintf (state, sizeof state, "%s/" GW_SNAP_STATE, dir);
    snprintf (ram, sizeof ram, "%s/" GW_SNAP_RAM, dir);
    snprintf (tmp, sizeof tmp, "%s/" GW_SNAP_STATE ".devices", dir);
    err [0] = '\0';
    s_sink_t k = { .state_fd = -1, .ram_fd = -1 };
    int in = open (state, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = 0;
    s_open_outputs (in, &k, tmp, ram);
    k.written = calloc (1, (size_t) (mem_bytes / GW_MIGSPLIT_PAGE / 8 + 1));
    if (!k.written)
        abort ();
    if (in < 0 || k.state_fd < 0 || k.ram_fd < 0 || ftruncate (k.ram_fd, (off_t) mem_bytes) < 0) {
        rc = -errno;
        snprintf (err, errlen, "splitting the snapshot's RAM out: %s", strerror (errno));
        goto fail;
    }
    if ((rc = s_split_fd (in, &k, mem_bytes, stats, err, errlen)) < 0)
        goto fail;
    if ((rc = gw_snapram_digest (ram, O_NOFOLLOW, hex)) < 0 || rename (tmp, state) < 0) {
        rc = rc < 0 ? rc : -errno;
        snprintf (err, errlen, "splitting the snapshot's RAM out: %s", strerror (-rc));
        goto fail;
    }
fail:
    if (in >= 0)
        close (in);
    if (k.state_fd >= 0)
        close (k.state_fd);
    if (k.ram_fd >= 0)
        close (k.ram_fd);
    free (k.written);
    if (rc < 0 && k.state_fd >= 0) {            //  what this call made, and only that
        unlink (tmp);
        unlink (ram);
    }
    return rc;
}

#define S_CHUNK (64u << 10)

static bool
s_all_zero (const uint8_t *p, size_t n)
{
    return n == 0 || (p [0] == 0 && memcmp (p, p + 1, n - 1) == 0);
}

//  The chunks of [from, to) into md, the zero ones left out.
static int
s_digest_run (int fd, EVP_MD_CTX *md, uint8_t *buf, off_t from, off_t to)
{
    for (off_t off = from; off < to; off += S_CHUNK) {
        ssize_t n = pread (fd, buf, S_CHUNK, off);
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        if (s_all_zero (buf, (size_t) n))
            continue;
        uint8_t be [8];
        for (int i = 0; i < 8; i++)
            be [i] = (uint8_t) ((uint64_t) off >> (56 - 8 * i));
        EVP_DigestUpdate (md, be, sizeof be);
        EVP_DigestUpdate (md, buf, (size_t) n);
    }
    return 0;
}

int
gw_snapram_digest (const char *path, int extra_flags, char hex [65])
{
    assert (path && hex);
    int fd = open (path, O_RDONLY | O_CLOEXEC | extra_flags), rc = 0;
    if (fd < 0)
        return -errno;
    uint8_t *buf = malloc (S_CHUNK);
    EVP_MD_CTX *md = EVP_MD_CTX_new ();
    if (!buf || !md)
        abort ();
    EVP_DigestInit_ex (md, EVP_sha256 (), NULL);
    off_t done = 0, data;
    while (rc == 0 && (data = lseek (fd, done, SEEK_DATA)) >= 0) {
        off_t hole = lseek (fd, data, SEEK_HOLE);
        off_t from = data / S_CHUNK * S_CHUNK;
        off_t to = hole < 0 ? data + S_CHUNK : (hole + S_CHUNK - 1) / S_CHUNK * S_CHUNK;
        rc = s_digest_run (fd, md, buf, from < done ? done : from, to);
        done = to;
    }
    if (rc == 0 && errno != ENXIO)
        rc = -errno;
    unsigned char out [32];
    EVP_DigestFinal_ex (md, out, NULL);
    ch_hex32 (out, hex);
    EVP_MD_CTX_free (md);
    free (buf);
    close (fd);
    return rc;
}
