/*  test_gw_backend_microvm_chunks - the microvm backend with no QEMU: file
    chunks through the VM's init (put_request, get_request), matched by
    msg_id, timed out, cancelled, failed when init's port goes. The mock
    VMs and the drivers are tu_microvm.h's.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>

#include "tu_microvm.h"
#include "ch_clock.h"

//  ==========================================================================
//  File chunks through init.

TU_MICROVM_FAST_TEST (test_put_chunk_round_trip)
{
    assert_int_equal (tu_microvm_put (f, 0, "data/in.csv", true, "a,b\n1,2\n"), 0);
    assert_int_equal (f->done [0].calls, 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "put_request", false);
    json_t *c = ch_msg_content (req);
    assert_string_equal (tu_microvm_str (c, "path"), "data/in.csv");
    assert_true (json_is_true (json_object_get (c, "append")));
    size_t len = 0;
    const uint8_t *buf = ch_msg_buffer (req, 0, &len);
    assert_int_equal (ch_msg_nbuffers (req), 1);
    assert_int_equal (len, 8);
    assert_memory_equal (buf, "a,b\n1,2\n", 8);
    json_t *reply = json_pack ("{s:s, s:s, s:i, s:i}", "status", "ok", "path",
                               "/workspace/data/in.csv", "size", 108, "written", 8);
    tu_microvm_done_t *d = tu_microvm_answer (f, vm, &req, 0, reply, NULL, 0);
    assert_int_equal (d->rc, 0);
    assert_string_equal (tu_microvm_str (d->reply, "path"), "/workspace/data/in.csv");
    assert_int_equal (tu_microvm_int (d->reply, "size"), 108);
    assert_int_equal (d->len, 0);
}

TU_MICROVM_FAST_TEST (test_put_chunk_refused_by_init_says_why)
{
    assert_int_equal (tu_microvm_put (f, 0, "../etc/passwd", false, "x"), 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "put_request", false);
    assert_false (json_is_true (json_object_get (ch_msg_content (req), "append")));
    json_t *reply = json_pack ("{s:s, s:s, s:s}", "status", "error", "ename",
                               "PathOutsideWorkspace", "evalue", "../etc/passwd is outside");
    tu_microvm_done_t *d = tu_microvm_answer (f, vm, &req, 0, reply, NULL, 0);
    assert_int_equal (d->rc, -EPERM);
    assert_null (d->reply);
    assert_string_equal (d->err, "PathOutsideWorkspace: ../etc/passwd is outside");
}

TU_MICROVM_FAST_TEST (test_get_chunk_round_trip)
{
    assert_int_equal (tu_microvm_get (f, 1, "out/plot.png", 4096, 100), 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "get_request", false);
    json_t *c = ch_msg_content (req);
    assert_string_equal (tu_microvm_str (c, "path"), "out/plot.png");
    assert_int_equal (tu_microvm_int (c, "offset"), 4096);
    assert_int_equal (tu_microvm_int (c, "length"), 100);
    assert_int_equal (ch_msg_nbuffers (req), 0);
    json_t *reply = json_pack ("{s:s, s:s, s:i, s:i, s:i, s:b}", "status", "ok", "path",
                               "/workspace/out/plot.png", "size", 4101, "offset", 4096,
                               "length", 5, "eof", 1);
    tu_microvm_done_t *d = tu_microvm_answer (f, vm, &req, 1, reply, "\x89PNG!", 5);
    assert_int_equal (d->rc, 0);
    assert_int_equal (d->len, 5);
    assert_memory_equal (d->data, "\x89PNG!", 5);
    assert_int_equal (tu_microvm_int (d->reply, "size"), 4101);
    assert_true (json_is_true (json_object_get (d->reply, "eof")));
    assert_int_equal (f->done [0].calls, 0);
}

//  Replies are matched by msg_id, whatever their order.
TU_MICROVM_FAST_TEST (test_chunk_replies_are_matched_by_id)
{
    assert_int_equal (tu_microvm_get (f, 0, "a", 0, 10), 0);
    assert_int_equal (tu_microvm_get (f, 1, "b", 0, 10), 0);
    ch_msg_t *ra = tu_microvm_init_expect (f, vm, "get_request", false);
    ch_msg_t *rb = tu_microvm_init_expect (f, vm, "get_request", false);
    tu_microvm_init_send (vm, rb, NULL, json_pack ("{s:s, s:i}", "status", "ok", "size", 1),
                          "B", 1);
    tu_microvm_init_send (vm, ra, NULL, json_pack ("{s:s, s:i}", "status", "ok", "size", 1),
                          "A", 1);
    TU_MICROVM_WAIT_FOR (f, 2000, f->done [0].calls == 1 && f->done [1].calls == 1);
    assert_memory_equal (f->done [0].data, "A", 1);
    assert_memory_equal (f->done [1].data, "B", 1);
    ch_msg_destroy (&ra);
    ch_msg_destroy (&rb);
}

TU_MICROVM_FAST_TEST (test_a_chunk_without_reply_times_out)
{
    int64_t t0 = ch_clock_mono_ms ();
    assert_int_equal (tu_microvm_get (f, 0, "slow", 0, 10), 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "get_request", false);
    TU_MICROVM_WAIT_FOR (f, 3000, f->done [0].calls == 1);
    assert_true (ch_clock_mono_ms () - t0 >= TU_MICROVM_CHUNK_MS);
    assert_int_equal (f->done [0].rc, -ETIMEDOUT);
    assert_string_equal (f->done [0].err, "the VM's init did not answer within 0.3 s");
    //  A late reply is one nobody waits for.
    tu_microvm_init_send (vm, req, NULL, tu_microvm_ok (), "late", 4);
    tu_microvm_pump (f, 100);
    assert_int_equal (f->done [0].calls, 1);
    ch_msg_destroy (&req);
}

TU_MICROVM_FAST_TEST (test_init_port_closing_fails_chunks_with_epipe)
{
    assert_int_equal (tu_microvm_put (f, 0, "x", false, "data"), 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "put_request", false);
    tu_microvm_close_init (vm);
    TU_MICROVM_WAIT_FOR (f, 2000, f->done [0].calls == 1);
    assert_int_equal (f->done [0].rc, -EPIPE);
    assert_string_equal (f->done [0].err, "the VM's init stopped answering");
    //  No port, no chunks: refused in the call.
    tu_microvm_put_refused (f, 1, -ENOTCONN, "the session has no running VM");
    ch_msg_destroy (&req);
}

//  A port that is gone before the backend noticed: the chunk is refused
//  in the call (its done used to run inside put_chunk).
TU_MICROVM_FAST_TEST (test_a_chunk_to_a_dead_port_is_refused_in_the_call)
{
    tu_microvm_close_init (vm);
    tu_microvm_put_refused (f, 0, -EPIPE, "the VM's init is not reading its port");
}

TU_MICROVM_FAST_TEST (test_cancel_chunks_means_no_done)
{
    assert_int_equal (tu_microvm_put (f, 0, "p", false, "data"), 0);
    assert_int_equal (tu_microvm_get (f, 1, "g", 0, 10), 0);
    ch_msg_t *rp = tu_microvm_init_expect (f, vm, "put_request", false);
    ch_msg_t *rg = tu_microvm_init_expect (f, vm, "get_request", false);
    gw_backend_cancel_chunks (f->be);
    tu_microvm_init_send (vm, rp, NULL, tu_microvm_ok (), NULL, 0);
    tu_microvm_init_send (vm, rg, NULL, tu_microvm_ok (), "g", 1);
    tu_microvm_pump_for (f, 2 * TU_MICROVM_CHUNK_MS);    //  past any deadline too
    assert_int_equal (f->done [0].calls + f->done [1].calls, 0);
    ch_msg_destroy (&rp);
    ch_msg_destroy (&rg);
}

TU_MICROVM_FAST_TEST (test_destroy_with_a_chunk_in_flight_calls_no_done)
{
    assert_int_equal (tu_microvm_put (f, 0, "p", false, "data"), 0);
    assert_int_equal (tu_microvm_get (f, 1, "g", 0, 10), 0);
    gw_backend_destroy (&f->be);
    assert_true (vm->destroyed);
    assert_int_equal (f->done [0].calls + f->done [1].calls, 0);
}

int
main (void)
{
    tu_microvm_prepare ();
    const struct CMUnitTest tests [] = {
        TU_MICROVM_CASE (test_put_chunk_round_trip),
        TU_MICROVM_CASE (test_put_chunk_refused_by_init_says_why),
        TU_MICROVM_CASE (test_get_chunk_round_trip),
        TU_MICROVM_CASE (test_chunk_replies_are_matched_by_id),
        TU_MICROVM_CASE (test_a_chunk_without_reply_times_out),
        TU_MICROVM_CASE (test_init_port_closing_fails_chunks_with_epipe),
        TU_MICROVM_CASE (test_a_chunk_to_a_dead_port_is_refused_in_the_call),
        TU_MICROVM_CASE (test_cancel_chunks_means_no_done),
        TU_MICROVM_CASE (test_destroy_with_a_chunk_in_flight_calls_no_done),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
