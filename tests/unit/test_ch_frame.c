/*  test_ch_frame - the channel's length-prefix codec. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ch_frame.h"

static void
test_ch_frame_roundtrip_byte_by_byte (void **state)
{
    (void) state;
    uint8_t wire [4 + 5];
    assert_int_equal (ch_frame_encode_header (wire, 5, 100), 0);
    memcpy (wire + 4, "hello", 5);
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    for (size_t i = 0; i < sizeof wire; i++) {
        assert_false (ch_frame_dec_ready (dec));
        assert_int_equal (ch_frame_dec_feed (dec, wire + i, 1), 1);
    }
    assert_true (ch_frame_dec_ready (dec));
    size_t len = 0;
    uint8_t *body = ch_frame_dec_take (dec, &len);
    assert_int_equal (len, 5);
    assert_memory_equal (body, "hello", 5);
    assert_int_equal (body [5], 0);     //  NUL-terminated for JSON parsers
    free (body);
    assert_false (ch_frame_dec_ready (dec));
    ch_frame_dec_destroy (&dec);
    assert_null (dec);
}

static void
test_ch_frame_stops_after_each_frame (void **state)
{
    (void) state;
    uint8_t wire [] = { 0, 0, 0, 1, 'a', 0, 0, 0, 2, 'b', 'c' };
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    long used = ch_frame_dec_feed (dec, wire, sizeof wire);
    assert_int_equal (used, 5);
    size_t len;
    uint8_t *a = ch_frame_dec_take (dec, &len);
    assert_int_equal (len, 1);
    assert_int_equal (a [0], 'a');
    free (a);
    assert_int_equal (ch_frame_dec_feed (dec, wire + used, sizeof wire - (size_t) used), 6);
    uint8_t *b = ch_frame_dec_take (dec, &len);
    assert_int_equal (len, 2);
    assert_memory_equal (b, "bc", 2);
    free (b);
    ch_frame_dec_destroy (&dec);
}

static void
test_ch_frame_rejects_zero_length (void **state)
{
    (void) state;
    uint8_t wire [] = { 0, 0, 0, 0, 'x' };
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    assert_int_equal (ch_frame_dec_feed (dec, wire, sizeof wire), -EPROTO);
    assert_int_equal (ch_frame_dec_bad_length (dec), 0);
    //  Dead for good: no resynchronising on a broken stream.
    assert_int_equal (ch_frame_dec_feed (dec, wire, 1), -EPROTO);
    ch_frame_dec_destroy (&dec);
}

static void
test_ch_frame_rejects_oversize_before_allocating (void **state)
{
    (void) state;
    uint8_t wire [] = { 0xff, 0xff, 0xff, 0xff };
    ch_frame_dec_t *dec = ch_frame_dec_new (1024);
    assert_int_equal (ch_frame_dec_feed (dec, wire, sizeof wire), -EPROTO);
    assert_int_equal (ch_frame_dec_bad_length (dec), 0xffffffffu);
    ch_frame_dec_destroy (&dec);
    dec = ch_frame_dec_new (1024);
    uint8_t edge [] = { 0, 0, 4, 1 };   //  1025: one past the limit
    assert_int_equal (ch_frame_dec_feed (dec, edge, sizeof edge), -EPROTO);
    ch_frame_dec_destroy (&dec);
}

static void
test_ch_frame_encode_checks_range (void **state)
{
    (void) state;
    uint8_t hdr [4];
    assert_int_equal (ch_frame_encode_header (hdr, 0, 10), -EMSGSIZE);
    assert_int_equal (ch_frame_encode_header (hdr, 11, 10), -EMSGSIZE);
    assert_int_equal (ch_frame_encode_header (hdr, 0x01020304, 0x7fffffff), 0);
    uint8_t want [] = { 1, 2, 3, 4 };
    assert_memory_equal (hdr, want, 4);
}

static void
test_ch_frame_hunt_skips_to_the_sync_marker (void **state)
{
    (void) state;
    //  Half a frame from a dead kernel, zeros, then the marker and a frame.
    uint8_t wire [64];
    size_t n = 0;
    const uint8_t junk [] = { 0, 0, 0, 9, 'h', 'a', 'l', 0, 0, 0, 0, 0, 0 };
    memcpy (wire, junk, sizeof junk);
    n += sizeof junk;
    memcpy (wire + n, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    n += CH_FRAME_SYNC_LEN;
    const uint8_t frame [] = { 0, 0, 0, 2, 'o', 'k' };
    memcpy (wire + n, frame, sizeof frame);
    n += sizeof frame;
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    ch_frame_dec_hunt (dec);
    size_t used = 0;
    while (used < n && !ch_frame_dec_ready (dec)) {
        long u = ch_frame_dec_feed (dec, wire + used, 1);
        assert_true (u >= 0);
        used += (size_t) u;
    }
    assert_false (ch_frame_dec_hunting (dec));
    size_t len;
    uint8_t *body = ch_frame_dec_take (dec, &len);
    assert_non_null (body);
    assert_memory_equal (body, "ok", 2);
    free (body);
    ch_frame_dec_destroy (&dec);
}

//  A near miss: one zero inside the letters starts the count over at one,
//  so "\0\0\0\0CVM-S\0CVM-SYNC" is not the marker and the hunt goes on.
static void
test_ch_frame_hunt_is_not_fooled_by_a_near_miss (void **state)
{
    (void) state;
    static const uint8_t near [] = "\0\0\0\0CVM-S\0CVM-SYNC";
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    ch_frame_dec_hunt (dec);
    for (size_t i = 0; i < sizeof near - 1; i++)
        assert_int_equal (ch_frame_dec_feed (dec, near + i, 1), 1);
    assert_true (ch_frame_dec_hunting (dec));
    assert_int_equal (ch_frame_dec_feed (dec, (const uint8_t *) CH_FRAME_SYNC,
                                         CH_FRAME_SYNC_LEN), CH_FRAME_SYNC_LEN);
    assert_false (ch_frame_dec_hunting (dec));
    ch_frame_dec_destroy (&dec);
}

static void
test_ch_frame_sync_between_frames_only_when_allowed (void **state)
{
    (void) state;
    uint8_t wire [CH_FRAME_SYNC_LEN + 5];
    memcpy (wire, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    memcpy (wire + CH_FRAME_SYNC_LEN, "\0\0\0\1x", 5);
    ch_frame_dec_t *dec = ch_frame_dec_new (100);
    ch_frame_dec_allow_sync (dec);
    assert_int_equal (ch_frame_dec_feed (dec, wire, sizeof wire), (long) sizeof wire);
    size_t len;
    uint8_t *body = ch_frame_dec_take (dec, &len);
    assert_int_equal (len, 1);
    free (body);
    //  A zero length followed by anything else is still fatal.
    const uint8_t bad [] = { 0, 0, 0, 0, 'C', 'V', 'X' };
    assert_int_equal (ch_frame_dec_feed (dec, bad, sizeof bad), -EPROTO);
    ch_frame_dec_destroy (&dec);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_frame_roundtrip_byte_by_byte),
        cmocka_unit_test (test_ch_frame_stops_after_each_frame),
        cmocka_unit_test (test_ch_frame_rejects_zero_length),
        cmocka_unit_test (test_ch_frame_rejects_oversize_before_allocating),
        cmocka_unit_test (test_ch_frame_encode_checks_range),
        cmocka_unit_test (test_ch_frame_hunt_skips_to_the_sync_marker),
        cmocka_unit_test (test_ch_frame_hunt_is_not_fooled_by_a_near_miss),
        cmocka_unit_test (test_ch_frame_sync_between_frames_only_when_allowed),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
