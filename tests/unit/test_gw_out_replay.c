/*  test_gw_out_replay - cellvm_replay_request as a client sees it, through
    a mock emit: busy, the kept messages marked as replays, the reply,
    idle; batches per turn; errors in words. And the 5.5 stamp. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/gw_out_replay.h"
#include "wire/gw_wire.h"

#define S_SESSION "0b5c1d2e-0000-4000-8000-000000000001"
#define S_KEY "key"

//  What the mock emit saw: channel, msg_type and a copy of each message.
typedef struct {
    gw_wire_t *wire;
    size_t n;
    ch_channel_t ch [1024];
    char topic [1024][64];
    ch_msg_t *msg [1024];
} s_seen_t;

static void
s_emit (void *arg, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    s_seen_t *seen = arg;
    assert_true (seen->n < 1024);
    const gw_frame_t *t = ch == CH_IOPUB ? gw_frames_get (ids, 0) : NULL;
    snprintf (seen->topic [seen->n], 64, "%.*s", t ? (int) t->size : 0, t ? (char *) t->data : "");
    //  A copy through the wire, as a client would decode it.
    gw_frames_t *frames = gw_wire_encode (seen->wire, NULL, msg);
    ch_msg_t *copy = NULL;
    gw_frames_t *none = NULL;
    assert_int_equal (gw_wire_decode (seen->wire, ch == CH_IOPUB ? CH_IOPUB : CH_CONTROL,
                                      gw_frames_array (frames), gw_frames_size (frames), &copy,
                                      &none, NULL), 0);
    gw_frames_destroy (&frames);
    gw_frames_destroy (&none);
    seen->ch [seen->n] = ch;
    seen->msg [seen->n++] = copy;
}

static void
s_seen_clear (s_seen_t *seen)
{
    for (size_t i = 0; i < seen->n; i++)
        ch_msg_destroy (&seen->msg [i]);
    seen->n = 0;
}

typedef struct {
    s_seen_t seen;
    gw_out_replay_t *rp;
    gw_wire_t *signer;                          //  signs what is "sent" to be recorded
    json_t *cell;                               //  an execute_request header
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    gw_hmac_t *h1 = gw_hmac_new ("hmac-sha256", (const uint8_t *) S_KEY, 3);
    gw_hmac_t *h2 = gw_hmac_new ("hmac-sha256", (const uint8_t *) S_KEY, 3);
    f->seen.wire = gw_wire_new (&h1, 0);
    gw_wire_set_history (f->seen.wire, 0);
    f->signer = gw_wire_new (&h2, 0);
    f->rp = gw_out_replay_new (s_emit, &f->seen, 4, 0);
    f->cell = json_pack ("{s:s, s:s, s:s}", "msg_id", "cell-1", "msg_type", "execute_request",
                         "session", "client");
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    s_seen_clear (&f->seen);
    gw_out_replay_destroy (&f->rp);
    gw_wire_destroy (&f->seen.wire);
    gw_wire_destroy (&f->signer);
    json_decref (f->cell);
    free (f);
    return 0;
}

//  An IOPub message of the cell "sent": recorded as the server would.
static ch_msg_t *
s_sent (fixture_t *f, const char *type, json_t *content)
{
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, type, f->cell, &content, S_SESSION);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, "stream.stdout", 13);
    gw_frames_t *frames = gw_wire_encode_head (f->signer, ids, msg);
    gw_out_replay_record (f->rp, msg, frames, 1);
    gw_frames_destroy (&frames);
    gw_frames_destroy (&ids);
    return msg;
}

static void
s_request (fixture_t *f, const char *id, json_t *content)
{
    json_t *header = json_pack ("{s:s, s:s}", "msg_id", id, "msg_type", "cellvm_replay_request");
    ch_msg_t *req = ch_msg_new (CH_CONTROL, "cellvm_replay_request", NULL, &content, "client");
    json_t *h = ch_msg_header (req);
    json_object_update (h, header);
    json_decref (header);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, "client-id", 9);
    gw_out_replay_request (f->rp, &ids, &req, S_SESSION);
    assert_null (ids);
    assert_null (req);
}

static const char *
s_state (const ch_msg_t *msg)
{
    return json_string_value (json_object_get (ch_msg_content (msg), "execution_state"));
}

static void
test_replays_the_cell_between_busy_and_idle (void **state)
{
    fixture_t *f = *state;
    ch_msg_t *a = s_sent (f, "stream", json_pack ("{s:s, s:s}", "name", "stdout", "text", "hi\n"));
    ch_msg_t *b = s_sent (f, "execute_result", json_pack ("{s:i, s:{s:s}, s:{}}",
                          "execution_count", 1, "data", "text/plain", "42", "metadata"));
    ch_msg_t *c = s_sent (f, "status", json_pack ("{s:s}", "execution_state", "idle"));
    s_request (f, "rq-1", json_pack ("{s:s}", "msg_id", "cell-1"));
    assert_int_equal (f->seen.n, 5);            //  busy, a, b, reply, idle (no status kept)
    assert_string_equal (s_state (f->seen.msg [0]), "busy");
    ch_msg_t *r = f->seen.msg [1];
    assert_string_equal (ch_msg_type (r), "stream");
    assert_string_equal (f->seen.topic [1], "stream.stdout");
    assert_true (json_equal (ch_msg_content (r), ch_msg_content (a)));
    assert_true (json_equal (ch_msg_parent (r), f->cell));
    assert_string_not_equal (ch_msg_id (r), ch_msg_id (a));
    json_t *md = ch_msg_metadata (r);
    assert_true (json_is_true (json_object_get (md, "cellvm_replay")));
    assert_string_equal (json_string_value (json_object_get (md, "cellvm_replay_of")),
                         ch_msg_id (a));
    assert_string_equal (json_string_value (json_object_get (md, "cellvm_replay_request")),
                         "rq-1");
    assert_true (json_equal (ch_msg_content (f->seen.msg [2]), ch_msg_content (b)));
    ch_msg_t *reply = f->seen.msg [3];
    assert_int_equal (f->seen.ch [3], CH_CONTROL);
    assert_string_equal (ch_msg_type (reply), "cellvm_replay_reply");
    assert_int_equal (json_integer_value (json_object_get (ch_msg_content (reply), "count")), 2);
    assert_true (json_integer_value (json_object_get (ch_msg_content (reply), "bytes")) > 20);
    assert_string_equal (s_state (f->seen.msg [4]), "idle");
    ch_msg_destroy (&a);
    ch_msg_destroy (&b);
    ch_msg_destroy (&c);
}

static void
test_a_long_replay_goes_a_batch_per_turn (void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < 300; i++) {
        ch_msg_t *m = s_sent (f, "stream", json_pack ("{s:s, s:i}", "name", "stdout", "i", i));
        ch_msg_destroy (&m);
    }
    s_request (f, "rq-2", json_pack ("{s:s}", "msg_id", "cell-1"));
    assert_int_equal (f->seen.n, 1 + 128);      //  busy and the first batch
    gw_out_replay_pump (f->rp, S_SESSION);
    assert_int_equal (f->seen.n, 1 + 256);
    gw_out_replay_pump (f->rp, S_SESSION);
    assert_int_equal (f->seen.n, 1 + 300 + 2);  //  the rest, reply, idle
    for (int i = 0; i < 300; i++)
        assert_int_equal (json_integer_value (json_object_get (
                          ch_msg_content (f->seen.msg [1 + i]), "i")), i);
    gw_out_replay_pump (f->rp, S_SESSION);      //  nothing left
    assert_int_equal (f->seen.n, 303);
}

static void
test_errors_say_why (void **state)
{
    fixture_t *f = *state;
    s_request (f, "rq-3", json_pack ("{s:i}", "msg_id", 3));
    s_request (f, "rq-4", json_pack ("{s:s}", "msg_id", "never-ran"));
    assert_int_equal (f->seen.n, 6);            //  busy, reply, idle, twice
    json_t *c = ch_msg_content (f->seen.msg [1]);
    assert_string_equal (json_string_value (json_object_get (c, "ename")), "BadRequest");
    c = ch_msg_content (f->seen.msg [4]);
    assert_string_equal (json_string_value (json_object_get (c, "status")), "error");
    assert_string_equal (json_string_value (json_object_get (c, "ename")), "ReplayUnavailable");
    assert_non_null (strstr (json_string_value (json_object_get (c, "evalue")), "never-ran"));
    assert_int_equal (json_array_size (json_object_get (c, "traceback")), 0);
}

static void
test_stamp_5_5 (void **state)
{
    (void) state;
    json_t *content = json_pack ("{s:s, s:s}", "status", "ok", "protocol_version", "5.3");
    ch_msg_t *msg = ch_msg_new (CH_CONTROL, "kernel_info_reply", NULL, &content, S_SESSION);
    gw_out_stamp_5_5 (msg);
    assert_string_equal (json_string_value (json_object_get (ch_msg_header (msg), "version")),
                         "5.5");
    content = ch_msg_content (msg);
    assert_string_equal (json_string_value (json_object_get (content, "protocol_version")),
                         "5.5");
    assert_int_equal (json_array_size (json_object_get (content, "supported_features")), 0);
    assert_true (json_is_array (json_object_get (content, "supported_features")));
    ch_msg_destroy (&msg);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_replays_the_cell_between_busy_and_idle,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_a_long_replay_goes_a_batch_per_turn,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_errors_say_why, s_setup, s_teardown),
        cmocka_unit_test (test_stamp_5_5),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
