/*  test_ch_mux - the egress port's stream multiplexing codec. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_frame.h"
#include "ch_mux.h"

#define S_RECS_MAX 32

//  A frame as it came out, its payload as a hash (DATA frames are big).
typedef struct {
    int type;
    uint32_t stream, len, credit, hash;
} rec_t;

//  Bytes on the wire, and the frames they should decode to.
typedef struct {
    uint8_t b [65536];
    size_t n;
    rec_t want [S_RECS_MAX];
    size_t nwant;
} wire_t;

static uint32_t
s_hash (const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;                   //  FNV-1a
    for (size_t i = 0; i < n; i++)
        h = (h ^ p [i]) * 16777619u;
    return h;
}

static void
s_raw (wire_t *w, const void *p, size_t n)
{
    assert_true (w->n + n <= sizeof w->b);
    if (n)                                      //  a NULL payload of 0 bytes
        memcpy (w->b + w->n, p, n);
    w->n += n;
}

static void
s_sync (wire_t *w)
{
    s_raw (w, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
}

//  A frame through the encoder, recorded as expected.
static void
s_frame (wire_t *w, ch_mux_type_t type, uint32_t stream, const void *p, uint32_t len)
{
    uint8_t hdr [CH_MUX_HDR];
    assert_int_equal (ch_mux_encode_header (hdr, type, stream, len), 0);
    s_raw (w, hdr, sizeof hdr);
    s_raw (w, p, len);
    assert_true (w->nwant < S_RECS_MAX);
    w->want [w->nwant++] = (rec_t) { type, stream, len, 0, s_hash (p, len) };
}

static void
s_credit (wire_t *w, uint32_t stream, uint32_t amount)
{
    uint8_t out [CH_MUX_HDR + 4];
    assert_int_equal (ch_mux_encode_credit (out, stream, amount), 0);
    s_raw (w, out, sizeof out);
    w->want [w->nwant++] = (rec_t) { CH_MUX_CREDIT, stream, 4, amount,
                                     s_hash (out + CH_MUX_HDR, 4) };
}

//  A raw header, for the ones the encoder refuses.
static size_t
s_hdr (uint8_t *out, int type, uint32_t stream, uint32_t len)
{
    out [0] = (uint8_t) type;
    for (int i = 0; i < 4; i++) {
        out [1 + i] = (uint8_t) (stream >> (24 - 8 * i));
        out [5 + i] = (uint8_t) (len >> (24 - 8 * i));
    }
    return CH_MUX_HDR;
}

//  What a proxy and a gateway say in one session, markers included.
static wire_t *
s_session (void)
{
    wire_t *w = calloc (1, sizeof *w);
    static uint8_t big [CH_MUX_DATA_MAX], text [CH_MUX_TEXT_MAX];
    for (size_t i = 0; i < sizeof big; i++)
        big [i] = (uint8_t) (i * 7);
    memset (text, 'n', sizeof text);
    const char *req = "CONNECT example.com:443 HTTP/1.1\r\n\r\n";
    const char *why = "refused: example.org is not allowed";
    s_sync (w);
    s_frame (w, CH_MUX_HELLO, 0, "nonce-0123456789abcdef", 22);
    s_frame (w, CH_MUX_OPEN, 1, NULL, 0);
    s_frame (w, CH_MUX_DATA, 1, req, (uint32_t) strlen (req));
    s_frame (w, CH_MUX_OPEN, 3, NULL, 0);
    s_frame (w, CH_MUX_DATA, 3, big, sizeof big);
    s_credit (w, 3, CH_MUX_DATA_MAX);
    s_sync (w);
    s_sync (w);
    s_frame (w, CH_MUX_DATA, 1, CH_FRAME_SYNC "\0", CH_FRAME_SYNC_LEN + 1);  //  just bytes
    s_frame (w, CH_MUX_EOF, 1, NULL, 0);
    s_frame (w, CH_MUX_CLOSE, 1, NULL, 0);
    s_frame (w, CH_MUX_CLOSE, 3, why, (uint32_t) strlen (why));
    s_credit (w, 3, CH_MUX_WINDOW);
    s_credit (w, 0xffffffffu, 1);
    s_sync (w);
    s_frame (w, CH_MUX_HELLO, 0, text, sizeof text);
    s_frame (w, CH_MUX_DATA, 0xffffffffu, "x", 1);
    return w;
}

static uint32_t s_rand_state = 1;

static size_t
s_rand (size_t below)
{
    s_rand_state = s_rand_state * 1103515245u + 12345u;
    return (s_rand_state >> 8) % below;
}

//  Decode wire in chunks of 1..max_chunk bytes (0: as much as there is),
//  the frames into recs. Returns 0 or the feed's error, its words into err.
static int
s_decode (const uint8_t *wire, size_t n, size_t max_chunk, rec_t *recs, size_t *nrecs,
          char *err, size_t cap)
{
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    assert_non_null (dec);
    size_t at = 0, k = 0;
    int rc = 0;
    while (at < n && rc == 0) {
        size_t chunk = n - at;
        if (max_chunk && chunk > max_chunk)
            chunk = 1 + s_rand (max_chunk);
        long used = ch_mux_dec_feed (dec, wire + at, chunk);
        if (used < 0) {
            rc = (int) used;
            break;
        }
        at += (size_t) used;
        const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
        if (!f) {
            assert_int_equal (used, chunk);     //  stops early only for a frame
            continue;
        }
        assert_null (ch_mux_dec_frame (dec));  //  once
        assert_int_equal (f->data [f->len], 0);
        assert_true (k < S_RECS_MAX);
        recs [k++] = (rec_t) { f->type, f->stream, f->len, f->credit, s_hash (f->data, f->len) };
    }
    snprintf (err, cap, "%s", ch_mux_dec_error (dec));
    ch_mux_dec_destroy (&dec);
    assert_null (dec);
    *nrecs = k;
    return rc;
}

static void
s_assert_recs (const rec_t *got, size_t ngot, const rec_t *want, size_t nwant)
{
    assert_int_equal (ngot, nwant);
    for (size_t i = 0; i < nwant; i++) {
        assert_int_equal (got [i].type, want [i].type);
        assert_int_equal (got [i].stream, want [i].stream);
        assert_int_equal (got [i].len, want [i].len);
        assert_int_equal (got [i].credit, want [i].credit);
        assert_int_equal (got [i].hash, want [i].hash);
    }
}

static void
test_ch_mux_every_type_round_trips (void **state)
{
    (void) state;
    wire_t *w = s_session ();
    rec_t got [S_RECS_MAX];
    size_t n;
    char err [256];
    assert_int_equal (s_decode (w->b, w->n, 0, got, &n, err, sizeof err), 0);
    s_assert_recs (got, n, w->want, w->nwant);
    assert_string_equal (err, "");
    //  Each type at least once.
    int seen = 0;
    for (size_t i = 0; i < n; i++)
        seen |= 1 << got [i].type;
    assert_int_equal (seen, 0x7e);
    free (w);
}

static void
test_ch_mux_payload_is_nul_terminated_and_whole (void **state)
{
    (void) state;
    wire_t *w = calloc (1, sizeof *w);
    s_frame (w, CH_MUX_CLOSE, 9, "no route", 8);
    s_frame (w, CH_MUX_DATA, 9, "ab\0cd", 5);
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    long used = ch_mux_dec_feed (dec, w->b, w->n);
    assert_int_equal (used, CH_MUX_HDR + 8);   //  stops after the first frame
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_int_equal (f->type, CH_MUX_CLOSE);
    assert_int_equal (f->stream, 9);
    assert_string_equal ((const char *) f->data, "no route");
    assert_int_equal (ch_mux_dec_feed (dec, w->b + used, w->n - (size_t) used),
                      CH_MUX_HDR + 5);
    f = ch_mux_dec_frame (dec);
    assert_int_equal (f->len, 5);
    assert_memory_equal (f->data, "ab\0cd\0", 6);
    ch_mux_dec_destroy (&dec);
    free (w);
}

static void
test_ch_mux_any_split_gives_the_same_frames (void **state)
{
    (void) state;
    wire_t *w = s_session ();
    rec_t got [S_RECS_MAX];
    size_t n;
    char err [256];
    assert_int_equal (s_decode (w->b, w->n, 1, got, &n, err, sizeof err), 0);
    s_assert_recs (got, n, w->want, w->nwant);
    size_t maxes [] = { 2, 3, 9, 10, 13, 100, 5000, 20000 };
    for (size_t m = 0; m < sizeof maxes / sizeof maxes [0]; m++)
        for (int round = 0; round < 20; round++) {
            assert_int_equal (s_decode (w->b, w->n, maxes [m], got, &n, err, sizeof err), 0);
            s_assert_recs (got, n, w->want, w->nwant);
        }
    free (w);
}

//  Every refusal of the table, with its words.
static const struct {
    int type;
    uint32_t stream, len;
    int64_t amount;                             //  CREDIT's payload, -1: none sent
    const char *words;
} s_bad [] = {
    { 7, 7, 0, -1, "unknown frame type 7 on stream 7" },
    { 255, 1, 3, -1, "unknown frame type 255 on stream 1" },
    { CH_MUX_HELLO, 7, 5, -1, "HELLO on stream 7; HELLO is only on stream 0" },
    { CH_MUX_OPEN, 0, 0, -1, "OPEN on stream 0; stream 0 is only for HELLO" },
    { CH_MUX_DATA, 0, 1, -1, "DATA on stream 0; stream 0 is only for HELLO" },
    { CH_MUX_EOF, 0, 0, -1, "EOF on stream 0; stream 0 is only for HELLO" },
    { CH_MUX_CLOSE, 0, 0, -1, "CLOSE on stream 0; stream 0 is only for HELLO" },
    { CH_MUX_CREDIT, 0, 4, -1, "CREDIT on stream 0; stream 0 is only for HELLO" },
    { CH_MUX_HELLO, 0, 0, -1, "HELLO on stream 0 has 0 bytes; at least 1" },
    { CH_MUX_HELLO, 0, 513, -1, "HELLO on stream 0 has 513 bytes; at most 512" },
    { CH_MUX_OPEN, 2, 1, -1, "OPEN on stream 2 has 1 byte; it carries none" },
    { CH_MUX_DATA, 7, 0, -1, "DATA on stream 7 has 0 bytes; at least 1" },
    { CH_MUX_DATA, 7, 20000, -1, "DATA on stream 7 has 20000 bytes; at most 16384" },
    { CH_MUX_DATA, 7, 0xffffffffu, -1, "DATA on stream 7 has 4294967295 bytes; at most" },
    { CH_MUX_EOF, 4, 2, -1, "EOF on stream 4 has 2 bytes; it carries none" },
    { CH_MUX_CLOSE, 5, 513, -1, "CLOSE on stream 5 has 513 bytes; at most 512" },
    { CH_MUX_CREDIT, 6, 3, -1, "CREDIT on stream 6 has 3 bytes; exactly 4" },
    { CH_MUX_CREDIT, 6, 5, -1, "CREDIT on stream 6 has 5 bytes; exactly 4" },
    { CH_MUX_CREDIT, 2, 4, 0, "CREDIT on stream 2 grants 0 bytes; 1..262144" },
    { CH_MUX_CREDIT, 2, 4, CH_MUX_WINDOW + 1, "CREDIT on stream 2 grants 262145 bytes" },
    { CH_MUX_CREDIT, 2, 4, 0xffffffffu, "CREDIT on stream 2 grants 4294967295 bytes" },
};

//  wire is refused, both whole and a byte at a time, in these words; the
//  decoder stays dead.
static void
s_assert_refused (const uint8_t *wire, size_t n, const char *words)
{
    rec_t got [S_RECS_MAX];
    size_t k;
    char err [256], err1 [256];
    assert_int_equal (s_decode (wire, n, 0, got, &k, err, sizeof err), -EPROTO);
    assert_int_equal (s_decode (wire, n, 1, got, &k, err1, sizeof err1), -EPROTO);
    assert_string_equal (err, err1);
    if (!strstr (err, words))
        fail_msg ("\"%s\" does not say \"%s\"", err, words);
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    long used;
    while ((used = ch_mux_dec_feed (dec, wire, n)) > 0) {
        assert_non_null (ch_mux_dec_frame (dec));   //  a good frame before the bad
        wire += used;
        n -= (size_t) used;
    }
    assert_int_equal (used, -EPROTO);
    assert_false (ch_mux_dec_hunting (dec));
    assert_int_equal (ch_mux_dec_feed (dec, (const uint8_t *) CH_FRAME_SYNC, 12), -EPROTO);
    assert_int_equal (ch_mux_dec_feed (dec, NULL, 0), -EPROTO);
    assert_null (ch_mux_dec_frame (dec));
    assert_string_equal (ch_mux_dec_error (dec), err);
    ch_mux_dec_destroy (&dec);
}

static void
test_ch_mux_refuses_what_the_table_forbids (void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof s_bad / sizeof s_bad [0]; i++) {
        uint8_t wire [64];
        //  After a good frame: the refusal does not depend on what came before.
        size_t n = s_hdr (wire, CH_MUX_OPEN, 1, 0);
        n += s_hdr (wire + n, s_bad [i].type, s_bad [i].stream, s_bad [i].len);
        if (s_bad [i].amount >= 0) {
            uint32_t a = (uint32_t) s_bad [i].amount;
            uint8_t be [4] = { (uint8_t) (a >> 24), (uint8_t) (a >> 16), (uint8_t) (a >> 8),
                               (uint8_t) a };
            memcpy (wire + n, be, 4);
            n += 4;
        }
        else {
            memset (wire + n, 'p', 20);
            n += 20;
        }
        s_assert_refused (wire + CH_MUX_HDR, n - CH_MUX_HDR, s_bad [i].words);
        s_assert_refused (wire, n, s_bad [i].words);
    }
}

static void
test_ch_mux_refuses_a_bad_sync_marker (void **state)
{
    (void) state;
    s_assert_refused ((const uint8_t *) "\0\0\0\0CVM-SYNX", 12,
                      "type 0 is only the sync marker, and byte 12 of this one is 0x58, not 0x43");
    s_assert_refused ((const uint8_t *) "\0\0\0\7CVM-SYNC", 12, "byte 4 of this one is 0x07");
    s_assert_refused ((const uint8_t *) "\0\0\0\0\0CVM-SYNC", 13, "byte 5 of this one is 0x00");
    //  Between two frames, as well as first.
    uint8_t wire [64];
    size_t n = s_hdr (wire, CH_MUX_EOF, 1, 0);
    memcpy (wire + n, "\0\0\0\0CVM-", 8);
    wire [n + 8] = 'X';
    s_assert_refused (wire, n + 9, "byte 9 of this one is 0x58, not 0x53");
}

//  A length one over its type's bound is refused from the header alone,
//  before any payload is buffered; the bound itself is not.
static void
test_ch_mux_over_max_refused_after_only_the_header (void **state)
{
    (void) state;
    const struct { int type; uint32_t max; } t [] = {
        { CH_MUX_HELLO, CH_MUX_TEXT_MAX }, { CH_MUX_OPEN, 0 }, { CH_MUX_DATA, CH_MUX_DATA_MAX },
        { CH_MUX_EOF, 0 }, { CH_MUX_CLOSE, CH_MUX_TEXT_MAX }, { CH_MUX_CREDIT, 4 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t [0]; i++) {
        uint32_t stream = t [i].type == CH_MUX_HELLO ? 0 : 5;
        uint8_t hdr [CH_MUX_HDR];
        ch_mux_dec_t *dec = ch_mux_dec_new ();
        s_hdr (hdr, t [i].type, stream, t [i].max + 1);
        assert_int_equal (ch_mux_dec_feed (dec, hdr, 8), 8);
        assert_int_equal (ch_mux_dec_feed (dec, hdr + 8, 1), -EPROTO);
        char words [64];
        snprintf (words, sizeof words, "%s on stream %u has %u byte", ch_mux_type_name (t [i].type),
                  stream, t [i].max + 1);
        assert_non_null (strstr (ch_mux_dec_error (dec), words));
        ch_mux_dec_destroy (&dec);
        dec = ch_mux_dec_new ();
        s_hdr (hdr, t [i].type, stream, t [i].max);
        assert_int_equal (ch_mux_dec_feed (dec, hdr, sizeof hdr), CH_MUX_HDR);
        assert_string_equal (ch_mux_dec_error (dec), "");
        assert_true ((ch_mux_dec_frame (dec) != NULL) == (t [i].max == 0));
        ch_mux_dec_destroy (&dec);
    }
}

static void
test_ch_mux_untaken_frame_stops_the_feed (void **state)
{
    (void) state;
    wire_t *w = calloc (1, sizeof *w);
    s_frame (w, CH_MUX_OPEN, 1, NULL, 0);
    s_frame (w, CH_MUX_DATA, 1, "hello", 5);
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    assert_null (ch_mux_dec_frame (dec));
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), CH_MUX_HDR);
    //  Not taken: nothing more is consumed, so nothing is lost.
    assert_int_equal (ch_mux_dec_feed (dec, w->b + CH_MUX_HDR, w->n - CH_MUX_HDR), 0);
    assert_int_equal (ch_mux_dec_feed (dec, w->b + CH_MUX_HDR, 1), 0);
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_int_equal (f->type, CH_MUX_OPEN);
    assert_int_equal (f->len, 0);
    assert_int_equal (f->data [0], 0);
    assert_null (ch_mux_dec_frame (dec));
    assert_int_equal (ch_mux_dec_feed (dec, w->b + CH_MUX_HDR, w->n - CH_MUX_HDR),
                      CH_MUX_HDR + 5);
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), 0);
    f = ch_mux_dec_frame (dec);
    assert_int_equal (f->type, CH_MUX_DATA);
    assert_string_equal ((const char *) f->data, "hello");
    //  A hunt drops a frame not taken.
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), CH_MUX_HDR);
    ch_mux_dec_hunt (dec);
    assert_null (ch_mux_dec_frame (dec));
    ch_mux_dec_destroy (&dec);
    free (w);
}

//  What a proxy that died mid-write leaves, then a marker that is not one,
//  then the marker and a new proxy's HELLO.
static wire_t *
s_leftovers (void)
{
    wire_t *w = calloc (1, sizeof *w);
    uint8_t hdr [CH_MUX_HDR];
    s_raw (w, hdr, s_hdr (hdr, CH_MUX_DATA, 3, 100));
    s_raw (w, "\0\0\0\0CVM", 7);                //  half a marker inside a payload
    s_raw (w, "\0\0\0\0CVM-S\0\0\0\0CVM-SYNC", 21);
    w->want [w->nwant++] = (rec_t) { CH_MUX_HELLO, 0, 3, 0, s_hash ((const uint8_t *) "new", 3) };
    s_raw (w, "\1\0\0\0\0\0\0\0\3new", 12);
    return w;
}

//  Hunting from the start, wire in pieces cut at a and b.
static void
s_hunt_split (const wire_t *w, size_t a, size_t b)
{
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    ch_mux_dec_hunt (dec);
    assert_true (ch_mux_dec_hunting (dec));
    size_t cuts [] = { 0, a, b, w->n }, end_of_marker = w->n - 12;
    for (int i = 0; i < 3; i++) {
        size_t from = cuts [i], n = cuts [i + 1] - from;
        assert_int_equal (ch_mux_dec_feed (dec, w->b + from, n), n);
        assert_true (ch_mux_dec_hunting (dec) == (cuts [i + 1] < end_of_marker));
    }
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_int_equal (f->type, CH_MUX_HELLO);
    assert_string_equal ((const char *) f->data, "new");
    ch_mux_dec_destroy (&dec);
}

static void
test_ch_mux_hunt_finds_the_marker_across_splits (void **state)
{
    (void) state;
    wire_t *w = s_leftovers ();
    for (size_t a = 0; a <= w->n; a++)
        for (size_t b = a; b <= w->n; b++)
            s_hunt_split (w, a, b);
    free (w);
}

//  Where a hunt from the start of p stops (just past the first marker), or
//  n + 1 when it never does: fed a byte at a time, so that it is exact.
static size_t
s_hunt_end (const uint8_t *p, size_t n)
{
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    ch_mux_dec_hunt (dec);
    size_t at = 0;
    while (at < n && ch_mux_dec_hunting (dec))
        assert_int_equal (ch_mux_dec_feed (dec, p + at++, 1), 1);
    size_t end = ch_mux_dec_hunting (dec) ? n + 1 : at;
    ch_mux_dec_destroy (&dec);
    return end;
}

//  Random bytes made of pieces of the marker (its head, its tail, a byte of
//  it) into p, n of them.
static void
s_marker_pieces (uint8_t *p, size_t n)
{
    const uint8_t *m = (const uint8_t *) CH_FRAME_SYNC;
    size_t at = 0;
    while (at < n) {
        size_t k = 1 + s_rand (CH_FRAME_SYNC_LEN), kind = s_rand (3);
        const uint8_t *from = kind == 0 ? m : kind == 1 ? m + CH_FRAME_SYNC_LEN - k
                                                        : m + s_rand (CH_FRAME_SYNC_LEN);
        if (kind == 2)
            k = 1;
        if (k > n - at)
            k = n - at;
        memcpy (p + at, from, k);
        at += k;
    }
}

//  Against memmem.
static void
test_ch_mux_hunt_stops_just_past_the_first_marker (void **state)
{
    (void) state;
    uint8_t p [64];
    size_t found = 0;
    for (int round = 0; round < 200000; round++) {
        size_t n = 12 + s_rand (sizeof p - 12);
        s_marker_pieces (p, n);
        const uint8_t *m = memmem (p, n, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
        size_t want = m ? (size_t) (m - p) + CH_FRAME_SYNC_LEN : n + 1;
        size_t got = s_hunt_end (p, n);
        if (got != want)
            fail_msg ("round %d: hunt ended at %zu, the marker at %zu", round, got, want);
        found += m != NULL;
    }
    assert_true (found > 20000 && found < 180000);
}

static void
test_ch_mux_hunt_skips_a_near_miss (void **state)
{
    (void) state;
    //  One zero, then the rest of the marker: not the marker.
    const uint8_t near [] = "\0\0\0\0CVM-S\0CVM-SYNC\1\0\0\0\0\0\0\0\1a";
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    ch_mux_dec_hunt (dec);
    assert_int_equal (ch_mux_dec_feed (dec, near, sizeof near - 1), sizeof near - 1);
    assert_true (ch_mux_dec_hunting (dec));
    assert_null (ch_mux_dec_frame (dec));
    wire_t *w = calloc (1, sizeof *w);
    s_sync (w);
    s_frame (w, CH_MUX_OPEN, 4, NULL, 0);
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), w->n);
    assert_false (ch_mux_dec_hunting (dec));
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_int_equal (f->type, CH_MUX_OPEN);
    assert_int_equal (f->stream, 4);
    ch_mux_dec_destroy (&dec);
    free (w);
}

static void
test_ch_mux_hunt_revives_a_dead_decoder (void **state)
{
    (void) state;
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    uint8_t hdr [CH_MUX_HDR];
    s_hdr (hdr, CH_MUX_DATA, 2, 1u << 20);
    assert_int_equal (ch_mux_dec_feed (dec, hdr, sizeof hdr), -EPROTO);
    assert_non_null (strstr (ch_mux_dec_error (dec), "DATA on stream 2 has 1048576 bytes"));
    ch_mux_dec_hunt (dec);
    assert_string_equal (ch_mux_dec_error (dec), "");
    assert_true (ch_mux_dec_hunting (dec));
    wire_t *w = calloc (1, sizeof *w);
    s_raw (w, "garbage\0\0", 9);
    s_sync (w);
    s_frame (w, CH_MUX_HELLO, 0, "again", 5);
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), w->n);
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_string_equal ((const char *) f->data, "again");
    //  A hunt in the middle of a frame drops it.
    s_hdr (hdr, CH_MUX_DATA, 2, 10);
    assert_int_equal (ch_mux_dec_feed (dec, hdr, sizeof hdr), sizeof hdr);
    ch_mux_dec_hunt (dec);
    assert_int_equal (ch_mux_dec_feed (dec, w->b, w->n), w->n);
    f = ch_mux_dec_frame (dec);
    assert_non_null (f);
    assert_int_equal (f->type, CH_MUX_HELLO);
    ch_mux_dec_destroy (&dec);
    free (w);
}

static void
test_ch_mux_sync_marker_between_frames_is_skipped (void **state)
{
    (void) state;
    wire_t *w = calloc (1, sizeof *w);
    s_sync (w);
    s_sync (w);
    s_frame (w, CH_MUX_EOF, 8, NULL, 0);
    s_sync (w);
    s_frame (w, CH_MUX_CLOSE, 8, "bye", 3);
    s_sync (w);                                 //  a trailing one, then nothing
    for (size_t cut = 0; cut <= w->n; cut++) {
        rec_t got [S_RECS_MAX];
        size_t n;
        char err [256];
        assert_int_equal (s_decode (w->b, cut, 0, got, &n, err, sizeof err), 0);
        assert_string_equal (err, "");
        size_t want = cut >= 2 * 12 + 9 + 12 + 12 ? 2 : cut >= 2 * 12 + 9 ? 1 : 0;
        s_assert_recs (got, n, w->want, want);
    }
    free (w);
}

//  The encoders accept exactly what the decoder accepts.
static void
test_ch_mux_encoders_refuse_what_the_decoder_refuses (void **state)
{
    (void) state;
    const uint32_t streams [] = { 0, 1, 0xffffffffu };
    const uint32_t lens [] = { 0, 1, 3, 4, 5, 511, 512, 513, 16383, 16384, 16385, 0xffffffffu };
    for (int type = -1; type <= 8; type++)
        for (size_t s = 0; s < 3; s++)
            for (size_t l = 0; l < sizeof lens / sizeof lens [0]; l++) {
                uint8_t hdr [CH_MUX_HDR], raw [CH_MUX_HDR + 4] = { 0 };
                int rc = ch_mux_encode_header (hdr, (ch_mux_type_t) type, streams [s], lens [l]);
                assert_true (rc == 0 || rc == -EINVAL);
                if (type <= 0)
                    assert_int_equal (rc, -EINVAL);
                if (type == 0 || type == -1)
                    continue;                   //  a 0 byte is a marker's start, 0xff is 255
                s_hdr (raw, type, streams [s], lens [l]);
                raw [CH_MUX_HDR + 3] = 1;       //  a CREDIT of 1
                ch_mux_dec_t *dec = ch_mux_dec_new ();
                long used = ch_mux_dec_feed (dec, raw, CH_MUX_HDR);
                assert_true (used == CH_MUX_HDR || used == -EPROTO);
                assert_int_equal (rc == 0, used == CH_MUX_HDR);
                if (rc == 0)
                    assert_memory_equal (hdr, raw, CH_MUX_HDR);
                ch_mux_dec_destroy (&dec);
            }
    uint8_t out [CH_MUX_HDR + 4];
    assert_int_equal (ch_mux_encode_credit (out, 1, 0), -EINVAL);
    assert_int_equal (ch_mux_encode_credit (out, 1, CH_MUX_WINDOW + 1), -EINVAL);
    assert_int_equal (ch_mux_encode_credit (out, 0, 100), -EINVAL);
    assert_int_equal (ch_mux_encode_credit (out, 0x01020304, CH_MUX_WINDOW), 0);
    const uint8_t want [] = { 6, 1, 2, 3, 4, 0, 0, 0, 4, 0, 4, 0, 0 };
    assert_memory_equal (out, want, sizeof want);
}

static void
test_ch_mux_type_names (void **state)
{
    (void) state;
    const char *names [] = { "?", "HELLO", "OPEN", "DATA", "EOF", "CLOSE", "CREDIT", "?" };
    for (int t = 0; t < 8; t++)
        assert_string_equal (ch_mux_type_name (t), names [t]);
    assert_string_equal (ch_mux_type_name (-1), "?");
    assert_string_equal (ch_mux_type_name (256 + CH_MUX_DATA), "?");
    ch_mux_dec_t *dec = NULL;
    ch_mux_dec_destroy (&dec);                  //  nothing to destroy is fine
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_mux_every_type_round_trips),
        cmocka_unit_test (test_ch_mux_payload_is_nul_terminated_and_whole),
        cmocka_unit_test (test_ch_mux_any_split_gives_the_same_frames),
        cmocka_unit_test (test_ch_mux_refuses_what_the_table_forbids),
        cmocka_unit_test (test_ch_mux_refuses_a_bad_sync_marker),
        cmocka_unit_test (test_ch_mux_over_max_refused_after_only_the_header),
        cmocka_unit_test (test_ch_mux_untaken_frame_stops_the_feed),
        cmocka_unit_test (test_ch_mux_hunt_finds_the_marker_across_splits),
        cmocka_unit_test (test_ch_mux_hunt_stops_just_past_the_first_marker),
        cmocka_unit_test (test_ch_mux_hunt_skips_a_near_miss),
        cmocka_unit_test (test_ch_mux_hunt_revives_a_dead_decoder),
        cmocka_unit_test (test_ch_mux_sync_marker_between_frames_is_skipped),
        cmocka_unit_test (test_ch_mux_encoders_refuse_what_the_decoder_refuses),
        cmocka_unit_test (test_ch_mux_type_names),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
