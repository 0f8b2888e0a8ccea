/*  test_ch_msg - the channel envelope codec. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ch_msg.h"

static int
s_decode (const char *text, ch_msg_t **msg, char *err)
{
    return ch_msg_decode ((const uint8_t *) text, strlen (text), msg, err, 128);
}

static void
test_ch_msg_decodes_a_request (void **state)
{
    (void) state;
    ch_msg_t *msg = NULL;
    char err [128];
    int rc = s_decode ("{\"channel\":\"shell\",\"header\":{\"msg_id\":\"a\",\"msg_type\":"
                       "\"execute_request\"},\"content\":{\"code\":\"1\"},\"buffers\":2}", &msg, err);
    assert_int_equal (rc, 0);
    assert_int_equal (ch_msg_channel (msg), CH_SHELL);
    assert_string_equal (ch_msg_type (msg), "execute_request");
    assert_string_equal (ch_msg_id (msg), "a");
    assert_int_equal (json_object_size (ch_msg_parent (msg)), 0);
    assert_int_equal (ch_msg_nbuffers_expected (msg), 2);
    uint8_t *b = malloc (3);
    memcpy (b, "xyz", 3);
    assert_int_equal (ch_msg_add_buffer (msg, &b, 3), 0);
    assert_null (b);
    size_t len;
    assert_memory_equal (ch_msg_buffer (msg, 0, &len), "xyz", 3);
    ch_msg_destroy (&msg);
    assert_null (msg);
}

static void
test_ch_msg_rejects_bad_envelopes (void **state)
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
        ch_msg_t *msg = NULL;
        char err [128] = "";
        assert_int_equal (s_decode (bad [i], &msg, err), -EBADMSG);
        assert_null (msg);
        assert_true (strlen (err) > 0);
    }
}

static void
test_ch_msg_new_has_a_full_5_3_header (void **state)
{
    (void) state;
    json_t *parent = json_pack ("{s:s}", "msg_id", "p1");
    json_t *content = json_pack ("{s:s}", "execution_state", "busy");
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, "status", parent, &content, "sess");
    assert_null (content);
    json_t *h = ch_msg_header (msg);
    assert_string_equal (json_string_value (json_object_get (h, "version")), "5.3");
    assert_string_equal (json_string_value (json_object_get (h, "session")), "sess");
    assert_int_equal (strlen (json_string_value (json_object_get (h, "msg_id"))), 36);
    const char *date = json_string_value (json_object_get (h, "date"));
    assert_int_equal (strlen (date), 27);
    assert_int_equal (date [26], 'Z');
    assert_true (json_equal (ch_msg_parent (msg), parent));
    size_t len;
    char *text = ch_msg_encode (msg, &len);
    ch_msg_t *back = NULL;
    char err [128];
    assert_int_equal (ch_msg_decode ((uint8_t *) text, len, &back, err, sizeof err), 0);
    assert_true (json_equal (ch_msg_header (back), h));
    free (text);
    ch_msg_destroy (&back);
    ch_msg_destroy (&msg);
    json_decref (parent);
}

//  The id of the request a message answers: "" when the parent has none,
//  or one that is not a string.
static void
test_ch_msg_parent_id_reads_the_parent_header (void **state)
{
    (void) state;
    json_t *parents [] = { json_pack ("{s:s}", "msg_id", "p1"), NULL, json_pack ("{s:i}",
                           "msg_id", 7), json_pack ("{s:s}", "msg_type", "execute_request") };
    const char *want [] = { "p1", "", "", "" };
    for (size_t i = 0; i < 4; i++) {
        ch_msg_t *msg = ch_msg_new (CH_IOPUB, "status", parents [i], NULL, "sess");
        assert_string_equal (ch_msg_parent_id (msg), want [i]);
        ch_msg_destroy (&msg);
        json_decref (parents [i]);
    }
}

static void
test_ch_msg_fresh_ids_differ (void **state)
{
    (void) state;
    char a [37], b [37];
    ch_uuid4 (a);
    ch_uuid4 (b);
    assert_string_not_equal (a, b);
    assert_int_equal (a [14], '4');
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_msg_decodes_a_request),
        cmocka_unit_test (test_ch_msg_rejects_bad_envelopes),
        cmocka_unit_test (test_ch_msg_new_has_a_full_5_3_header),
        cmocka_unit_test (test_ch_msg_parent_id_reads_the_parent_header),
        cmocka_unit_test (test_ch_msg_fresh_ids_differ),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
