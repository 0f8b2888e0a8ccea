/*  test_ch_jscan - validating JSON without parsing it, and the lazy decode
    that uses it (ch_msg_decode_lazy). The gateway relies on both being at
    least as strict as jansson, which they replace for large stream texts:
    every verdict is compared with jansson's, on crafted and random input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_jscan.h"
#include "ch_msg.h"

//  Our verdict on the whole of text as one string, and jansson's.
static int
s_ours (const uint8_t *text, size_t len)
{
    size_t end = 0;
    return ch_jscan_string (text, len, 0, &end) == 0 && end == len;
}

static int
s_jansson (const uint8_t *text, size_t len)
{
    json_t *v = json_loadb ((const char *) text, len, JSON_DECODE_ANY, NULL);
    int ok = json_is_string (v);
    json_decref (v);
    return ok;
}

static void
test_ch_jscan_strings_as_jansson_judges_them (void **state)
{
    (void) state;
    const char *cases [] = {
        "\"\"", "\"abc\"", "\"a\\nb\\t\\\"\\\\\\/\\b\\f\\r\"", "\"\\u00e9\\u20AC\"",
        "\"\\ud83d\\ude00\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\x7f\"",
        "\"\\u0000\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"",
        "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"a\x01\"", "\"a\nb\"", "\"abc",
        "\"\xc0\x80\"", "\"\xc1\xbf\"", "\"\xe0\x80\x80\"", "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\x80\"", "\"\xc3\"",
        "\"\xe2\x82\"", "\"\xff\"", "\"a\"b", "x\"\"",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        const uint8_t *t = (const uint8_t *) cases [i];
        size_t len = strlen (cases [i]);
        if (s_ours (t, len) != s_jansson (t, len))
            fail_msg ("case %zu: ours %d, jansson %d", i, s_ours (t, len), s_jansson (t, len));
    }
}

//  Random strings over the bytes that matter, quoted: the same verdicts.
static void
test_ch_jscan_random_strings_agree_with_jansson (void **state)
{
    (void) state;
    static const char alphabet [] = "a\"\\u0dDcC8fF9/bnrtx\x01\x1f\x7f\x80\xbf\xc2\xc3\xdf"
                                    "\xe0\xe2\xed\xef\xf0\xf4\xf5\xa0\x9f\x90\x8f";
    uint8_t buf [40];
    unsigned seed = 7, accepted = 0;
    for (int n = 0; n < 300000; n++) {
        size_t len = 2 + (size_t) rand_r (&seed) % 30;
        buf [0] = '"';
        for (size_t k = 1; k < len - 1; k++)
            buf [k] = (uint8_t) alphabet [rand_r (&seed) % (sizeof alphabet - 1)];
        buf [len - 1] = '"';
        int ours = s_ours (buf, len), theirs = s_jansson (buf, len);
        if (ours != theirs) {
            char hex [128] = "";
            for (size_t k = 0; k < len && k < 40; k++)
                snprintf (hex + strlen (hex), sizeof hex - strlen (hex), "%02x", buf [k]);
            fail_msg ("%s: ours %d, jansson %d", hex, ours, theirs);
        }
        accepted += (unsigned) ours;
    }
    assert_true (accepted > 1000);           //  both verdicts were exercised
}

static void
test_ch_jscan_values (void **state)
{
    (void) state;
    const char *good [] = { "0", "-1.5e+3", "true", "null", "[]", "{}", "[1,\"a\",{}]",
                            "{\"a\":[1,{\"b\":null}],\"c\":false}", "{ \"a\" : 1 , \"b\":2 }" };
    const char *bad [] = { "01", "-", "1.", "1e", "tru", "[1,]", "{\"a\":1,}", "{\"a\"1}",
                           "{a:1}", "[1 2]", "{\"a\":}", "[", "{", "+1", ".5" };
    for (size_t i = 0; i < sizeof good / sizeof good [0]; i++) {
        size_t end = 0;
        assert_int_equal (ch_jscan_value ((const uint8_t *) good [i], strlen (good [i]), 0,
                                          &end), 0);
        assert_int_equal (end, strlen (good [i]));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        size_t end = 0;
        int rc = ch_jscan_value ((const uint8_t *) bad [i], strlen (bad [i]), 0, &end);
        if (rc == 0 && end == strlen (bad [i]))
            fail_msg ("accepted %s", bad [i]);
    }
    char deep [200];
    memset (deep, '[', 100);
    memset (deep + 100, ']', 100);
    size_t end;
    assert_int_equal (ch_jscan_value ((const uint8_t *) deep, 200, 0, &end), -EBADMSG);
}

#define S_HEAD "{\"channel\":\"iopub\",\"header\":{\"msg_id\":\"m\",\"msg_type\":\"stream\"}," \
               "\"parent_header\":{\"msg_id\":\"p\"},\"metadata\":{},"

static void
test_ch_msg_decode_lazy_keeps_a_stream_text (void **state)
{
    (void) state;
    const char *frame = S_HEAD "\"content\":{\"text\":\"a\\nb\\u00e9\",\"name\":\"stdout\"},"
                        "\"buffers\":0}";
    ch_msg_t *msg = NULL;
    char err [128];
    assert_int_equal (ch_msg_decode_lazy ((const uint8_t *) frame, strlen (frame), 1, &msg,
                                          err, sizeof err), 0);
    size_t len = 0;
    const uint8_t *raw = ch_msg_raw_content (msg, &len);
    const char *want = "{\"text\":\"a\\nb\\u00e9\",\"name\":\"stdout\"}";
    assert_non_null (raw);
    assert_int_equal (len, strlen (want));
    assert_memory_equal (raw, want, len);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (msg), "name")),
                         "stdout");
    assert_null (json_object_get (ch_msg_content (msg), "text"));
    assert_string_equal (ch_msg_type (msg), "stream");
    assert_int_equal (ch_msg_channel (msg), CH_IOPUB);
    assert_string_equal (json_string_value (json_object_get (ch_msg_parent (msg), "msg_id")),
                         "p");
    //  Encoded again, the text is all there.
    size_t elen = 0;
    char *text = ch_msg_encode (msg, &elen);
    assert_non_null (strstr (text, "\"text\":\"a\\nb\\u00E9\""));
    free (text);
    uint8_t *taken = ch_msg_take_raw_content (msg, &len);
    assert_non_null (taken);
    assert_null (ch_msg_raw_content (msg, &len));
    free (taken);
    ch_msg_destroy (&msg);
    //  Under the size threshold: parsed as usual.
    assert_int_equal (ch_msg_decode_lazy ((const uint8_t *) frame, strlen (frame), 100000,
                                          &msg, err, sizeof err), 0);
    assert_null (ch_msg_raw_content (msg, &len));
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (msg), "text")),
                         "a\nb\xc3\xa9");
    ch_msg_destroy (&msg);
}

//  Every frame: the lazy decode succeeds exactly when the full one does,
//  and then carries the same content.
static void
test_ch_msg_decode_lazy_agrees_with_the_parser (void **state)
{
    (void) state;
    const char *frames [] = {
        S_HEAD "\"content\":{\"name\":\"stderr\",\"text\":\"x\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"\\ud800\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"\\u0000\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"\xc0\x80\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\",\"text\":\"y\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\",\"extra\":1}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},\"content\":{}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},\"other\":1}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"}} trailing",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},}",
        S_HEAD "\"content\":{\"name\":\"std\\u006fut\",\"text\":\"x\"}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":1}}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},\"buffers\":\"2\"}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},\"buffers\":17}",
        S_HEAD "\"content\":{\"name\":\"stdout\",\"text\":\"x\"},\"buffers\":1}",
        "{\"channel\":\"iopub\",\"header\":{\"msg_type\":\"display_data\"},"
        "\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
        "{\"channel\":\"iopub\",\"header\":{\"msg_type\":\"stream\",\"msg_type\":\"stream\"},"
        "\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
        "{\"channel\":\"iopub\",\"header\":[],\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
        "{\"channel\":\"nope\",\"header\":{\"msg_type\":\"stream\"},"
        "\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
        "{\"header\":{\"msg_type\":\"stream\"},\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
        "{\"channel\":\"iopub\",\"header\":{\"msg_type\":\"stream\"},\"parent_header\":5,"
        "\"content\":{\"name\":\"stdout\",\"text\":\"x\"}}",
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames [0]; i++) {
        const uint8_t *f = (const uint8_t *) frames [i];
        size_t len = strlen (frames [i]);
        ch_msg_t *lazy = NULL, *full = NULL;
        char e1 [128] = "", e2 [128] = "";
        int r1 = ch_msg_decode_lazy (f, len, 1, &lazy, e1, sizeof e1);
        int r2 = ch_msg_decode (f, len, &full, e2, sizeof e2);
        if (r1 != r2)
            fail_msg ("frame %zu: lazy %d (%s), full %d (%s)", i, r1, e1, r2, e2);
        if (r1 == 0) {
            size_t rlen = 0;
            const uint8_t *raw = ch_msg_raw_content (lazy, &rlen);
            json_t *c = raw ? json_loadb ((const char *) raw, rlen, 0, NULL)
                            : json_incref (ch_msg_content (lazy));
            if (!json_equal (c, ch_msg_content (full)))
                fail_msg ("frame %zu: contents differ", i);
            json_decref (c);
            assert_int_equal (ch_msg_nbuffers_expected (lazy), ch_msg_nbuffers_expected (full));
        }
        ch_msg_destroy (&lazy);
        ch_msg_destroy (&full);
    }
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_jscan_strings_as_jansson_judges_them),
        cmocka_unit_test (test_ch_jscan_random_strings_agree_with_jansson),
        cmocka_unit_test (test_ch_jscan_values),
        cmocka_unit_test (test_ch_msg_decode_lazy_keeps_a_stream_text),
        cmocka_unit_test (test_ch_msg_decode_lazy_agrees_with_the_parser),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
