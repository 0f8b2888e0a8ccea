/*  test_gw_session - the session with a mock backend and a scripted kernel.

    The mock backend's start hands the session one end of a socketpair; the
    test plays the kernel on the other end with the same ch_frame/ch_msg
    codecs the real kernel uses. What the session sends to clients is
    captured from its emit callback. The mock, the kernel and the client
    are tests/unit/tu_session.h; the hostile kernel's tests are
    test_gw_session_hostile.c.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "base/gw_log.h"
#include "session/gw_session.h"
#include "ch_frame.h"
#include "ch_msg.h"
#include "tu_session.h"
#include "ch_clock.h"

//  --------------------------------------------------------------------------
//  Tests.

static void
test_gw_session_publishes_starting_and_says_hello (void **state)
{
    tu_session_t *f = *state;
    tu_session_start (f, NULL);
    tu_session_seen_t *s = tu_session_find_seen (f, "status", 0);
    assert_non_null (s);
    assert_string_equal (tu_session_status_of (s), "starting");
    assert_int_equal (json_object_size (s->parent), 0);
    assert_int_equal (strncmp (s->ids, "kernel.", 7), 0);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    assert_non_null (hello);
    assert_int_equal (ch_msg_channel (hello), CH_CELLVM);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (hello), "role")),
                         "driver");
    ch_msg_destroy (&hello);
}

//  A backend whose channel comes up later (a booting VM).
static void
test_gw_session_connects_when_the_backend_is_ready (void **state)
{
    tu_session_t *f = *state;
    f->mock.connect_after = 3;
    tu_session_start (f, NULL);
    assert_int_equal (gw_session_fd (f->session), -1);
    json_t *h = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "ki-c", NULL, 0);
    tu_session_pump (f, 50);                               //  ticks: -EAGAIN, -EAGAIN, fd
    assert_true (gw_session_fd (f->session) >= 0);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    assert_non_null (hello);
    assert_string_equal (ch_msg_type (hello), "hello");
    ch_msg_destroy (&hello);
    tu_session_kernel_hello (f);
    tu_session_pump (f, 20);
    ch_msg_t *msg = tu_session_expect_at_kernel (f, "ki-c");
    ch_msg_destroy (&msg);
    json_decref (h);
}

//  A port: a dead kernel's half frame, then the new kernel's marker and hello.
static void
test_gw_session_hunts_for_the_sync_marker_on_a_port (void **state)
{
    tu_session_t *f = *state;
    f->mock.sync_markers = true;
    tu_session_start (f, NULL);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    uint8_t junk [] = { 0, 0, 0x10, 0, '{', '"', 'c', 'h' };    //  cut mid-frame
    tu_session_kernel_send_raw (f, junk, sizeof junk);
    tu_session_kernel_send_raw (f, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    tu_session_kernel_hello (f);
    tu_session_pump (f, 50);
    assert_int_equal (f->mock.kills, 0);
    json_t *h = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "ki-p", NULL, 0);
    ch_msg_t *msg = tu_session_expect_at_kernel (f, "ki-p");   //  ready: sent at once
    ch_msg_destroy (&msg);
    json_decref (h);
}

static void
test_gw_session_holds_requests_until_hello (void **state)
{
    tu_session_t *f = *state;
    tu_session_start (f, NULL);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    json_t *h = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "ki-1", NULL, 0);
    assert_null (tu_session_kernel_recv (f, 100));         //  held: no hello yet
    tu_session_kernel_hello (f);
    tu_session_pump (f, 20);
    ch_msg_t *msg = tu_session_expect_at_kernel (f, "ki-1");
    assert_true (json_equal (ch_msg_header (msg), h));  //  header exactly as sent
    ch_msg_destroy (&msg);
    json_decref (h);
}

static void
test_gw_session_restamps_and_routes_reply (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-1", "1+1");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-1");
    //  The kernel's parent_header carries junk: the client must get its own.
    json_t *forged = json_pack ("{s:s, s:s}", "msg_id", "ex-1", "evil", "yes");
    tu_session_kernel_send (f, CH_IOPUB, "status", forged,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_kernel_send (f, CH_SHELL, "execute_reply", forged,
                            json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    tu_session_kernel_send (f, CH_IOPUB, "status", forged,
                            json_pack ("{s:s}", "execution_state", "idle"));
    tu_session_pump (f, 50);
    tu_session_seen_t *reply = tu_session_find_seen (f, "execute_reply", 0);
    assert_non_null (reply);
    assert_int_equal (reply->channel, CH_SHELL);
    assert_string_equal (reply->ids, "client-id");
    assert_true (json_equal (reply->parent, h));
    json_t *hdr = reply->header;
    assert_string_equal (json_string_value (json_object_get (hdr, "session")),
                         gw_session_id (f->session));
    assert_string_equal (json_string_value (json_object_get (hdr, "version")), "5.3");
    const char *date = json_string_value (json_object_get (hdr, "date"));
    assert_int_equal (date [strlen (date) - 1], 'Z');
    assert_string_not_equal (json_string_value (json_object_get (hdr, "msg_id")), "ex-1");
    tu_session_seen_t *busy = tu_session_find_seen (f, "status", 1);
    assert_string_equal (tu_session_status_of (busy), "busy");
    char topic [128];
    snprintf (topic, sizeof topic, "kernel.%s.status", gw_session_id (f->session));
    assert_string_equal (busy->ids, topic);
    json_decref (forged);
    json_decref (h);
    ch_msg_destroy (&req);
}

static void
test_gw_session_routes_input_request_to_the_execute_identity (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-in", "input()");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-in");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_kernel_send (f, CH_STDIN, "input_request", h,
                            json_pack ("{s:s, s:b}", "prompt", "name? ", "password", 0));
    tu_session_pump (f, 50);
    tu_session_seen_t *s = tu_session_find_seen (f, "input_request", 0);
    assert_non_null (s);
    assert_int_equal (s->channel, CH_STDIN);
    assert_string_equal (s->ids, "client-id");
    assert_true (json_equal (s->parent, h));
    //  The answer goes straight to the kernel.
    json_t *r = tu_session_client_request (f, CH_STDIN, "input_reply", "in-1",
                                           json_pack ("{s:s}", "value", "ada"), 0);
    ch_msg_t *answer = tu_session_expect_at_kernel (f, "in-1");
    assert_int_equal (ch_msg_channel (answer), CH_STDIN);
    ch_msg_destroy (&answer);
    ch_msg_destroy (&req);
    json_decref (r);
    json_decref (h);
}

static void
test_gw_session_control_is_not_held_behind_a_running_cell (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-long", "import time; time.sleep(100)");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-long");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_pump (f, 20);
    json_t *i = tu_session_client_request (f, CH_CONTROL, "interrupt_request", "int-1", NULL, 0);
    ch_msg_t *intr = tu_session_expect_at_kernel (f, "int-1");
    assert_int_equal (ch_msg_channel (intr), CH_CONTROL);
    ch_msg_destroy (&intr);
    ch_msg_destroy (&req);
    json_decref (i);
    json_decref (h);
}

static void
test_gw_session_drops_bad_client_requests (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *a = tu_session_client_request (f, CH_SHELL, "nonsense_request", "bad-1", NULL,
                                           -EPROTONOSUPPORT);
    json_t *b = tu_session_client_request (f, CH_SHELL, "input_reply", "bad-2", NULL,
                                           -EPROTONOSUPPORT);
    json_t *c = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "", NULL, -EINVAL);
    json_t *d = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "dup", NULL, 0);
    json_t *e = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "dup", NULL,
                                           -EEXIST);
    ch_msg_t *msg = tu_session_expect_at_kernel (f, "dup");    //  only the good one got through
    assert_null (tu_session_kernel_recv (f, 50));
    ch_msg_destroy (&msg);
    json_decref (a);
    json_decref (b);
    json_decref (c);
    json_decref (d);
    json_decref (e);
}

//  The kernel dies mid-cell: error on that cell, error reply for the queued
//  request, restarting, and a new kernel.
static void
test_gw_session_kernel_death_fails_the_running_cell (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h1 = tu_session_execute (f, "ex-a", "boom()");
    json_t *h2 = tu_session_execute (f, "ex-b", "after()");
    ch_msg_t *r1 = tu_session_expect_at_kernel (f, "ex-a");
    ch_msg_t *r2 = tu_session_expect_at_kernel (f, "ex-b");
    tu_session_kernel_send (f, CH_IOPUB, "status", h1,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_pump (f, 20);
    f->mock.exit = (gw_exit_t) { .exit_code = -1, .signal = SIGSEGV };
    f->mock.exited = true;
    close (f->mock.kernel_fd);
    f->mock.kernel_fd = -1;
    tu_session_pump (f, 100);
    tu_session_seen_t *err = tu_session_find_seen (f, "error", 0);
    assert_non_null (err);
    assert_true (json_equal (err->parent, h1));
    const char *evalue = json_string_value (json_object_get (err->content, "evalue"));
    assert_non_null (strstr (evalue, "SIGSEGV"));
    assert_non_null (strstr (evalue, "re-run"));
    tu_session_seen_t *reply = tu_session_find_seen (f, "execute_reply", 0);
    assert_true (json_equal (reply->parent, h1));
    assert_string_equal (json_string_value (json_object_get (reply->content, "status")), "error");
    tu_session_seen_t *reply2 = tu_session_find_seen (f, "execute_reply",
                                                      (size_t) (reply - f->seen) + 1);
    assert_non_null (reply2);
    assert_true (json_equal (reply2->parent, h2));
    //  one error only
    assert_null (tu_session_find_seen (f, "error", (size_t) (err - f->seen) + 1));
    //  The last two: restarting, then starting for the new kernel.
    assert_true (f->nseen >= 2);
    assert_string_equal (tu_session_status_of (&f->seen [f->nseen - 2]), "restarting");
    assert_string_equal (tu_session_status_of (&f->seen [f->nseen - 1]), "starting");
    assert_int_equal (f->mock.starts, 2);
    ch_msg_destroy (&r1);
    ch_msg_destroy (&r2);
    json_decref (h1);
    json_decref (h2);
}

static void
test_gw_session_uses_the_backends_own_words (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    assert_int_equal (gw_session_backend_fd (f->session), 0);
    json_t *h = tu_session_execute (f, "ex-vm", "x");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-vm");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_pump (f, 20);
    gw_session_backend_event (f->session);     //  reaps at once
    tu_session_seen_t *err = tu_session_find_seen (f, "error", 0);
    assert_non_null (err);
    const char *evalue = json_string_value (json_object_get (err->content, "evalue"));
    assert_string_equal (evalue, "The session's virtual machine itself stopped; /workspace "
                         "is gone. A new VM is starting. Re-run the cells this one depends on.");
    assert_int_equal (f->mock.starts, 2);
    ch_msg_destroy (&req);
    json_decref (h);
}

static void
test_gw_session_shutdown_request_completes (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_client_request (f, CH_CONTROL, "shutdown_request", "sd-1",
                                           json_pack ("{s:b}", "restart", 0), 0);
    ch_msg_t *req = tu_session_expect_at_kernel (f, "sd-1");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_kernel_send (f, CH_CONTROL, "shutdown_reply", h,
                            json_pack ("{s:s, s:b}", "status", "ok", "restart", 0));
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "idle"));
    tu_session_kernel_send (f, CH_CELLVM, "exiting", NULL,
                            json_pack ("{s:s}", "reason", "shutdown_request"));
    tu_session_pump (f, 20);
    json_t *late = tu_session_client_request (f, CH_SHELL, "kernel_info_request", "late-1", NULL,
                                              -ESHUTDOWN);
    f->mock.exit = (gw_exit_t) { .exit_code = 0 };
    f->mock.exited = true;
    close (f->mock.kernel_fd);
    f->mock.kernel_fd = -1;
    tu_session_pump (f, 200);
    assert_true (gw_session_finished (f->session));
    assert_int_equal (gw_session_exit_code (f->session), 0);
    tu_session_seen_t *reply = tu_session_find_seen (f, "shutdown_reply", 0);
    assert_non_null (reply);
    assert_int_equal (reply->channel, CH_CONTROL);
    assert_int_equal (f->mock.kills, 0);
    assert_int_equal (f->mock.starts, 1);       //  no restart after a requested exit
    ch_msg_destroy (&req);
    json_decref (late);
    json_decref (h);
}

//  SIGTERM and a kernel that ignores shutdown_request: stopped within a second.
static void
test_gw_session_shutdown_stops_a_stuck_kernel (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    int64_t t0 = ch_clock_mono_ms ();
    gw_session_shutdown (f->session);
    ch_msg_t *req = tu_session_kernel_recv (f, 1000);
    assert_non_null (req);
    assert_string_equal (ch_msg_type (req), "shutdown_request");
    tu_session_pump (f, 2000);
    assert_true (gw_session_finished (f->session));
    assert_true (ch_clock_mono_ms () - t0 < 1500);
    assert_int_equal (f->mock.kills, 1);
    assert_null (tu_session_find_seen (f, "shutdown_reply", 0));   //  nobody asked: nobody told
    ch_msg_destroy (&req);
}

//  A client's shutdown_request the kernel never answers still gets a reply.
static void
test_gw_session_shutdown_reply_is_synthesized (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_client_request (f, CH_CONTROL, "shutdown_request", "sd-2",
                                           json_pack ("{s:b}", "restart", 1), 0);
    tu_session_pump (f, 2000);
    assert_true (gw_session_finished (f->session));
    tu_session_seen_t *reply = tu_session_find_seen (f, "shutdown_reply", 0);
    assert_non_null (reply);
    assert_true (json_is_true (json_object_get (reply->content, "restart")));
    assert_true (json_equal (reply->parent, h));
    json_decref (h);
}

//  A restart on a backend that keeps /workspace from a live kernel (microvm):
//  the gateway answers at once, as the kernel would have (busy, the reply,
//  idle), and ends without waiting for the kernel; the kernel is never asked.
static void
test_gw_session_restart_in_place_answers_without_the_kernel (void **state)
{
    tu_session_t *f = *state;
    f->mock.keep_live = true;
    tu_session_start_ready (f);
    json_t *h = tu_session_client_request (f, CH_CONTROL, "shutdown_request", "sd-3",
                                           json_pack ("{s:b}", "restart", 1), 0);
    tu_session_pump (f, 50);
    assert_true (gw_session_finished (f->session));
    assert_true (gw_session_restart_requested (f->session));
    tu_session_seen_t *reply = tu_session_find_seen (f, "shutdown_reply", 0);
    assert_non_null (reply);
    assert_int_equal (reply->channel, CH_CONTROL);
    assert_true (json_is_true (json_object_get (reply->content, "restart")));
    assert_string_equal (json_string_value (json_object_get (reply->content, "status")), "ok");
    assert_true (json_equal (reply->parent, h));
    assert_null (tu_session_kernel_recv (f, 100));      //  nothing went to the kernel
    json_decref (h);
}

static void
test_gw_session_shutdown_without_restart_still_asks_the_kernel (void **state)
{
    tu_session_t *f = *state;
    f->mock.keep_live = true;
    tu_session_start_ready (f);
    json_t *h = tu_session_client_request (f, CH_CONTROL, "shutdown_request", "sd-4",
                                           json_pack ("{s:b}", "restart", 0), 0);
    ch_msg_t *req = tu_session_expect_at_kernel (f, "sd-4");
    assert_false (gw_session_finished (f->session));
    ch_msg_destroy (&req);
    json_decref (h);
}

static void
test_gw_session_gives_up_after_failed_starts (void **state)
{
    tu_session_t *f = *state;
    gw_session_opts_t opts = { .restart_limit = 2 };
    tu_session_start (f, &opts);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    json_t *h = tu_session_execute (f, "ex-held", "1");      //  held: no hello yet
    f->mock.fail_starts = 10;
    tu_session_mock_kill (&f->mock);                       //  dies before its hello
    tu_session_pump (f, 1500);
    assert_true (gw_session_finished (f->session));
    assert_int_equal (gw_session_exit_code (f->session), 1);
    tu_session_seen_t *reply = tu_session_find_seen (f, "execute_reply", 0);
    assert_non_null (reply);
    assert_true (json_equal (reply->parent, h));
    assert_non_null (strstr (json_string_value (json_object_get (reply->content, "evalue")),
                             "could not be started"));
    json_decref (h);
}

static void
test_gw_session_late_output_keeps_its_parent (void **state)
{
    tu_session_t *f = *state;
    tu_session_start_ready (f);
    json_t *h = tu_session_execute (f, "ex-late", "thread");
    ch_msg_t *req = tu_session_expect_at_kernel (f, "ex-late");
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "busy"));
    tu_session_kernel_send (f, CH_SHELL, "execute_reply", h,
                            json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    tu_session_kernel_send (f, CH_IOPUB, "status", h,
                            json_pack ("{s:s}", "execution_state", "idle"));
    tu_session_kernel_send (f, CH_IOPUB, "stream", h,
                            json_pack ("{s:s, s:s}", "name", "stdout", "text", "late\n"));
    tu_session_pump (f, 50);
    tu_session_seen_t *s = tu_session_find_seen (f, "stream", 0);
    assert_non_null (s);
    assert_true (json_equal (s->parent, h));
    assert_string_equal (s->ids, "stream.stdout");
    assert_int_equal (f->mock.kills, 0);
    ch_msg_destroy (&req);
    json_decref (h);
}

int
main (void)
{
    gw_log_init (getenv ("VERBOSE") ? GW_LOG_DEBUG : GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        TU_SESSION_CASE (test_gw_session_publishes_starting_and_says_hello),
        TU_SESSION_CASE (test_gw_session_connects_when_the_backend_is_ready),
        TU_SESSION_CASE (test_gw_session_hunts_for_the_sync_marker_on_a_port),
        TU_SESSION_CASE (test_gw_session_holds_requests_until_hello),
        TU_SESSION_CASE (test_gw_session_restamps_and_routes_reply),
        TU_SESSION_CASE (test_gw_session_routes_input_request_to_the_execute_identity),
        TU_SESSION_CASE (test_gw_session_control_is_not_held_behind_a_running_cell),
        TU_SESSION_CASE (test_gw_session_drops_bad_client_requests),
        TU_SESSION_CASE (test_gw_session_kernel_death_fails_the_running_cell),
        TU_SESSION_CASE (test_gw_session_uses_the_backends_own_words),
        TU_SESSION_CASE (test_gw_session_shutdown_request_completes),
        TU_SESSION_CASE (test_gw_session_shutdown_stops_a_stuck_kernel),
        TU_SESSION_CASE (test_gw_session_shutdown_reply_is_synthesized),
        TU_SESSION_CASE (test_gw_session_restart_in_place_answers_without_the_kernel),
        TU_SESSION_CASE (test_gw_session_shutdown_without_restart_still_asks_the_kernel),
        TU_SESSION_CASE (test_gw_session_gives_up_after_failed_starts),
        TU_SESSION_CASE (test_gw_session_late_output_keeps_its_parent),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
