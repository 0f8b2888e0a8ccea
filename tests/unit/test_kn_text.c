/*  test_kn_text - the kernel's text helpers: JSON escaping of stream text
 *  (valid UTF-8 made on the way), MIME types. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ch_text.h"
#include "kn_outfiles.h"

//  Escape all of in (room to spare) into out, NUL-terminated; *used too.
static size_t
s_escape (const char *in, size_t len, char *out, size_t *used)
{
    size_t n = ch_json_escape ((const unsigned char *) in, len, out, 6 * len + 8, used);
    out [n] = 0;
    return n;
}

static void
test_kn_json_escape_escapes_once_and_makes_utf8_valid (void **state)
{
    (void) state;
    char out [256];
    size_t used;
    //  Plain text and valid UTF-8 pass through as they are (not \u-escaped).
    s_escape ("h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80", 15, out, &used);
    assert_string_equal (out, "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80");
    assert_int_equal (used, 15);
    //  JSON's own escapes, and \u00XX for the other control characters.
    const char ctl [] = "a\"b\\c\nd\re\tf\bg\fh\x01i\x1fj\x7f";
    s_escape (ctl, sizeof ctl - 1, out, &used);
    assert_string_equal (out, "a\\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u001fj\x7f");
    //  Invalid bytes and NUL become U+FFFD; overlongs and surrogates too.
    const char bad [] = { 'a', (char) 0xff, 0, 'b', (char) 0xc0, (char) 0xaf,
                          (char) 0xed, (char) 0xa0, (char) 0x80, 'z' };
    s_escape (bad, sizeof bad, out, &used);
    assert_string_equal (out, "a\xef\xbf\xbd\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd"
                              "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
    assert_int_equal (used, sizeof bad);
}

static void
test_kn_json_escape_holds_back_a_cut_character (void **state)
{
    (void) state;
    char out [64];
    size_t used;
    //  A character cut at the end is left for the next bytes...
    assert_int_equal (s_escape ("ab\xe2\x82", 4, out, &used), 2);
    assert_int_equal (used, 2);
    //  ...but a lead byte followed by a non-continuation is replaced at once.
    s_escape ("ab\xe2z", 4, out, &used);
    assert_string_equal (out, "ab\xef\xbf\xbdz");
    assert_int_equal (used, 4);
}

static void
test_kn_json_escape_stops_where_room_ends (void **state)
{
    (void) state;
    char out [64];
    size_t used;
    //  Never half an escape: "\n" needs 2 bytes, 1 is left.
    size_t n = ch_json_escape ((const unsigned char *) "abc\n", 4, out, 4, &used);
    assert_int_equal (n, 3);
    assert_int_equal (used, 3);
    //  Never half a character.
    n = ch_json_escape ((const unsigned char *) "a\xe2\x9c\x93", 4, out, 3, &used);
    assert_int_equal (n, 1);
    assert_int_equal (used, 1);
    n = ch_json_escape ((const unsigned char *) "", 0, out, 0, &used);
    assert_int_equal (n, 0);
    assert_int_equal (used, 0);
}

//  The 8-byte fast path must see a special byte wherever it sits in a word.
static void
test_kn_json_escape_finds_specials_at_every_offset (void **state)
{
    (void) state;
    const char specials [] = { '"', '\\', '\n', 0x1f, 0, (char) 0xc3 };
    for (size_t k = 0; k < sizeof specials; k++) {
        for (size_t pos = 0; pos < 24; pos++) {
            char in [32], out [256], want [256];
            memset (in, 'x', sizeof in);
            in [pos] = specials [k];
            size_t used;
            s_escape (in, sizeof in, out, &used);
            //  What the byte at pos must become.
            const char *esc = specials [k] == '"' ? "\\\"" : specials [k] == '\\' ? "\\\\"
                            : specials [k] == '\n' ? "\\n" : specials [k] == 0x1f ? "\\u001f"
                            : "\xef\xbf\xbd";     //  NUL, and 0xc3 followed by 'x'
            snprintf (want, sizeof want, "%.*s%s%.*s", (int) pos, in, esc,
                      (int) (sizeof in - pos - 1), in + pos + 1);
            assert_string_equal (out, want);
            assert_int_equal (used, sizeof in);
        }
    }
    //  And bytes from 0x20 to 0x7f, other than the two, pass at every offset.
    char in [0x60], out [0x200];
    for (int c = 0x20; c < 0x80; c++)
        in [c - 0x20] = (char) c;
    size_t used;
    size_t n = s_escape (in, sizeof in, out, &used);
    assert_int_equal (n, sizeof in + 2);
}

static void
test_kn_outfiles_mime_by_extension (void **state)
{
    (void) state;
    const struct { const char *name, *mime; } cases [] = {
        { "plot.PNG", "image/png" },
        { "data.csv", "text/csv" },
        { "noext", "application/octet-stream" },
        { ".bashrc", "application/octet-stream" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++)
        assert_string_equal (kn_outfiles_mime (cases [i].name), cases [i].mime);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_kn_json_escape_escapes_once_and_makes_utf8_valid),
        cmocka_unit_test (test_kn_json_escape_holds_back_a_cut_character),
        cmocka_unit_test (test_kn_json_escape_stops_where_room_ends),
        cmocka_unit_test (test_kn_json_escape_finds_specials_at_every_offset),
        cmocka_unit_test (test_kn_outfiles_mime_by_extension),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
