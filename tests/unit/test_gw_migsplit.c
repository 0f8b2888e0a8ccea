/*  test_gw_migsplit - QEMU 7.2 migration streams built byte by byte
    (tu_migstream), split into one RAM block's pages and the stream that
    stays: which pages come out, where and in what order; that what stays
    is the same stream without them (built that way too, never by the
    codec); every way a stream is refused; and that a sink's error stops
    the run as it was returned.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snap/gw_migsplit.h"
#include "tu_migstream.h"

#define PG GW_MIGSPLIT_PAGE
#define RAM_ID TU_MIGSTREAM_RAM_ID
#define F_ZERO TU_MIGSTREAM_F_ZERO
#define F_MEM_SIZE TU_MIGSTREAM_F_MEM_SIZE
#define F_PAGE TU_MIGSTREAM_F_PAGE
#define MEM_BYTES (4 * (uint64_t) PG)
#define BIOS_BYTES (2 * (uint64_t) PG)
#define GOT_MAX 32

typedef tu_migstream_buf_t buf_t;
typedef tu_migstream_rec_t rec_t;
typedef tu_migstream_block_t block_t;

static const block_t s_blocks [] = { { "mem", MEM_BYTES }, { "pc.bios", BIOS_BYTES } };

//  A whole stream: START with s_blocks, the records in PART sections (each
//  NULL block starts the next), the last group in END, then the tail.
//  Records of drop are left out, as the split must leave them out.
static void
s_stream (buf_t *b, const rec_t *recs, size_t n, const char *drop)
{
    tu_migstream_stream (b, s_blocks, 2, recs, n, drop);
}

//  What the sinks saw.
typedef struct {
    uint64_t offset;
    bool zero;
    uint8_t data [PG];
} got_t;

typedef struct {
    buf_t kept;
    got_t got [GOT_MAX];
    size_t ngot;
    uint64_t block_bytes;
    int keeps, pages;
    int keep_fail_at, page_fail_at;             //  that call (from 1) fails
    bool failed;                                //  a sink returned its error
} sink_ctx_t;

static int
s_keep (void *ctx, const uint8_t *data, size_t len)
{
    sink_ctx_t *c = ctx;
    assert_false (c->failed);                   //  the run stopped at the error
    if (++c->keeps == c->keep_fail_at) {
        c->failed = true;
        return -ENOSPC;
    }
    tu_migstream_put (&c->kept, data, len);
    return 0;
}

static int
s_page (void *ctx, uint64_t offset, const uint8_t *data)
{
    sink_ctx_t *c = ctx;
    assert_false (c->failed);
    assert_int_equal (offset % PG, 0);
    assert_true (offset < c->block_bytes);
    if (++c->pages == c->page_fail_at) {
        c->failed = true;
        return -ENOSPC;
    }
    assert_true (c->ngot < GOT_MAX);
    got_t *g = &c->got [c->ngot++];
    g->offset = offset;
    g->zero = data == NULL;
    if (data)
        memcpy (g->data, data, PG);
    return 0;
}

//  gw_migsplit_run on a copy of stream exactly its size, so a sanitized
//  build sees any read past its end.
static int
s_run (sink_ctx_t *c, const buf_t *stream, const char *block, uint64_t block_bytes,
       gw_migsplit_stats_t *stats, char *err, size_t errlen)
{
    uint8_t *copy = malloc (stream->len ? stream->len : 1);
    assert_non_null (copy);
    if (stream->len)
        memcpy (copy, stream->data, stream->len);
    c->block_bytes = block_bytes;
    gw_migsplit_sink_t sink = { .keep = s_keep, .page = s_page, .ctx = c };
    if (err && errlen)
        err [0] = 0;
    int rc = gw_migsplit_run (copy, stream->len, block, block_bytes, &sink, stats, err, errlen);
    free (copy);
    return rc;
}

//  stream is refused for block: -EPROTO, err says why (naming word if any).
static void
s_refused_as (const buf_t *stream, const char *block, uint64_t block_bytes, const char *word)
{
    sink_ctx_t c = { 0 };
    char err [256];
    assert_int_equal (s_run (&c, stream, block, block_bytes, NULL, err, sizeof err), -EPROTO);
    assert_true (err [0] != 0);
    if (word && !strcasestr (err, word))
        fail_msg ("err \"%s\" does not name \"%s\"", err, word);
    assert_true (c.kept.len <= stream->len);
    tu_migstream_free (&c.kept);
}

static void
s_refused (const buf_t *stream, const char *word)
{
    s_refused_as (stream, "mem", MEM_BYTES, word);
}

//  The block's pages, in order: the offset, and the tag or zero.
static void
s_assert_got (const sink_ctx_t *c, const rec_t *want, size_t n)
{
    assert_int_equal (c->ngot, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal (c->got [i].offset, want [i].page * PG);
        assert_int_equal (c->got [i].zero, want [i].zero);
        if (!want [i].zero) {
            uint8_t page [PG];
            tu_migstream_page_data (page, want [i].tag);
            assert_memory_equal (c->got [i].data, page, PG);
        }
    }
}

//  Both blocks interleaved, zero pages and CONTINUE within and across
//  sections, an empty PART, a kept record after dropped ones.
static const rec_t s_mixed [] = {
    { "mem", 0, false, false, 1, 0 },
    { "mem", 1, false, true, 2, 0 },
    { "pc.bios", 0, false, false, 3, 0 },
    { "pc.bios", 1, true, true, 0, 0 },
    { "mem", 2, true, false, 0, 0 },
    { NULL, 0, false, false, 0, 0 },
    { "pc.bios", 1, false, false, 4, 0 },
    { "pc.bios", 0, true, true, 0, 0 },
    { NULL, 0, false, false, 0, 0 },
    { NULL, 0, false, false, 0, 0 },
    { "pc.bios", 1, false, true, 5, 0 },
    { "mem", 3, false, false, 6, 0 },
    { "pc.bios", 0, false, false, 7, 0 },
};
#define MIXED_N (sizeof s_mixed / sizeof s_mixed [0])

//  The stream of s_mixed, whole.
static buf_t
s_mixed_stream (void)
{
    buf_t b = { 0 };
    s_stream (&b, s_mixed, MIXED_N, NULL);
    return b;
}

//  recs as a stream split for block: its pages are got (in order), what
//  stays is the stream built without them, the stats count them, and what
//  stays splits again into itself, with no pages.
static void
s_split_ok (const rec_t *recs, size_t n, const char *block, uint64_t bytes, const rec_t *got,
            size_t ngot, uint64_t pages, uint64_t zero_pages)
{
    buf_t stream = { 0 }, want = { 0 };
    s_stream (&stream, recs, n, NULL);
    s_stream (&want, recs, n, block);
    sink_ctx_t c = { 0 }, again = { 0 };
    gw_migsplit_stats_t stats;
    memset (&stats, 0xa5, sizeof stats);
    char err [256];
    assert_int_equal (s_run (&c, &stream, block, bytes, &stats, err, sizeof err), 0);
    s_assert_got (&c, got, ngot);
    assert_int_equal (c.kept.len, want.len);
    assert_memory_equal (c.kept.data, want.data, want.len);
    assert_int_equal (stats.pages, pages);
    assert_int_equal (stats.zero_pages, zero_pages);
    assert_int_equal (stats.kept_bytes, want.len);
    assert_int_equal (stats.block_bytes, bytes);
    assert_int_equal (s_run (&again, &c.kept, block, bytes, NULL, err, sizeof err), 0);
    assert_int_equal (again.ngot, 0);
    assert_int_equal (again.kept.len, want.len);
    assert_memory_equal (again.kept.data, want.data, want.len);
    tu_migstream_free (&again.kept);
    tu_migstream_free (&c.kept);
    tu_migstream_free (&stream);
    tu_migstream_free (&want);
}

static void
test_the_blocks_pages_come_out_and_the_rest_stays (void **state)
{
    (void) state;
    const rec_t got [] = { { "mem", 0, false, false, 1, 0 }, { "mem", 1, false, false, 2, 0 },
                           { "mem", 2, true, false, 0, 0 }, { "mem", 3, false, false, 6, 0 } };
    s_split_ok (s_mixed, MIXED_N, "mem", MEM_BYTES, got, 4, 3, 1);
}

static void
test_any_block_can_be_split (void **state)
{
    (void) state;
    const rec_t got [] = { { "pc.bios", 0, false, false, 3, 0 }, { "pc.bios", 1, true, false, 0, 0 },
                           { "pc.bios", 1, false, false, 4, 0 }, { "pc.bios", 0, true, false, 0, 0 },
                           { "pc.bios", 1, false, false, 5, 0 }, { "pc.bios", 0, false, false, 7, 0 } };
    s_split_ok (s_mixed, MIXED_N, "pc.bios", BIOS_BYTES, got, 6, 4, 2);
}

//  A live save resends the pages the guest dirtied: each comes again, in
//  the stream's order, data after zero and zero after data.
static void
test_a_resent_page_comes_again_in_order (void **state)
{
    (void) state;
    const rec_t recs [] = {
        { "mem", 1, false, false, 1, 0 }, { "mem", 2, true, true, 0, 0 },
        { NULL, 0, false, false, 0, 0 },  { "mem", 1, false, true, 2, 0 },
        { NULL, 0, false, false, 0, 0 },  { "mem", 2, false, true, 3, 0 },
        { "mem", 1, true, true, 0, 0 },
    };
    const rec_t got [] = { recs [0], recs [1], recs [3], recs [5], recs [6] };
    s_split_ok (recs, sizeof recs / sizeof recs [0], "mem", MEM_BYTES, got, 5, 3, 2);
}

//  A stream whose configuration has a capabilities subsection naming caps
//  (NULL: none); with x-ignore-shared, QEMU writes each block's address
//  after its length.
static void
s_caps_stream (buf_t *b, const char *caps, bool drop)
{
    tu_migstream_header (b);
    tu_migstream_u8 (b, 0x05);
    tu_migstream_name (b, "configuration/capabilities");
    tu_migstream_be32 (b, 1);
    tu_migstream_be32 (b, caps ? 1 : 0);
    if (caps)
        tu_migstream_name (b, caps);
    tu_migstream_section (b, TU_MIGSTREAM_START, RAM_ID);
    tu_migstream_name (b, "ram");
    tu_migstream_be32 (b, 0);
    tu_migstream_be32 (b, 4);
    tu_migstream_be64 (b, (MEM_BYTES + BIOS_BYTES) | F_MEM_SIZE);
    for (size_t i = 0; i < 2; i++) {
        tu_migstream_name (b, s_blocks [i].name);
        tu_migstream_be64 (b, s_blocks [i].bytes);
        if (caps && strcmp (caps, "x-ignore-shared") == 0)
            tu_migstream_be64 (b, i ? 0xfffe0000u : 0);
    }
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_section (b, TU_MIGSTREAM_END, RAM_ID);
    if (!drop)
        tu_migstream_record (b, &s_mixed [0]);
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_tail (b);
}

//  The configuration's capabilities subsection stays as it came; one that
//  says shared memory was left out of the stream is refused.
static void
test_the_configurations_capabilities_stay (void **state)
{
    (void) state;
    buf_t stream = { 0 }, want = { 0 };
    s_caps_stream (&stream, NULL, false);
    s_caps_stream (&want, NULL, true);
    sink_ctx_t c = { 0 };
    char err [256];
    assert_int_equal (s_run (&c, &stream, "mem", MEM_BYTES, NULL, err, sizeof err), 0);
    s_assert_got (&c, s_mixed, 1);
    assert_int_equal (c.kept.len, want.len);
    assert_memory_equal (c.kept.data, want.data, want.len);
    tu_migstream_free (&c.kept);
    tu_migstream_free (&stream);
    tu_migstream_free (&want);
    s_caps_stream (&stream, "x-ignore-shared", false);
    s_refused (&stream, NULL);
    tu_migstream_free (&stream);
}

//  Every prefix of a stream up to RAM's END is refused, and so is RAM's
//  END with nothing after it (the tail is copied as it comes: a cut
//  inside it cannot be seen).
static void
test_a_truncated_stream_is_refused_at_every_length (void **state)
{
    (void) state;
    buf_t stream = { 0 }, tail = { 0 };
    s_stream (&stream, s_mixed, MIXED_N, NULL);
    tu_migstream_tail (&tail);
    size_t ram_end = stream.len - tail.len;
    for (size_t len = 0; len <= ram_end; len++) {
        buf_t cut = { .data = stream.data, .len = len, .cap = len };
        sink_ctx_t c = { 0 };
        char err [256];
        int rc = s_run (&c, &cut, "mem", MEM_BYTES, NULL, err, sizeof err);
        if (rc != -EPROTO || !err [0])
            fail_msg ("a stream cut at %zu of %zu: rc %d, err \"%s\"", len, ram_end, rc, err);
        assert_true (c.kept.len <= len);
        assert_true (c.ngot <= 4);
        tu_migstream_free (&c.kept);
    }
    tu_migstream_free (&stream);
    tu_migstream_free (&tail);
}

//  A stream from s_blocks, up to its first PART's records (where a test
//  puts its own), and s_ram_close after them: that PART's end, the len
//  bytes of between (a section that may not come there), then RAM's END.
static void
s_ram_open (buf_t *b)
{
    tu_migstream_header (b);
    tu_migstream_ram_start (b, MEM_BYTES + BIOS_BYTES, s_blocks, 2);
    tu_migstream_section (b, TU_MIGSTREAM_PART, RAM_ID);
}

static void
s_ram_close (buf_t *b, const void *between, size_t len)
{
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_put (b, between, len);
    tu_migstream_section (b, TU_MIGSTREAM_END, RAM_ID);
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_tail (b);
}

static void
test_the_header_must_be_qemus (void **state)
{
    (void) state;
    buf_t stream = s_mixed_stream ();
    stream.data [3] ^= 1;
    s_refused (&stream, NULL);
    stream.data [3] ^= 1;
    stream.data [7] = 2;                        //  version 2
    s_refused (&stream, NULL);
    stream.data [7] = 3;
    stream.data [8] = 0x01;                     //  no configuration
    s_refused (&stream, NULL);
    stream.data [8] = 0x07;
    stream.data [9] = 0xff;                     //  a machine name of 4 GiB
    s_refused (&stream, NULL);
    tu_migstream_free (&stream);
}

//  r alone in the stream's first PART, between after that PART: refused.
static void
s_part_refused (const rec_t *r, const void *between, size_t len, const char *word)
{
    buf_t stream = { 0 };
    s_ram_open (&stream);
    tu_migstream_record (&stream, r);
    s_ram_close (&stream, between, len);
    s_refused (&stream, word);
    tu_migstream_free (&stream);
}

static void
s_one_record_refused (const rec_t *r, const char *word)
{
    s_part_refused (r, NULL, 0, word);
}

static void
test_a_page_outside_its_block_is_refused (void **state)
{
    (void) state;
    const rec_t outside [] = {
        { "mem", MEM_BYTES / PG, false, false, 1, 0 },
        { "mem", MEM_BYTES / PG, true, false, 0, 0 },
        { "mem", UINT64_MAX / PG, false, false, 1, 0 },
        { "pc.bios", BIOS_BYTES / PG, false, false, 1, 0 },
        { "pc.bios", BIOS_BYTES / PG, true, false, 0, 0 },
    };
    for (size_t i = 0; i < sizeof outside / sizeof outside [0]; i++)
        s_one_record_refused (&outside [i], NULL);
}

static void
test_a_page_of_an_unknown_block_is_refused (void **state)
{
    (void) state;
    const rec_t nope = { "nope", 0, false, false, 1, 0 };
    s_one_record_refused (&nope, "nope");
    const rec_t nope_zero = { "nope", 0, true, false, 0, 0 };
    s_one_record_refused (&nope_zero, "nope");
    //  CONTINUE with no record before it in the stream: no block to continue.
    const rec_t first = { "mem", 0, false, true, 1, 0 };
    s_one_record_refused (&first, NULL);
}

//  A zero page's fill byte is a page of that byte: the sink's NULL cannot say it.
static void
test_a_zero_page_filled_with_other_than_zero_is_refused (void **state)
{
    (void) state;
    const rec_t ones = { "mem", 1, true, false, 0, 0x01 };
    s_one_record_refused (&ones, NULL);
}

//  The block's length in the stream against the one the caller expects.
static void
test_the_block_must_be_as_long_as_said (void **state)
{
    (void) state;
    buf_t stream = s_mixed_stream ();
    s_refused_as (&stream, "mem", 2 * MEM_BYTES, NULL);
    s_refused_as (&stream, "mem", MEM_BYTES - PG, NULL);
    s_refused_as (&stream, "pc.bios", MEM_BYTES, NULL);
    tu_migstream_free (&stream);
}

//  A stream whose START says total and lists the n blocks, and whose END
//  holds r (unless NULL) and nothing else.
static void
s_end_only (buf_t *b, uint64_t total, const block_t *blocks, size_t n, const rec_t *r)
{
    tu_migstream_header (b);
    tu_migstream_ram_start (b, total, blocks, n);
    tu_migstream_section (b, TU_MIGSTREAM_END, RAM_ID);
    if (r)
        tu_migstream_record (b, r);
    tu_migstream_eos_footer (b, RAM_ID);
    tu_migstream_tail (b);
}

//  A list without the block: the stream's own pages are all of pc.bios.
static void
test_the_block_must_be_in_the_list (void **state)
{
    (void) state;
    buf_t stream = { 0 };
    s_end_only (&stream, BIOS_BYTES, &s_blocks [1], 1, &s_mixed [2]);
    s_refused (&stream, "mem");
    //  Nor may it hide behind a longer name or a prefix of its own.
    s_refused_as (&stream, "pc.bio", BIOS_BYTES, NULL);
    s_refused_as (&stream, "pc.bios2", BIOS_BYTES, NULL);
    tu_migstream_free (&stream);
}

//  A START without MEM_SIZE lists no block at all: the block is not there
//  to be as long as the caller says.
static void
test_a_stream_without_a_block_list_is_refused (void **state)
{
    (void) state;
    buf_t stream = { 0 };
    tu_migstream_header (&stream);
    tu_migstream_put (&stream, "\x01\x00\x00\x00\x02\x03ram\x00\x00\x00\x00\x00\x00\x00\x04", 17);
    tu_migstream_eos_footer (&stream, RAM_ID);
    tu_migstream_section (&stream, TU_MIGSTREAM_END, RAM_ID);
    tu_migstream_eos_footer (&stream, RAM_ID);
    tu_migstream_tail (&stream);
    s_refused (&stream, "mem");
    tu_migstream_free (&stream);
}

//  A record word with a flag this parser does not take, for a kept block.
static void
test_an_unknown_flag_is_refused (void **state)
{
    (void) state;
    const uint64_t flags [] = { 0x40, 0x80, 0x100, 0x200, 0x400, 0x800, 0x01,
                                F_PAGE | F_ZERO, F_PAGE | 0x40, F_ZERO | 0x100 };
    for (size_t i = 0; i < sizeof flags / sizeof flags [0]; i++) {
        buf_t stream = { 0 };
        s_ram_open (&stream);
        tu_migstream_be64 (&stream, PG | flags [i]);
        tu_migstream_name (&stream, "pc.bios");
        uint8_t page [PG];
        tu_migstream_page_data (page, 9);
        tu_migstream_put (&stream, page, PG);
        s_ram_close (&stream, NULL, 0);
        s_refused (&stream, NULL);
        tu_migstream_free (&stream);
    }
}

//  Before RAM's END, only RAM's own sections may come.
static void
s_between_refused (const void *bytes, size_t len)
{
    s_part_refused (&s_mixed [0], bytes, len, NULL);
}

static void
test_an_unknown_section_inside_rams_is_refused (void **state)
{
    (void) state;
    //  Another iterative section's PART, a PART without RAM's footer id,
    //  a command, a device section, QEMU_VM_EOF, a byte of no meaning.
    s_between_refused ("\x02\x00\x00\x00\x03" "\0\0\0\0\0\0\0\x10" "\x7e\x00\x00\x00\x03", 18);
    s_between_refused ("\x02\x00\x00\x00\x02" "\0\0\0\0\0\0\0\x10" "\x7e\x00\x00\x00\x03", 18);
    s_between_refused ("\x08\x00\x01\x00\x00", 5);
    s_between_refused ("\x04\x00\x00\x00\x03\x05timer\x00\x00\x00\x00\x00\x00\x00\x02"
                       "\x7e\x00\x00\x00\x03", 24);
    s_between_refused ("\x00", 1);
    s_between_refused ("\x55", 1);
    //  Another iterative section's START before RAM's.
    buf_t stream = { 0 };
    tu_migstream_header (&stream);
    tu_migstream_put (&stream, "\x01\x00\x00\x00\x01\x05" "block" "\0\0\0\0\0\0\0\x01", 19);
    tu_migstream_eos_footer (&stream, 1);
    tu_migstream_ram_start (&stream, MEM_BYTES + BIOS_BYTES, s_blocks, 2);
    s_ram_close (&stream, NULL, 0);
    s_refused (&stream, NULL);
    tu_migstream_free (&stream);
}

//  MEM_SIZE's blocks whose lengths are not its total.
static void
s_sizes_refused (uint64_t total, const block_t *blocks, size_t n, const char *block,
                 uint64_t block_bytes)
{
    buf_t stream = { 0 };
    s_end_only (&stream, total, blocks, n, NULL);
    s_refused_as (&stream, block, block_bytes, NULL);
    tu_migstream_free (&stream);
}

static void
test_the_block_list_must_sum_to_its_total (void **state)
{
    (void) state;
    //  More than the total.
    s_sizes_refused (MEM_BYTES + PG, s_blocks, 2, "mem", MEM_BYTES);
    //  Lengths that wrap around to the total.
    const block_t wrap [] = { { "mem", 0 - 2 * (uint64_t) PG }, { "pc.bios", 8 * (uint64_t) PG } };
    s_sizes_refused (6 * (uint64_t) PG, wrap, 2, "pc.bios", 8 * (uint64_t) PG);
    s_sizes_refused (6 * (uint64_t) PG, wrap, 2, "mem", 0 - 2 * (uint64_t) PG);
    //  Less than the total: the EOS after the list is no block.
    s_sizes_refused (MEM_BYTES + BIOS_BYTES + PG, s_blocks, 2, "mem", MEM_BYTES);
    //  A block longer than the total by itself.
    const block_t huge [] = { { "mem", UINT64_MAX & ~(uint64_t) 0xfff } };
    s_sizes_refused (MEM_BYTES, huge, 1, "mem", UINT64_MAX & ~(uint64_t) 0xfff);
}

//  A sink's error at any of its calls comes back as it was, and nothing
//  is called after it (s_keep and s_page check).
static void
test_a_sinks_error_stops_the_run (void **state)
{
    (void) state;
    buf_t stream = s_mixed_stream ();
    sink_ctx_t all = { 0 };
    char err [256];
    assert_int_equal (s_run (&all, &stream, "mem", MEM_BYTES, NULL, err, sizeof err), 0);
    assert_true (all.keeps > 0);
    assert_int_equal (all.pages, 4);
    for (int at = 1; at <= all.keeps; at++) {
        sink_ctx_t c = { .keep_fail_at = at };
        assert_int_equal (s_run (&c, &stream, "mem", MEM_BYTES, NULL, err, sizeof err), -ENOSPC);
        assert_true (c.failed);
        tu_migstream_free (&c.kept);
    }
    for (int at = 1; at <= all.pages; at++) {
        sink_ctx_t c = { .page_fail_at = at };
        assert_int_equal (s_run (&c, &stream, "mem", MEM_BYTES, NULL, err, sizeof err), -ENOSPC);
        assert_true (c.failed);
        assert_int_equal (c.ngot, (size_t) at - 1);
        tu_migstream_free (&c.kept);
    }
    tu_migstream_free (&all.kept);
    tu_migstream_free (&stream);
}

//  A refusal's words fit the caller's buffer, however small.
static void
test_err_fits_its_buffer (void **state)
{
    (void) state;
    buf_t stream = s_mixed_stream ();
    stream.data [0] ^= 1;
    char err [16];
    memset (err, 'x', sizeof err);
    sink_ctx_t c = { 0 };
    assert_int_equal (s_run (&c, &stream, "mem", MEM_BYTES, NULL, err, 8), -EPROTO);
    assert_true (strlen (err) < 8);
    for (size_t i = 8; i < sizeof err; i++)
        assert_int_equal (err [i], 'x');
    tu_migstream_free (&stream);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_the_blocks_pages_come_out_and_the_rest_stays),
        cmocka_unit_test (test_any_block_can_be_split),
        cmocka_unit_test (test_a_resent_page_comes_again_in_order),
        cmocka_unit_test (test_the_configurations_capabilities_stay),
        cmocka_unit_test (test_a_truncated_stream_is_refused_at_every_length),
        cmocka_unit_test (test_the_header_must_be_qemus),
        cmocka_unit_test (test_a_page_outside_its_block_is_refused),
        cmocka_unit_test (test_a_page_of_an_unknown_block_is_refused),
        cmocka_unit_test (test_a_zero_page_filled_with_other_than_zero_is_refused),
        cmocka_unit_test (test_the_block_must_be_as_long_as_said),
        cmocka_unit_test (test_the_block_must_be_in_the_list),
        cmocka_unit_test (test_a_stream_without_a_block_list_is_refused),
        cmocka_unit_test (test_an_unknown_flag_is_refused),
        cmocka_unit_test (test_an_unknown_section_inside_rams_is_refused),
        cmocka_unit_test (test_the_block_list_must_sum_to_its_total),
        cmocka_unit_test (test_a_sinks_error_stops_the_run),
        cmocka_unit_test (test_err_fits_its_buffer),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
