/*  test_kn_msg - the channel envelope codec, and the UTF-8 and MIME helpers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kn_capture.h"
#include "kn_msg.h"
#include "kn_outfiles.h"

static int
s_decode (const char *text, kn_msg_t **msg, char *err)
{
    return kn_msg_decode ((const uint8_t *) text, strlen (text), msg, err, 128);
}

static void
test_kn_msg_decodes_a_request (void **state)
{
    (void) state;
    kn_msg_t *msg = NULL;
    char err [128];
    int rc = s_decode ("{\"channel\":\"shell\",\"header\":{\"msg_id\":\"a\",\"msg_type\":"
                       "\"execute_request\"},\"content\":{\"code\":\"1\"},\"buffers\":2}", &msg, err);
    assert_int_equal (rc, 0);
    assert_int_equal (kn_msg_channel (msg), KN_CH_SHELL);
    assert_string_equal (kn_msg_type (msg), "execute_request");
    assert_string_equal (kn_msg_id (msg), "a");
    assert_int_equal (json_object_size (kn_msg_parent (msg)), 0);
    assert_int_equal (kn_msg_nbuffers_expected (msg), 2);
    uint8_t *b = malloc (3);
    memcpy (b, "xyz", 3);
    assert_int_equal (kn_msg_add_buffer (msg, &b, 3), 0);
    assert_null (b);
    size_t len;
    assert_memory_equal (kn_msg_buffer (msg, 0, &len), "xyz", 3);
    kn_msg_destroy (&msg);
    assert_null (msg);
}

static void
test_kn_msg_rejects_bad_envelopes (void **state)
{
    (void) state;
    const char *bad [] = {
        "not json", "[1,2]", "{\"channel\":\"nope\",\"header\":{\"msg_type\":\"x\"},\"content\":{}}",
        "{\"channel\":\"shell\",\"content\":{}}",
        "{\"channel\":\"shell\",\"header\":{\"msg_type\":\"\"},\"content\":{}}",
        "{\"channel\":\"shell\",\"header\":{\"msg_type\":\"x\"},\"content\":[]}",
        "{\"channel\":\"shell\",\"header\":{\"msg_type\":\"x\"},\"content\":{},\"buffers\":17}",
        "{\"channel\":\"shell\",\"header\":{\"msg_type\":\"x\"},\"content\":{},\"buffers\":-1}",
        "{\"channel\":\"shell\",\"header\":{\"msg_type\":\"x\"},\"content\":{},\"metadata\":3}",
        "{\"channel\":\"shell\",\"channel\":\"stdin\",\"header\":{\"msg_type\":\"x\"},\"content\":{}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        kn_msg_t *msg = NULL;
        char err [128] = "";
        assert_int_equal (s_decode (bad [i], &msg, err), -EBADMSG);
        assert_null (msg);
        assert_true (strlen (err) > 0);
    }
}

static void
test_kn_msg_new_has_a_full_5_3_header (void **state)
{
    (void) state;
    json_t *parent = json_pack ("{s:s}", "msg_id", "p1");
    json_t *content = json_pack ("{s:s}", "execution_state", "busy");
    kn_msg_t *msg = kn_msg_new (KN_CH_IOPUB, "status", parent, &content, "sess");
    assert_null (content);
    json_t *h = kn_msg_header (msg);
    assert_string_equal (json_string_value (json_object_get (h, "version")), "5.3");
    assert_string_equal (json_string_value (json_object_get (h, "session")), "sess");
    assert_int_equal (strlen (json_string_value (json_object_get (h, "msg_id"))), 36);
    const char *date = json_string_value (json_object_get (h, "date"));
    assert_int_equal (strlen (date), 27);
    assert_int_equal (date [26], 'Z');
    assert_true (json_equal (kn_msg_parent (msg), parent));
    size_t len;
    char *text = kn_msg_encode (msg, &len);
    kn_msg_t *back = NULL;
    char err [128];
    assert_int_equal (kn_msg_decode ((uint8_t *) text, len, &back, err, sizeof err), 0);
    assert_true (json_equal (kn_msg_header (back), h));
    free (text);
    kn_msg_destroy (&back);
    kn_msg_destroy (&msg);
    json_decref (parent);
}

static void
test_kn_msg_fresh_ids_differ (void **state)
{
    (void) state;
    char a [37], b [37];
    kn_uuid4 (a);
    kn_uuid4 (b);
    assert_string_not_equal (a, b);
    assert_int_equal (a [14], '4');
}

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
    assert_string_equal (kn_outfiles_mime ("plot.PNG"), "image/png");
    assert_string_equal (kn_outfiles_mime ("data.csv"), "text/csv");
    assert_string_equal (kn_outfiles_mime ("noext"), "application/octet-stream");
    assert_string_equal (kn_outfiles_mime (".bashrc"), "application/octet-stream");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_kn_msg_decodes_a_request),
        cmocka_unit_test (test_kn_msg_rejects_bad_envelopes),
        cmocka_unit_test (test_kn_msg_new_has_a_full_5_3_header),
        cmocka_unit_test (test_kn_msg_fresh_ids_differ),
        cmocka_unit_test (test_kn_utf8_sanitize_replaces_and_holds_back),
        cmocka_unit_test (test_kn_outfiles_mime_by_extension),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
