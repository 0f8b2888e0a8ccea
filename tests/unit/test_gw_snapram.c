/*  test_gw_snapram - a snapshot directory's QEMU 7.2 stream (built byte by
    byte with tu_migstream, as test_gw_migsplit's are) split in place:
    dir/ram holds every page of "mem" as the stream's last record of it
    said (data, or zero), sparse, with the SHA-256 given back; dir/state
    becomes the stream without those records (built that way too, never by
    the codec); a stream that is refused, or missing, leaves the directory
    as it was.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "snap/gw_snapram.h"
#include "tu.h"
#include "tu_migstream.h"

#define PG GW_MIGSPLIT_PAGE
#define BIOS_BYTES (2 * (uint64_t) PG)
#define ZERO_TAG UINT32_MAX                     //  in a model of ram: the page reads as zeros

typedef tu_migstream_buf_t buf_t;
typedef tu_migstream_rec_t rec_t;

typedef struct {
    char dir [TU_DIR_MAX];                      //  tu_fixture_new's scratch dir
    char state [TU_DIR_MAX + 16], ram [TU_DIR_MAX + 16], devices [TU_DIR_MAX + 32];
    char err [512];
} fx_t;

static int
s_setup (void **state)
{
    fx_t *fx = tu_fixture_new (sizeof *fx, "test_gw_snapram");
    tu_path (fx->state, sizeof fx->state, fx->dir, "state");
    tu_path (fx->ram, sizeof fx->ram, fx->dir, "ram");
    tu_path (fx->devices, sizeof fx->devices, fx->dir, "state.devices");
    *state = fx;
    return 0;
}

//  A whole stream (tu_migstream_stream) of "mem" (mem_bytes) and
//  "pc.bios". With drop, the records of "mem" are left out, as the split
//  must leave them out.
static void
s_stream (buf_t *b, uint64_t mem_bytes, const rec_t *recs, size_t n, bool drop)
{
    const tu_migstream_block_t blocks [] = { { "mem", mem_bytes }, { "pc.bios", BIOS_BYTES } };
    tu_migstream_stream (b, blocks, 2, recs, n, drop ? "mem" : NULL);
}

//  path's bytes, all of them.
static buf_t
s_slurp (const char *path)
{
    buf_t b = { 0 };
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail_msg ("cannot read %s: %s", path, strerror (errno));
    uint8_t chunk [65536];
    ssize_t n;
    while ((n = read (fd, chunk, sizeof chunk)) > 0)
        tu_migstream_put (&b, chunk, (size_t) n);
    assert_int_equal (n, 0);
    close (fd);
    return b;
}

static void
s_write_state (const fx_t *fx, const buf_t *b)
{
    int fd = open (fx->state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true (fd >= 0);
    assert_int_equal (write (fd, b->data, b->len), (ssize_t) b->len);
    assert_int_equal (close (fd), 0);
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

//  Entries of dir, but . and ..
static int
s_entries (const char *dir)
{
    DIR *d = opendir (dir);
    assert_non_null (d);
    int n = 0;
    for (struct dirent *de; (de = readdir (d)); )
        n += strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0;
    closedir (d);
    return n;
}

//  The RAM digest of data, computed here from its bytes (gw_snapram.h):
//  SHA-256 over each 64 KiB chunk that is not all zero, after its offset.
static void
s_sha256_hex (const buf_t *b, char hex [65])
{
    static const uint8_t zeros [64 << 10];
    EVP_MD_CTX *md = EVP_MD_CTX_new ();
    assert_non_null (md);
    assert_int_equal (EVP_DigestInit_ex (md, EVP_sha256 (), NULL), 1);
    for (size_t off = 0; off < b->len; off += sizeof zeros) {
        size_t n = b->len - off < sizeof zeros ? b->len - off : sizeof zeros;
        if (memcmp (b->data + off, zeros, n) == 0)
            continue;
        uint8_t be [8];
        for (int i = 0; i < 8; i++)
            be [i] = (uint8_t) ((uint64_t) off >> (56 - 8 * i));
        EVP_DigestUpdate (md, be, 8);
        EVP_DigestUpdate (md, b->data + off, n);
    }
    unsigned char out [32];
    unsigned int outlen = 0;
    assert_int_equal (EVP_DigestFinal_ex (md, out, &outlen), 1);
    EVP_MD_CTX_free (md);
    assert_int_equal (outlen, 32);
    for (int i = 0; i < 32; i++)
        snprintf (hex + 2 * i, 3, "%02x", out [i]);
}

//  What the records leave in each page of "mem": the last one's tag, or ZERO_TAG.
static uint32_t *
s_model (const rec_t *recs, size_t n, size_t pages)
{
    uint32_t *want = malloc (pages * sizeof *want);
    assert_non_null (want);
    for (size_t p = 0; p < pages; p++)
        want [p] = ZERO_TAG;
    for (size_t i = 0; i < n; i++)
        if (recs [i].block && strcmp (recs [i].block, "mem") == 0) {
            assert_true (recs [i].page < pages);
            want [recs [i].page] = recs [i].zero ? ZERO_TAG : recs [i].tag;
        }
    return want;
}

//  dir/ram is pages long and each page reads as want says; hex is its
//  SHA-256, computed here. Its st_blocks into *blocks_p.
static void
s_assert_ram (const fx_t *fx, const uint32_t *want, size_t pages, const char *hex,
              blkcnt_t *blocks_p)
{
    struct stat st;
    assert_int_equal (lstat (fx->ram, &st), 0);
    assert_true (S_ISREG (st.st_mode));
    assert_int_equal (st.st_size, (off_t) (pages * PG));
    buf_t ram = s_slurp (fx->ram);
    assert_int_equal (ram.len, pages * PG);
    static const uint8_t zeros [PG];
    uint8_t page [PG];
    for (size_t p = 0; p < pages; p++) {
        if (want [p] != ZERO_TAG)
            tu_migstream_page_data (page, want [p]);
        if (memcmp (ram.data + p * PG, want [p] == ZERO_TAG ? zeros : page, PG) != 0)
            fail_msg ("ram page %zu is not %s", p, want [p] == ZERO_TAG ? "zeros" : "its last data");
    }
    char mine [65];
    s_sha256_hex (&ram, mine);
    assert_int_equal (strlen (hex), 64);
    assert_string_equal (hex, mine);
    tu_migstream_free (&ram);
    *blocks_p = st.st_blocks;
}

//  dir/state is want, byte for byte, and no dir/state.devices is left.
static void
s_assert_state (const fx_t *fx, const buf_t *want)
{
    buf_t got = s_slurp (fx->state);
    assert_int_equal (got.len, want->len);
    assert_memory_equal (got.data, want->data, want->len);
    tu_migstream_free (&got);
    assert_false (s_exists (fx->devices));
}

//  The records split from dir/state into mem_bytes of ram: 0, ram and state
//  as above, the stats counting the records of "mem". st_blocks of ram.
static blkcnt_t
s_split_ok (fx_t *fx, const rec_t *recs, size_t n, uint64_t mem_bytes)
{
    buf_t stream = { 0 }, want = { 0 };
    s_stream (&stream, mem_bytes, recs, n, false);
    s_stream (&want, mem_bytes, recs, n, true);
    s_write_state (fx, &stream);
    char hex [65];
    memset (hex, 'x', sizeof hex);
    gw_migsplit_stats_t stats;
    memset (&stats, 0xa5, sizeof stats);
    int rc = gw_snapram_split (fx->dir, mem_bytes, hex, &stats, fx->err, sizeof fx->err);
    if (rc != 0)
        fail_msg ("split: rc %d, %s", rc, fx->err);
    uint64_t pages = 0, zero_pages = 0;
    for (size_t i = 0; i < n; i++)
        if (recs [i].block && strcmp (recs [i].block, "mem") == 0)
            *(recs [i].zero ? &zero_pages : &pages) += 1;
    assert_int_equal (stats.pages, pages);
    assert_int_equal (stats.zero_pages, zero_pages);
    assert_int_equal (stats.kept_bytes, want.len);
    assert_int_equal (stats.block_bytes, mem_bytes);
    uint32_t *model = s_model (recs, n, mem_bytes / PG);
    blkcnt_t blocks = 0;
    s_assert_ram (fx, model, mem_bytes / PG, hex, &blocks);
    s_assert_state (fx, &want);
    assert_int_equal (s_entries (fx->dir), 2);
    free (model);
    tu_migstream_free (&stream);
    tu_migstream_free (&want);
    return blocks;
}

//  "mem" of 64 pages and "pc.bios" interleaved: runs with gaps, the last
//  page, resends (data again, zero after data, data after zero), a zero
//  record for a page never written.
static const rec_t s_mixed [] = {
    { "mem", 0, false, false, 1, 0 }, { "mem", 1, false, true, 2, 0 },
    { "mem", 2, false, true, 3, 0 },  { "mem", 3, false, true, 4, 0 },
    { "mem", 4, false, true, 5, 0 },  { "mem", 5, false, true, 6, 0 },
    { "mem", 6, false, true, 7, 0 },  { "mem", 7, false, true, 8, 0 },
    { "mem", 8, false, true, 9, 0 },  { "mem", 9, false, true, 10, 0 },
    { "pc.bios", 0, false, false, 50, 0 }, { "pc.bios", 1, true, true, 0, 0 },
    { "mem", 20, false, false, 20, 0 }, { "mem", 21, false, true, 21, 0 },
    { "mem", 22, false, true, 22, 0 },  { "mem", 23, false, true, 23, 0 },
    { "mem", 40, false, true, 40, 0 },  { "mem", 63, false, true, 63, 0 },
    { NULL, 0, false, false, 0, 0 },
    { "mem", 5, true, false, 0, 0 },    { "mem", 21, false, true, 121, 0 },
    { "mem", 30, true, true, 0, 0 },    { "pc.bios", 1, false, false, 51, 0 },
    { "mem", 8, true, false, 0, 0 },
    { NULL, 0, false, false, 0, 0 },
    { "mem", 8, false, true, 88, 0 },   { "mem", 9, true, true, 0, 0 },
    { "mem", 62, false, true, 62, 0 },
};
#define MIXED_N (sizeof s_mixed / sizeof s_mixed [0])
#define MIXED_PAGES 64

static void
test_the_mem_pages_go_to_a_sparse_ram_file (void **state)
{
    fx_t *fx = *state;
    blkcnt_t blocks = s_split_ok (fx, s_mixed, MIXED_N, MIXED_PAGES * (uint64_t) PG);
    //  15 pages hold data in the end: the rest are holes.
    assert_true ((uint64_t) blocks * 512 < MIXED_PAGES * (uint64_t) PG);
    //  Pages that held data and were zeroed later are holes again, not zeros written.
    int fd = open (fx->ram, O_RDONLY | O_CLOEXEC);
    assert_true (fd >= 0);
    assert_int_equal (lseek (fd, 5 * (off_t) PG, SEEK_HOLE), 5 * (off_t) PG);
    assert_int_equal (lseek (fd, 9 * (off_t) PG, SEEK_HOLE), 9 * (off_t) PG);
    close (fd);
    //  The counts the helper took from the records, by hand.
    gw_migsplit_stats_t stats;
    char hex [65];
    buf_t stream = { 0 };
    s_stream (&stream, MIXED_PAGES * (uint64_t) PG, s_mixed, MIXED_N, false);
    s_write_state (fx, &stream);
    assert_int_equal (gw_snapram_split (fx->dir, MIXED_PAGES * (uint64_t) PG, hex, &stats,
                                        fx->err, sizeof fx->err), 0);
    assert_int_equal (stats.pages, 19);
    assert_int_equal (stats.zero_pages, 4);
    tu_migstream_free (&stream);
}

//  Only page 0 of "mem" sent, and a zero for its last: ram is still all of
//  mem_bytes long, the pages never sent read as zeros.
static void
test_the_ram_file_is_as_long_as_mem_with_its_tail_unsent (void **state)
{
    const rec_t recs [] = { { "mem", 0, false, false, 1, 0 },
                            { "mem", MIXED_PAGES - 1, true, true, 0, 0 } };
    blkcnt_t blocks = s_split_ok (*state, recs, 2, MIXED_PAGES * (uint64_t) PG);
    assert_true ((uint64_t) blocks * 512 < MIXED_PAGES * (uint64_t) PG);
}

//  A stream the codec refuses, at mem_bytes: -EPROTO with words, and the
//  directory as it was (state the same bytes, no ram, no state.devices).
static void
s_refused (fx_t *fx, const buf_t *stream, uint64_t mem_bytes)
{
    s_write_state (fx, stream);
    char hex [65];
    gw_migsplit_stats_t stats;
    fx->err [0] = '\0';
    assert_int_equal (gw_snapram_split (fx->dir, mem_bytes, hex, &stats, fx->err,
                                        sizeof fx->err), -EPROTO);
    assert_true (fx->err [0] != '\0');
    s_assert_state (fx, stream);
    assert_false (s_exists (fx->ram));
    assert_int_equal (s_entries (fx->dir), 1);
}

static void
test_a_refused_stream_leaves_the_directory_as_it_was (void **state)
{
    fx_t *fx = *state;
    //  Refused late: pages 0..4 and 10 have gone to ram (a gap flushes a
    //  run) before a zero page filled with 0x7f.
    const rec_t late [] = {
        { "mem", 0, false, false, 1, 0 }, { "mem", 1, false, true, 2, 0 },
        { "mem", 2, false, true, 3, 0 },  { "mem", 3, false, true, 4, 0 },
        { "mem", 4, false, true, 5, 0 },  { "mem", 10, false, true, 11, 0 },
        { NULL, 0, false, false, 0, 0 },
        { "mem", 12, false, true, 13, 0 }, { "mem", 3, true, true, 0, 0x7f },
    };
    buf_t stream = { 0 };
    s_stream (&stream, MIXED_PAGES * (uint64_t) PG, late, sizeof late / sizeof late [0], false);
    s_refused (fx, &stream, MIXED_PAGES * (uint64_t) PG);
    tu_migstream_free (&stream);
    //  A good stream whose "mem" is not as long as the caller says.
    s_stream (&stream, MIXED_PAGES * (uint64_t) PG, s_mixed, MIXED_N, false);
    s_refused (fx, &stream, 2 * MIXED_PAGES * (uint64_t) PG);
    //  Not a migration stream at all.
    stream.data [0] ^= 0xff;
    s_refused (fx, &stream, MIXED_PAGES * (uint64_t) PG);
    tu_migstream_free (&stream);
}

static void
test_a_missing_state_is_an_error_that_leaves_nothing (void **state)
{
    fx_t *fx = *state;
    char hex [65];
    gw_migsplit_stats_t stats;
    fx->err [0] = '\0';
    int rc = gw_snapram_split (fx->dir, MIXED_PAGES * (uint64_t) PG, hex, &stats, fx->err,
                               sizeof fx->err);
    assert_int_equal (rc, -ENOENT);
    assert_true (fx->err [0] != '\0');
    assert_int_equal (s_entries (fx->dir), 0);
    //  Nor is a directory that is not there made.
    char gone [TU_DIR_MAX + 16];
    tu_path (gone, sizeof gone, fx->dir, "gone");
    fx->err [0] = '\0';
    assert_true (gw_snapram_split (gone, PG, hex, &stats, fx->err, sizeof fx->err) < 0);
    assert_true (fx->err [0] != '\0');
    assert_false (s_exists (gone));
}

static void
test_an_empty_state_is_an_error_that_leaves_it_as_it_was (void **state)
{
    fx_t *fx = *state;
    buf_t empty = { 0 };
    s_write_state (fx, &empty);
    char hex [65];
    gw_migsplit_stats_t stats;
    fx->err [0] = '\0';
    assert_true (gw_snapram_split (fx->dir, PG, hex, &stats, fx->err, sizeof fx->err) < 0);
    assert_true (fx->err [0] != '\0');
    s_assert_state (fx, &empty);
    assert_int_equal (s_entries (fx->dir), 1);
}

//  A run of 600 consecutive pages from page 3 (the writer gathers 256 to a
//  write: 3..258, 259..514, then 515..602 still gathered when page 550,
//  inside it, is zeroed), a zero for a page already written out (300),
//  data again after the zero, and the block's last page.
#define RUN_PAGES 700
#define RUN_FROM 3
#define RUN_LEN 600

static void
test_a_run_longer_than_a_write_reads_back_right (void **state)
{
    fx_t *fx = *state;
    size_t n = 0, cap = RUN_LEN + 16;
    rec_t *recs = calloc (cap, sizeof *recs);
    assert_non_null (recs);
    recs [n++] = (rec_t) { "pc.bios", 0, false, false, 7, 0 };
    for (uint64_t p = RUN_FROM; p < RUN_FROM + RUN_LEN; p++)
        recs [n++] = (rec_t) { "mem", p, false, p != RUN_FROM, (uint32_t) (1000 + p), 0 };
    recs [n++] = (rec_t) { "mem", 550, true, true, 0, 0 };
    recs [n++] = (rec_t) { "mem", 300, true, true, 0, 0 };
    recs [n++] = (rec_t) { "mem", 551, false, true, 5551, 0 };
    recs [n++] = (rec_t) { "mem", 552, false, true, 5552, 0 };
    recs [n++] = (rec_t) { NULL, 0, false, false, 0, 0 };
    recs [n++] = (rec_t) { "mem", RUN_PAGES - 1, false, true, 9999, 0 };
    recs [n++] = (rec_t) { "pc.bios", 1, false, false, 8, 0 };
    assert_true (n <= cap);
    s_split_ok (fx, recs, n, RUN_PAGES * (uint64_t) PG);
    free (recs);
}

//  The digest is of the content: a sparse file and a dense copy agree, and
//  one changed byte, even in a chunk that was zero, gives another.
static void
test_the_ram_digest_is_of_the_content_not_the_layout (void **state)
{
    fx_t *fx = *state;
    char sparse [PATH_MAX + 16], dense [PATH_MAX + 16], a [65], b [65], c [65];
    snprintf (sparse, sizeof sparse, "%s/sparse", fx->dir);
    snprintf (dense, sizeof dense, "%s/dense", fx->dir);
    int s1 = open (sparse, O_RDWR | O_CREAT | O_TRUNC, 0600);
    int s2 = open (dense, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true (s1 >= 0 && s2 >= 0);
    static uint8_t image [4 << 20];
    memset (image, 0, sizeof image);
    memset (image + (1 << 20) + 5, 0x42, 3000);     //  data amid zeros, mid-chunk
    image [sizeof image - 1] = 7;
    assert_int_equal (ftruncate (s1, sizeof image), 0);
    assert_int_equal (pwrite (s1, image + (1 << 20), 8192, 1 << 20), 8192);
    assert_int_equal (pwrite (s1, image + sizeof image - 4096, 4096, sizeof image - 4096), 4096);
    assert_int_equal (write (s2, image, sizeof image), (ssize_t) sizeof image);
    assert_int_equal (gw_snapram_digest (sparse, 0, a), 0);
    assert_int_equal (gw_snapram_digest (dense, 0, b), 0);
    assert_string_equal (a, b);
    buf_t whole = { .data = image, .len = sizeof image };
    s_sha256_hex (&whole, c);
    assert_string_equal (a, c);
    assert_int_equal (pwrite (s1, "\x01", 1, 3 << 20), 1);   //  a zero chunk is not now
    assert_int_equal (gw_snapram_digest (sparse, 0, c), 0);
    assert_string_not_equal (a, c);
    close (s1);
    close (s2);
    unlink (sparse);
    unlink (dense);
}

int
main (void)
{
#define T(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        T (test_the_ram_digest_is_of_the_content_not_the_layout),
        T (test_the_mem_pages_go_to_a_sparse_ram_file),
        T (test_the_ram_file_is_as_long_as_mem_with_its_tail_unsent),
        T (test_a_refused_stream_leaves_the_directory_as_it_was),
        T (test_a_missing_state_is_an_error_that_leaves_nothing),
        T (test_an_empty_state_is_an_error_that_leaves_it_as_it_was),
        T (test_a_run_longer_than_a_write_reads_back_right),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
