/*  test_gw_session_hostile - the session with a kernel that breaks the
    channel protocol: each hostile output ends the kernel, never the session.

    The same mock backend, scripted kernel and client as test_gw_session.c
    (tests/unit/tu_session.h).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/gw_log.h"
#include "session/gw_session.h"
#include "ch_frame.h"
#include "ch_msg.h"
#include "tu_session.h"

//  --------------------------------------------------------------------------
//  Tests.

//  Hostile output: each ends the kernel (kill), never the session.
static void
s_hostile (tu_session_t *f, void (*misbehave) (tu_session_t *, const json_t *))
{
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-h", "x");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-h");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    misbehave (f, h);
    tu_session_pump (f, 100);
    assert_int_equal (f->mock.kills, 1);
    tu_session_seen_t *err = tu_session_find_seen (f, "error", 0);
    assert_non_null (err);
    assert_non_null (strstr (json_string_value (json_object_get (err->content, "evalue")),
                             "broke the channel protocol"));
    assert_non_null (tu_session_find_seen (f, "execute_reply", 0));
    assert_false (gw_session_finished (f->session));
    assert_int_equal (f->mock.starts, 2);       //  restarted
    ch_msg_destroy (&req);
    json_decref (h);
}

static void
s_oversize (tu_session_t *f, const json_t *h)
{
    (void) h;
    uint8_t hdr [4] = { 0xff, 0xff, 0xff, 0xff };
    tu_session_kernel_send_raw (f, hdr, 4);
}

static void
s_garbage (tu_session_t *f, const json_t *h)
{
    (void) h;
    uint8_t frame [] = { 0, 0, 0, 5, 'n', 'o', 'p', 'e', '{' };
    tu_session_kernel_send_raw (f, frame, sizeof frame);
}

static void
s_bogus_type (tu_session_t *f, const json_t *h)
{
    tu_session_kernel_send (f, CH_IOPUB, "bogus_type", h, NULL);
}

static void
s_unknown_parent (tu_session_t *f, const json_t *h)
{
    (void) h;
    json_t *parent = json_pack ("{s:s}", "msg_id", "never-sent");
    tu_session_kernel_send (f, CH_SHELL, "execute_reply", parent,
                            json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    json_decref (parent);
}

static void
s_bad_content (tu_session_t *f, const json_t *h)
{
    tu_session_kernel_send (f, CH_IOPUB, "stream", h, json_pack ("{s:s}", "name", "stdout"));
}

//  A raw stream text (docs/channel.md): content {"name": name}, and nbuf
//  buffer frames of text.
static void
s_send_raw_text (tu_session_t *f, const json_t *h, const char *name, const void *text,
                 size_t len, int nbuf)
{
    json_t *content = json_pack ("{s:s}", "name", name);
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, "stream", h, &content, "kernel-session");
    for (int i = 0; i < nbuf; i++) {
        uint8_t *copy = malloc (len);
        memcpy (copy, text, len);
        ch_msg_add_buffer (msg, &copy, len);
    }
    size_t jlen = 0;
    char *json = ch_msg_encode (msg, &jlen);
    tu_session_kernel_send_frame (f, json, jlen);
    for (int i = 0; i < nbuf; i++)
        tu_session_kernel_send_frame (f, text, len);
    free (json);
    ch_msg_destroy (&msg);
}

static void
s_raw_text_bad_name (tu_session_t *f, const json_t *h)
{
    s_send_raw_text (f, h, "stdin", "x", 1, 1);
}

static void
s_raw_text_two_buffers (tu_session_t *f, const json_t *h)
{
    s_send_raw_text (f, h, "stdout", "x", 1, 2);
}

//  A raw text reaches the client as a stream text: bad UTF-8 and NUL as
//  U+FFFD, control characters escaped; the kernel lives on.
static void
test_gw_session_raw_text_reaches_the_client_valid (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-r", "x");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-r");
    s_send_raw_text (f, h, "stderr", "ok \xff\x00\x1b[0m \xe2\x9c\x93\n\xe2", 15, 1);
    tu_session_pump (f, 100);
    assert_int_equal (f->mock.kills, 0);
    tu_session_seen_t *st = tu_session_find_seen (f, "stream", 0);
    assert_non_null (st);
    assert_string_equal (json_string_value (json_object_get (st->content, "name")), "stderr");
    assert_string_equal (json_string_value (json_object_get (st->content, "text")),
                         "ok \xef\xbf\xbd\xef\xbf\xbd\x1b[0m \xe2\x9c\x93\n\xef\xbf\xbd");
    ch_msg_destroy (&req);
    json_decref (h);
}

//  One that would be over --max-msg once escaped ends the kernel.
static void
test_gw_session_raw_text_over_the_cap_once_escaped_ends_kernel (void **state)
{
    tu_session_t *f = *state;
    gw_session_opts_t opts = { .max_msg = 1000 };
    tu_session_start_ready_with (f, &opts);
    json_t *h = tu_session_execute (f, "ex-ctl", "ctl");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-ctl");
    char ctl [300];                             //  1,800 bytes escaped
    memset (ctl, 1, sizeof ctl);
    s_send_raw_text (f, h, "stdout", ctl, sizeof ctl, 1);
    tu_session_pump (f, 100);
    assert_int_equal (f->mock.kills, 1);
    assert_null (tu_session_find_seen (f, "stream", 0));
    ch_msg_destroy (&req);
    json_decref (h);
}

static void test_gw_session_oversize_frame_ends_kernel (void **state) { s_hostile (*state, s_oversize); }
static void test_gw_session_garbage_json_ends_kernel (void **state) { s_hostile (*state, s_garbage); }
static void test_gw_session_bogus_msg_type_ends_kernel (void **state) { s_hostile (*state, s_bogus_type); }
static void test_gw_session_unknown_parent_ends_kernel (void **state) { s_hostile (*state, s_unknown_parent); }
static void test_gw_session_bad_content_ends_kernel (void **state) { s_hostile (*state, s_bad_content); }
static void test_gw_session_raw_text_bad_name_ends_kernel (void **state) { s_hostile (*state, s_raw_text_bad_name); }
static void test_gw_session_raw_text_two_buffers_ends_kernel (void **state) { s_hostile (*state, s_raw_text_two_buffers); }

static void
test_gw_session_oversize_kernel_message_ends_kernel (void **state)
{
    tu_session_t *f = *state;
    gw_session_opts_t opts = { .max_msg = 1000 };
    tu_session_start_ready_with (f, &opts);
    json_t *h = tu_session_execute (f, "ex-big", "big");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-big");
    char text [2000];
    memset (text, 'x', sizeof text - 1);
    text [sizeof text - 1] = 0;
    tu_session_kernel_send (f, CH_IOPUB, "stream", h,
                            json_pack ("{s:s, s:s}", "name", "stdout", "text", text));
    tu_session_pump (f, 100);
    assert_int_equal (f->mock.kills, 1);
    assert_null (tu_session_find_seen (f, "stream", 0));
    ch_msg_destroy (&req);
    json_decref (h);
}

int
main (void)
{
    gw_log_init (getenv ("VERBOSE") ? GW_LOG_DEBUG : GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        TU_SESSION_CASE (test_gw_session_oversize_frame_ends_kernel),
        TU_SESSION_CASE (test_gw_session_garbage_json_ends_kernel),
        TU_SESSION_CASE (test_gw_session_bogus_msg_type_ends_kernel),
        TU_SESSION_CASE (test_gw_session_unknown_parent_ends_kernel),
        TU_SESSION_CASE (test_gw_session_bad_content_ends_kernel),
        TU_SESSION_CASE (test_gw_session_oversize_kernel_message_ends_kernel),
        TU_SESSION_CASE (test_gw_session_raw_text_reaches_the_client_valid),
        TU_SESSION_CASE (test_gw_session_raw_text_bad_name_ends_kernel),
        TU_SESSION_CASE (test_gw_session_raw_text_two_buffers_ends_kernel),
        TU_SESSION_CASE (test_gw_session_raw_text_over_the_cap_once_escaped_ends_kernel),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
