/*  test_ch_jfast - the fast JSON codec, case by case against jansson.

    ch_jfast_parse may give up on any text (its caller then asks jansson),
    but what it accepts jansson must accept with an equal value, members in
    the same order; ch_jfast_dump must write json_dumps's bytes exactly.
    Every case is compared with jansson; the cases jansson refuses must be
    refused, and the usual ones must not be given up on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_jfast.h"
#include "ch_jscan.h"

static const size_t s_flag_sets [] = {
    JSON_COMPACT, JSON_COMPACT | JSON_ENSURE_ASCII, JSON_COMPACT | JSON_ENCODE_ANY,
    JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY, 0, JSON_ENSURE_ASCII,
    JSON_COMPACT | JSON_REAL_PRECISION (3), JSON_INDENT (2), JSON_SORT_KEYS,
};

//  Our dump of v is jansson's, for every flag set.
static void
s_same_dumps (const json_t *v, const char *what)
{
    for (size_t i = 0; i < sizeof s_flag_sets / sizeof s_flag_sets [0]; i++) {
        size_t len = 0;
        char *ours = ch_jfast_dump (v, s_flag_sets [i], &len);
        char *theirs = json_dumps (v, s_flag_sets [i]);
        if (!ours != !theirs || (ours && (strcmp (ours, theirs) != 0 || len != strlen (ours))))
            fail_msg ("%s, flags %zx: ours %s, jansson %s", what, s_flag_sets [i],
                      ours ? ours : "NULL", theirs ? theirs : "NULL");
        free (ours);
        free (theirs);
    }
}

//  Parse text with both: 1 when we accepted it, 0 when we gave up; fails
//  the test when we accept what jansson refuses or read it otherwise.
static int
s_compare (const char *text, size_t len, size_t flags)
{
    json_t *ours = ch_jfast_parse ((const uint8_t *) text, len, flags);
    json_t *theirs = json_loadb (text, len, flags, NULL);
    if (ours) {
        char *a = json_dumps (ours, JSON_ENCODE_ANY), *b = json_dumps (theirs, JSON_ENCODE_ANY);
        if (!theirs || !json_equal (ours, theirs) || !a || !b || strcmp (a, b) != 0)
            fail_msg ("%s: ours %s, jansson %s", text, a ? a : "?", b ? b : "refused");
        free (a);
        free (b);
    }
    if (theirs)
        s_same_dumps (theirs, text);
    int accepted = ours != NULL;
    json_decref (ours);
    json_decref (theirs);
    return accepted;
}

//  Accepted by both, with the same value.
static void
s_good (const char *text)
{
    if (!s_compare (text, strlen (text), JSON_DECODE_ANY))
        fail_msg ("gave up on %s", text);
    json_t *theirs = json_loadb (text, strlen (text), JSON_DECODE_ANY, NULL);
    assert_non_null (theirs);
    json_decref (theirs);
}

//  Refused by both.
static void
s_bad (const char *text, size_t len, size_t flags)
{
    assert_int_equal (s_compare (text, len, flags), 0);
    json_t *theirs = json_loadb (text, len, flags, NULL);
    if (theirs)
        fail_msg ("jansson accepts %s", text);
}

static void
test_ch_jfast_strings_and_escapes (void **state)
{
    (void) state;
    const char *good [] = {
        "\"\"", "\"abc\"", "\"a\\nb\\t\\\"\\\\\\/\\b\\f\\r\"", "\"\\u00e9\\u20AC\\u0041\"",
        "\"\\ud83d\\ude00\"", "\"x\\uD834\\uDD1Ey\"", "\"\\udbff\\udfff\"", "\"\\u0001\\u001f\"",
        "\"\\u007f\\u0080\\u07ff\\u0800\\uffff\"", "\"\x7f\"", "\"\xc2\x80\xdf\xbf\"",
        "\"\xe0\xa0\x80\xef\xbf\xbf\xed\x9f\xbf\xee\x80\x80\"", "\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"",
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"</script>\"", "\"a\\\\\\\\\"",
        "{\"k\\u00e9y\":\"v\",\"\\\"\":1,\"\":2}", "\"\\n\"",
    };
    for (size_t i = 0; i < sizeof good / sizeof good [0]; i++)
        s_good (good [i]);
    const char *bad [] = {
        "\"\\u0000\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"",
        "\"\\udc00\\ud800\"", "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"a\x01\"", "\"a\nb\"",
        "\"abc", "\"\xc0\x80\"", "\"\xc1\xbf\"", "\"\xe0\x80\x80\"", "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\x80\"", "\"\xc3\"", "\"\xe2\x82\"",
        "\"\xff\"", "\"\xf0\x80\x80\x80\"", "\"\\", "{\"a\\u0000\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        s_bad (bad [i], strlen (bad [i]), JSON_DECODE_ANY);
    //  A raw NUL inside a string is a control character.
    s_bad ("\"a\0b\"", 5, JSON_DECODE_ANY);
}

static void
test_ch_jfast_numbers (void **state)
{
    (void) state;
    const char *good [] = {
        "0", "-0", "7", "-7", "9223372036854775807", "-9223372036854775808", "0.5", "-0.0",
        "1e5", "1E5", "1e+5", "1e-5", "2.5E-3", "123456789012345678901234567890.0", "1e-400",
        "4.9e-324", "1.7976931348623157e308", "0.1", "3.141592653589793238462643383279",
        "0.00000000000000000000000000000000000000000000000000000000000000000000000001",
        "[1,-2,3.5,-4e2,1e400]", "1.0", "100", "1e0",
    };
    for (size_t i = 0; i < sizeof good / sizeof good [0]; i++)
        if (strstr (good [i], "1e400"))
            s_bad (good [i], strlen (good [i]), JSON_DECODE_ANY);     //  real overflow
        else
            s_good (good [i]);
    const char *bad [] = {
        "9223372036854775808", "-9223372036854775809", "123456789012345678901234567890",
        "1e400", "-1e400", "01", "-", "1.", "1e", ".5", "+1", "-01", "0x10", "1.e5", "Infinity",
        "NaN", "-Infinity", "1e+", "00",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        s_bad (bad [i], strlen (bad [i]), JSON_DECODE_ANY);
}

static void
test_ch_jfast_containers_and_text_around_them (void **state)
{
    (void) state;
    const char *good [] = {
        "{}", "[]", "[{}]", "{\"a\":[]}", " \t\r\n{ \"a\" : 1 , \"b\" :[ true,false , null ] }\n ",
        "{\"z\":1,\"a\":2,\"m\":{\"y\":1,\"b\":2}}", "[[],[[]],{}]", "true", "false", "null",
        "\"s\"", "[\"\\u00e9\",{\"\\ud83d\\ude00\":[1.5]}]",
    };
    for (size_t i = 0; i < sizeof good / sizeof good [0]; i++)
        s_good (good [i]);
    const char *bad [] = {
        "", " ", "[1,]", "{\"a\":1,}", "{\"a\"1}", "{a:1}", "[1 2]", "{\"a\":}", "[", "{",
        "[1]x", "{} {}", "[1] ,", "tru", "nul", "truex", "[true false]", "{\"a\" \"b\"}", "]",
        "{1:2}", "[1]\x01",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        s_bad (bad [i], strlen (bad [i]), JSON_DECODE_ANY);
    //  Without JSON_DECODE_ANY only an object or array; NUL after the value.
    s_bad ("1", 1, 0);
    s_bad ("\"s\"", 3, JSON_REJECT_DUPLICATES);
    s_bad ("{}\0", 3, 0);
    assert_int_equal (s_compare ("[1]", 3, 0), 1);
    //  Flags it does not know: it gives up; jansson decides.
    assert_null (ch_jfast_parse ((const uint8_t *) "[1]", 3, JSON_DISABLE_EOF_CHECK));
    assert_null (ch_jfast_parse ((const uint8_t *) "[1]", 3, JSON_ALLOW_NUL));
}

static void
test_ch_jfast_duplicates_are_left_to_jansson (void **state)
{
    (void) state;
    const char *dup = "{\"k\":1,\"a\":0,\"k\":2}";
    assert_null (ch_jfast_parse ((const uint8_t *) dup, strlen (dup), 0));
    //  Without JSON_REJECT_DUPLICATES jansson keeps the last; with it, it refuses.
    json_t *v = ch_jfast_loadb ((const uint8_t *) dup, strlen (dup), 0, NULL);
    assert_int_equal (json_integer_value (json_object_get (v, "k")), 2);
    json_decref (v);
    json_error_t err;
    assert_null (ch_jfast_loadb ((const uint8_t *) dup, strlen (dup), JSON_REJECT_DUPLICATES,
                                 &err));
    assert_non_null (strstr (err.text, "duplicate"));
    //  The same key spelled with an escape is the same key.
    s_bad ("{\"a\":1,\"\\u0061\":2}", 18, JSON_REJECT_DUPLICATES);
}

//  n arrays deep around a number.
static char *
s_nested (int n)
{
    char *t = malloc ((size_t) n * 2 + 2);
    memset (t, '[', (size_t) n);
    t [n] = '1';
    memset (t + n + 1, ']', (size_t) n);
    t [2 * n + 1] = 0;
    return t;
}

static void
test_ch_jfast_depth (void **state)
{
    (void) state;
    char *ok = s_nested (CH_JSCAN_DEPTH), *deep = s_nested (CH_JSCAN_DEPTH + 1);
    s_good (ok);
    //  Deeper than ch_jscan allows: given up on, yet jansson reads it.
    assert_int_equal (s_compare (deep, strlen (deep), 0), 0);
    json_t *v = ch_jfast_loadb ((const uint8_t *) deep, strlen (deep), 0, NULL);
    assert_non_null (v);
    json_decref (v);
    free (ok);
    free (deep);
}

//  What a _nocheck caller can put in: invalid UTF-8 in strings and keys,
//  a raw NUL; jansson's dump refuses (or half-writes a key), and so do we.
static void
test_ch_jfast_dump_of_what_jansson_did_not_parse (void **state)
{
    (void) state;
    const char *raw [] = { "ok", "\xff", "a\xc3", "\xed\xa0\x80", "a\0b", "\xe2\x82\xac", "\x01" };
    const size_t len [] = { 2, 1, 2, 3, 3, 3, 1 };
    for (size_t i = 0; i < sizeof raw / sizeof raw [0]; i++) {
        json_t *s = json_stringn_nocheck (raw [i], len [i]), *o = json_object ();
        json_object_setn_new_nocheck (o, raw [i], len [i], json_incref (s));
        json_t *a = json_pack ("[O,O,f,I,b,n]", s, o, 0.1, (json_int_t) -5, 1);
        s_same_dumps (s, raw [i]);
        s_same_dumps (o, raw [i]);
        s_same_dumps (a, raw [i]);
        json_decref (s);
        json_decref (o);
        json_decref (a);
    }
    //  Reals in jansson's own words, and a value that contains itself.
    const double reals [] = { 0.0, -0.0, 1.0, 0.1, 1e300, -2.5e-300, 123456789.0, 1.0 / 3 };
    for (size_t i = 0; i < sizeof reals / sizeof reals [0]; i++) {
        json_t *r = json_pack ("[f]", reals [i]);
        s_same_dumps (r, "real");
        json_decref (r);
    }
    json_t *a = json_array (), *b = json_array ();
    json_array_append (a, b);
    json_array_append (b, a);
    assert_null (ch_jfast_dump (a, JSON_COMPACT, NULL));
    json_array_clear (b);
    json_decref (a);
    json_decref (b);
}

//  A 1 MiB cell: one copy each way, the same value and bytes as jansson's.
static void
test_ch_jfast_a_long_string (void **state)
{
    (void) state;
    size_t n = 1 << 20;
    char *text = malloc (n + 64);
    strcpy (text, "{\"code\":\"x = '");
    size_t at = strlen (text);
    for (size_t k = 0; k < n; k++)
        text [at + k] = k % 4096 == 0 ? '\n' : k % 777 == 0 ? '"' : (char) ('a' + k % 26);
    for (size_t k = 0; k < n; k++)
        if (text [at + k] == '\n' || text [at + k] == '"')
            text [at + k] = 'Z';                //  no raw control or quote: escape a few
    memcpy (text + at + 100, "\\n\\\"\\u00e9\xc3\xa9", 12);
    strcpy (text + at + n, "'\",\"silent\":false}");
    assert_int_equal (s_compare (text, strlen (text), 0), 1);
    free (text);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_jfast_strings_and_escapes),
        cmocka_unit_test (test_ch_jfast_numbers),
        cmocka_unit_test (test_ch_jfast_containers_and_text_around_them),
        cmocka_unit_test (test_ch_jfast_duplicates_are_left_to_jansson),
        cmocka_unit_test (test_ch_jfast_depth),
        cmocka_unit_test (test_ch_jfast_dump_of_what_jansson_did_not_parse),
        cmocka_unit_test (test_ch_jfast_a_long_string),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
