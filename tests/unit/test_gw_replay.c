/*  test_gw_replay - the replay buffer: whole cells in order, both caps,
    `since`, too-large cells, and selections that outlive an eviction. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "session/gw_check.h"
#include "server/gw_replay.h"

#define S_PARENT "{\"msg_id\":\"c\",\"msg_type\":\"execute_request\"}"

//  Add message msg_id of cell with this content text.
static int
s_add (gw_replay_t *r, const char *cell, const char *msg_id, const char *content)
{
    gw_replay_bytes_t buf = { "\x01\x02", 2 };
    gw_replay_msg_t m = {
        .cell = cell, .msg_id = msg_id, .msg_type = "stream",
        .topic = { "stream.stdout", 13 }, .parent = { S_PARENT, strlen (S_PARENT) },
        .metadata = { "{}", 2 }, .content = { content, strlen (content) },
        .buffers = &buf, .nbuffers = strcmp (msg_id, "with-buffer") == 0,
    };
    return gw_replay_add (r, &m);
}

//  The msg_ids a selection picked, joined with spaces.
static const char *
s_ids (const gw_replay_sel_t *sel)
{
    static char out [512];
    out [0] = 0;
    for (size_t i = 0; i < sel->n; i++)
        snprintf (out + strlen (out), sizeof out - strlen (out), "%s%s", i ? " " : "",
                  gw_replay_item_msg_id (sel->items [i]));
    return out;
}

static void
test_gw_replay_keeps_a_cell_in_order (void **state)
{
    (void) state;
    gw_replay_t *r = gw_replay_new (0, 0);
    assert_int_equal (s_add (r, "a", "a1", "{\"text\":\"1\"}"), 0);
    assert_int_equal (s_add (r, "b", "b1", "{\"text\":\"x\"}"), 0);
    assert_int_equal (s_add (r, "a", "with-buffer", "{\"text\":\"2\"}"), 0);
    gw_replay_sel_t sel;
    assert_int_equal (gw_replay_select (r, "a", false, &sel), 0);
    assert_string_equal (s_ids (&sel), "a1 with-buffer");
    size_t len = 0;
    const uint8_t *p = gw_replay_item_part (sel.items [1], GW_REPLAY_CONTENT, &len);
    assert_memory_equal (p, "{\"text\":\"2\"}", len);
    p = gw_replay_item_part (sel.items [1], GW_REPLAY_PARENT, &len);
    assert_int_equal (len, strlen (S_PARENT));
    p = gw_replay_item_part (sel.items [0], GW_REPLAY_TOPIC, &len);
    assert_memory_equal (p, "stream.stdout", len);
    assert_string_equal (gw_replay_item_type (sel.items [0]), "stream");
    assert_int_equal (gw_replay_item_nbuffers (sel.items [1]), 1);
    assert_memory_equal (gw_replay_item_buffer (sel.items [1], 0, &len), "\x01\x02", 2);
    gw_replay_sel_clear (&sel);
    assert_int_equal (gw_replay_select (r, "nope", false, &sel), -ENOENT);
    assert_int_equal (gw_replay_select (r, "a1", false, &sel), -ENOENT);   //  not a cell
    gw_replay_destroy (&r);
    assert_null (r);
    gw_replay_destroy (&r);
}

static void
test_gw_replay_since_a_message_or_a_cell (void **state)
{
    (void) state;
    gw_replay_t *r = gw_replay_new (0, 0);
    s_add (r, "a", "a1", "{}");
    s_add (r, "b", "b1", "{}");
    s_add (r, "a", "a2", "{}");                 //  late output of a, after b's
    s_add (r, "c", "c1", "{}");
    gw_replay_sel_t sel;
    assert_int_equal (gw_replay_select (r, "b1", true, &sel), 0);
    assert_string_equal (s_ids (&sel), "a2 c1");
    gw_replay_sel_clear (&sel);
    assert_int_equal (gw_replay_select (r, "b", true, &sel), 0);
    assert_string_equal (s_ids (&sel), "b1 a2 c1");
    gw_replay_sel_clear (&sel);
    assert_int_equal (gw_replay_select (r, "c1", true, &sel), 0);
    assert_int_equal (sel.n, 0);                //  nothing since the last one
    gw_replay_sel_clear (&sel);
    assert_int_equal (gw_replay_select (r, "zz", true, &sel), -ENOENT);
    gw_replay_destroy (&r);
}

static void
test_gw_replay_evicts_the_oldest_whole_cell (void **state)
{
    (void) state;
    gw_replay_t *r = gw_replay_new (2, 0);
    s_add (r, "a", "a1", "{}");
    s_add (r, "a", "a2", "{}");
    s_add (r, "b", "b1", "{}");
    s_add (r, "c", "c1", "{}");                 //  a third cell: a goes, all of it
    assert_int_equal (gw_replay_cells (r), 2);
    gw_replay_sel_t sel;
    assert_int_equal (gw_replay_select (r, "a", false, &sel), -ESTALE);
    assert_int_equal (gw_replay_select (r, "a1", true, &sel), -ENOENT);
    assert_int_equal (gw_replay_select (r, "b", true, &sel), 0);
    assert_string_equal (s_ids (&sel), "b1 c1");
    gw_replay_sel_clear (&sel);
    gw_replay_destroy (&r);
}

static void
test_gw_replay_byte_cap_and_too_large_cells (void **state)
{
    (void) state;
    char big [600];
    memset (big, 'x', sizeof big - 1);
    big [sizeof big - 1] = 0;
    size_t one = GW_REPLAY_ITEM_OVERHEAD + 2 + strlen ("stream") + 13 + 2 + sizeof big - 1;
    gw_replay_t *r = gw_replay_new (0, 2 * one + 2 * strlen (S_PARENT) + 10);
    assert_int_equal (s_add (r, "a", "a1", big), 0);
    assert_int_equal (s_add (r, "b", "b1", big), 0);
    assert_int_equal (s_add (r, "c", "c1", big), 0);    //  over the bytes: a goes
    assert_int_equal (gw_replay_cells (r), 2);
    assert_true (gw_replay_bytes (r) <= 2 * one + 2 * strlen (S_PARENT) + 10);
    gw_replay_sel_t sel;
    assert_int_equal (gw_replay_select (r, "a", false, &sel), -ESTALE);
    //  A cell that alone outgrows the cap keeps nothing, and says so.
    assert_int_equal (s_add (r, "c", "c2", big), 0);
    assert_int_equal (s_add (r, "c", "c3", big), -EFBIG);
    assert_int_equal (s_add (r, "c", "c4", "{}"), -EFBIG);
    assert_int_equal (gw_replay_select (r, "c", false, &sel), -EFBIG);
    assert_int_equal (gw_replay_select (r, "b", true, &sel), -ESTALE);   //  evicted for c2
    assert_int_equal (s_add (r, "d", "d1", "{}"), 0);
    assert_int_equal (gw_replay_select (r, "c", true, &sel), 0);
    assert_string_equal (s_ids (&sel), "d1");
    assert_int_equal (sel.nskipped, 1);
    assert_string_equal (sel.skipped [0], "c");
    gw_replay_sel_clear (&sel);
    gw_replay_destroy (&r);
}

static void
test_gw_replay_selection_outlives_eviction (void **state)
{
    (void) state;
    gw_replay_t *r = gw_replay_new (1, 0);
    s_add (r, "a", "a1", "{\"text\":\"kept\"}");
    gw_replay_sel_t sel;
    assert_int_equal (gw_replay_select (r, "a", false, &sel), 0);
    s_add (r, "b", "b1", "{}");                 //  evicts a while sel holds a1
    assert_int_equal (gw_replay_cells (r), 1);
    size_t len = 0;
    const uint8_t *p = gw_replay_item_part (sel.items [0], GW_REPLAY_CONTENT, &len);
    assert_memory_equal (p, "{\"text\":\"kept\"}", len);
    gw_replay_sel_clear (&sel);
    gw_replay_destroy (&r);
}

static void
test_gw_replay_refuses_bad_ids (void **state)
{
    (void) state;
    char longid [GW_REPLAY_ID_MAX + 2];
    memset (longid, 'i', sizeof longid - 1);
    longid [sizeof longid - 1] = 0;
    gw_replay_t *r = gw_replay_new (0, 0);
    assert_int_equal (s_add (r, "", "m", "{}"), -EINVAL);
    assert_int_equal (s_add (r, "a", "", "{}"), -EINVAL);
    assert_int_equal (s_add (r, longid, "m", "{}"), -EINVAL);
    assert_int_equal (gw_replay_cells (r), 0);
    gw_replay_destroy (&r);
}

//  The request's content, as gw_check sees it.
static int
s_check (const char *json)
{
    char why [256] = "";
    json_t *content = json_loads (json, 0, NULL);
    assert_non_null (content);
    int rc = gw_check_replay_request (content, why, sizeof why);
    assert_true (rc == 0 ? why [0] == 0 : why [0] != 0);
    json_decref (content);
    return rc;
}

static void
test_gw_replay_request_content_is_checked (void **state)
{
    (void) state;
    assert_int_equal (s_check ("{\"msg_id\": \"abc\"}"), 0);
    assert_int_equal (s_check ("{\"since\": \"abc\", \"other\": 1}"), 0);
    assert_int_equal (s_check ("{}"), -EINVAL);
    assert_int_equal (s_check ("{\"msg_id\": 7}"), -EINVAL);
    assert_int_equal (s_check ("{\"msg_id\": \"\"}"), -EINVAL);
    assert_int_equal (s_check ("{\"since\": null}"), -EINVAL);
    assert_int_equal (s_check ("{\"msg_id\": \"a\", \"since\": \"b\"}"), -EINVAL);
    char text [400];
    snprintf (text, sizeof text, "{\"msg_id\": \"%0257d\"}", 0);
    assert_int_equal (s_check (text), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_replay_keeps_a_cell_in_order),
        cmocka_unit_test (test_gw_replay_since_a_message_or_a_cell),
        cmocka_unit_test (test_gw_replay_evicts_the_oldest_whole_cell),
        cmocka_unit_test (test_gw_replay_byte_cap_and_too_large_cells),
        cmocka_unit_test (test_gw_replay_selection_outlives_eviction),
        cmocka_unit_test (test_gw_replay_refuses_bad_ids),
        cmocka_unit_test (test_gw_replay_request_content_is_checked),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
