/*  test_kn_text - the kernel's UTF-8 and MIME helpers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "kn_capture.h"
#include "kn_outfiles.h"

static void
test_kn_utf8_sanitize_replaces_and_holds_back (void **state)
{
    (void) state;
    char out [64];
    size_t keep;
    //  Valid text passes through.
    const unsigned char ok [] = "h\xc3\xa9llo";
    assert_int_equal (kn_utf8_sanitize (ok, 6, out, &keep), 6);
    assert_memory_equal (out, ok, 6);
    assert_int_equal (keep, 0);
    //  A character cut at the end is held back for the next read.
    const unsigned char cut [] = "ab\xe2\x82";
    assert_int_equal (kn_utf8_sanitize (cut, 4, out, &keep), 2);
    assert_int_equal (keep, 2);
    //  Invalid bytes and NUL become U+FFFD.
    const unsigned char bad [] = { 'a', 0xff, 0, 'b', 0xc0, 0xaf };
    size_t n = kn_utf8_sanitize (bad, sizeof bad, out, &keep);
    assert_int_equal (n, 2 + 4 * 3);
    assert_memory_equal (out + 1, "\xef\xbf\xbd\xef\xbf\xbd", 6);
    //  Surrogates are not UTF-8.
    const unsigned char sur [] = { 0xed, 0xa0, 0x80 };
    n = kn_utf8_sanitize (sur, 3, out, &keep);
    assert_int_equal (n, 9);
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
        cmocka_unit_test (test_kn_utf8_sanitize_replaces_and_holds_back),
        cmocka_unit_test (test_kn_outfiles_mime_by_extension),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
