/*  test_gw_reqs - the table of outstanding requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "session/gw_reqs.h"

static ch_msg_t *
request (ch_channel_t ch, const char *type, const char *msg_id, json_t *content)
{
    json_t *header = json_pack ("{s:s, s:s}", "msg_id", msg_id, "msg_type", type);
    if (!content)
        content = json_object ();
    return ch_msg_from_parts (ch, &header, NULL, NULL, &content);
}

static gw_req_t *
add (gw_reqs_t *reqs, ch_channel_t ch, const char *type, const char *msg_id, json_t *content)
{
    ch_msg_t *msg = request (ch, type, msg_id, content);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, "client", 6);
    gw_req_t *req = gw_reqs_add (reqs, msg, &ids);
    assert_null (ids);
    ch_msg_destroy (&msg);
    return req;
}

static void
test_gw_reqs_records_what_routing_needs (void **state)
{
    (void) state;
    gw_reqs_t *reqs = gw_reqs_new ();
    gw_req_t *req = add (reqs, CH_SHELL, "execute_request", "a",
                         json_pack ("{s:s, s:b}", "code", "1", "allow_stdin", 1));
    assert_string_equal (req->msg_id, "a");
    assert_string_equal (req->reply_type, "execute_reply");
    assert_true (req->execute && req->allow_stdin && !req->own && !req->sent);
    assert_string_equal (json_string_value (json_object_get (req->header, "msg_id")), "a");
    gw_req_t *comm = add (reqs, CH_SHELL, "comm_msg", "b", NULL);
    assert_string_equal (comm->reply_type, "");
    ch_msg_t *msg = request (CH_CONTROL, "shutdown_request", "c",
                             json_pack ("{s:b}", "restart", 1));
    gw_req_t *own = gw_reqs_add (reqs, msg, NULL);
    assert_true (own->own && own->restart);
    assert_int_equal (gw_reqs_size (reqs), 3);
    ch_msg_destroy (&msg);
    gw_reqs_destroy (&reqs);
    assert_null (reqs);
}

static void
test_gw_reqs_finds_oldest_and_running (void **state)
{
    (void) state;
    gw_reqs_t *reqs = gw_reqs_new ();
    gw_req_t *a = add (reqs, CH_SHELL, "kernel_info_request", "a", NULL);
    gw_req_t *b = add (reqs, CH_SHELL, "execute_request", "b", NULL);
    gw_req_t *c = add (reqs, CH_SHELL, "execute_request", "c", NULL);
    assert_ptr_equal (gw_reqs_oldest (reqs, false), a);
    assert_null (gw_reqs_oldest (reqs, true));
    assert_null (gw_reqs_running_cell (reqs));
    b->sent = c->sent = true;
    assert_ptr_equal (gw_reqs_oldest (reqs, true), b);
    assert_ptr_equal (gw_reqs_running_cell (reqs), b);
    b->replied = true;
    assert_ptr_equal (gw_reqs_running_cell (reqs), c);
    assert_ptr_equal (gw_reqs_find (reqs, "c"), c);
    assert_null (gw_reqs_find (reqs, "zzz"));
    gw_reqs_destroy (&reqs);
}

static void
test_gw_reqs_remembers_recent_ones_for_late_output (void **state)
{
    (void) state;
    gw_reqs_t *reqs = gw_reqs_new ();
    gw_req_t *first = add (reqs, CH_SHELL, "execute_request", "first", NULL);
    gw_reqs_retire (reqs, first);
    assert_null (gw_reqs_find (reqs, "first"));
    assert_ptr_equal (gw_reqs_find_any (reqs, "first"), first);
    assert_int_equal (gw_reqs_size (reqs), 0);
    for (int i = 0; i < GW_REQS_RECENT; i++) {
        char id [16];
        snprintf (id, sizeof id, "r%d", i);
        gw_reqs_retire (reqs, add (reqs, CH_SHELL, "execute_request", id, NULL));
    }
    assert_null (gw_reqs_find_any (reqs, "first"));     //  pushed out
    assert_non_null (gw_reqs_find_any (reqs, "r0"));
    gw_req_t *gone = add (reqs, CH_CONTROL, "interrupt_request", "x", NULL);
    gw_reqs_remove (reqs, gone);
    assert_null (gw_reqs_find_any (reqs, "x"));
    gw_reqs_destroy (&reqs);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_reqs_records_what_routing_needs),
        cmocka_unit_test (test_gw_reqs_finds_oldest_and_running),
        cmocka_unit_test (test_gw_reqs_remembers_recent_ones_for_late_output),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
