/*  test_kn_comm - comms in the kernel core, with a mock interpreter: a
 *  client's comm message reaches the interpreter whole (buffers, metadata,
 *  header), bracketed by busy/idle and with no reply; what a handler
 *  publishes has the comm message as parent and keeps its metadata and
 *  buffers; kn_kernel_publish_msg's parents, silence and bad input; without
 *  the comm seam a comm_open is closed as before.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kn_chan.h"
#include "kn_kernel.h"

typedef struct {
    int fds [2];            //  [0] driver side, [1] kernel side
    kn_chan_t *kchan, *dchan;
    kn_kernel_t *kernel;
    pthread_t thread;
    int comms;              //  comm messages the mock saw (kernel thread; read after idle)
    char comm_type [32];
    char comm_msg_id [64];
    size_t nbuffers;
    char buffer1 [16];      //  the second buffer, as text
    char meta [32];         //  metadata.m
    int rc_bad [4];         //  publish_msg's answers to bad input
} s_fixture_t;

//  A handler publishing what a Comm.send would: metadata and one buffer.
static void
s_mock_comm (void *ctx, const ch_msg_t *msg)
{
    s_fixture_t *f = ctx;
    f->comms++;
    snprintf (f->comm_type, sizeof f->comm_type, "%s", ch_msg_type (msg));
    snprintf (f->comm_msg_id, sizeof f->comm_msg_id, "%s", ch_msg_id (msg));
    f->nbuffers = ch_msg_nbuffers (msg);
    size_t len = 0;
    const uint8_t *b = f->nbuffers > 1 ? ch_msg_buffer (msg, 1, &len) : NULL;
    snprintf (f->buffer1, sizeof f->buffer1, "%.*s", (int) len, b ? (const char *) b : "");
    const char *m = json_string_value (json_object_get (ch_msg_metadata (msg), "m"));
    snprintf (f->meta, sizeof f->meta, "%s", m ? m : "");
    struct iovec iov = { (void *) "\x00\x01\x02", 3 };
    const char *content = "{\"comm_id\":\"c1\",\"data\":{\"echo\":1}}";
    kn_publish_t p = { content, strlen (content), "{\"k\":2}", NULL, &iov, 1 };
    assert_int_equal (kn_kernel_publish_msg (f->kernel, "comm_msg", &p), 0);
}

//  execute "pub": publish with explicit parents; the request may be silent.
static json_t *
s_mock_handle (void *ctx, const char *type, const json_t *content)
{
    s_fixture_t *f = ctx;
    const char *code = json_string_value (json_object_get (content, "code"));
    if (strcmp (type, "execute_request") != 0 || !code || strcmp (code, "pub") != 0)
        return json_pack ("{s:s, s:{}}", "status", "ok", "comms");
    char *mine = kn_kernel_parent_json (f->kernel);
    kn_publish_t own = { "{\"n\":1}", 7, NULL, NULL, NULL, 0 };
    kn_publish_t named = { "{\"n\":2}", 7, NULL, mine, NULL, 0 };
    kn_publish_t other = { "{\"n\":3}", 7, NULL, "{\"msg_id\":\"other\"}", NULL, 0 };
    kn_kernel_publish_msg (f->kernel, "comm_msg", &own);
    kn_kernel_publish_msg (f->kernel, "comm_msg", &named);
    kn_kernel_publish_msg (f->kernel, "comm_msg", &other);
    struct iovec many [17] = { { NULL, 0 } };
    kn_publish_t bad [4] = {
        { "[1]", 3, NULL, NULL, NULL, 0 },
        { "{}", 2, "nope", NULL, NULL, 0 },
        { "{}", 2, NULL, "[]", NULL, 0 },
        { "{}", 2, NULL, NULL, many, 17 },
    };
    for (int i = 0; i < 4; i++)
        f->rc_bad [i] = kn_kernel_publish_msg (f->kernel, "comm_msg", &bad [i]);
    free (mine);
    return json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1);
}

static json_t *
s_mock_info (void *ctx)
{
    (void) ctx;
    return json_pack ("{s:s, s:s, s:s, s:{s:s}, s:b}", "status", "ok", "protocol_version", "5.3",
                      "implementation_version", "t", "language_info", "version", "3.11.2",
                      "ipython", 0);
}

static void *
s_run (void *arg)
{
    s_fixture_t *f = arg;
    kn_kernel_run (f->kernel);
    return NULL;
}

static int
s_setup_with (void **state, bool comm)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, f->fds), 0);
    f->kchan = kn_chan_new (f->fds [1], 1 << 20);
    f->dchan = kn_chan_new (f->fds [0], 1 << 20);
    kn_kernel_config_t cfg = { NULL, "t" };
    f->kernel = kn_kernel_new (f->kchan, &cfg);
    assert_non_null (f->kernel);
    kn_interp_t interp = { .ctx = f, .handle = s_mock_handle, .info = s_mock_info,
                           .comm = comm ? s_mock_comm : NULL };
    kn_kernel_set_interp (f->kernel, &interp);
    pthread_create (&f->thread, NULL, s_run, f);
    *state = f;
    return 0;
}

static int
s_setup (void **state)
{
    return s_setup_with (state, true);
}

static int
s_setup_no_comms (void **state)
{
    return s_setup_with (state, false);
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    shutdown (f->fds [0], SHUT_RDWR);   //  EOF: the kernel's run returns
    pthread_join (f->thread, NULL);
    kn_kernel_destroy (&f->kernel);
    kn_chan_destroy (&f->kchan);
    kn_chan_destroy (&f->dchan);
    close (f->fds [0]);
    close (f->fds [1]);
    free (f);
    return 0;
}

//  The next message that is not the kernel's hello.
static ch_msg_t *
s_recv (s_fixture_t *f)
{
    ch_msg_t *msg = NULL;
    char err [128];
    do {
        ch_msg_destroy (&msg);
        assert_int_equal (kn_chan_recv (f->dchan, &msg, err, sizeof err), 0);
    } while (ch_msg_channel (msg) == CH_CELLVM);
    return msg;
}

static ch_msg_t *
s_expect (s_fixture_t *f, const char *type, const json_t *parent)
{
    ch_msg_t *msg = s_recv (f);
    assert_string_equal (ch_msg_type (msg), type);
    if (parent)
        assert_true (json_equal (ch_msg_parent (msg), parent));
    return msg;
}

static void
s_expect_status (s_fixture_t *f, const char *state, const json_t *parent)
{
    ch_msg_t *m = s_expect (f, "status", parent);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m),
                                                             "execution_state")), state);
    ch_msg_destroy (&m);
}

//  Send a shell message with content (taken) and buffers; its header.
static json_t *
s_send (s_fixture_t *f, const char *type, json_t *content, int nbuf)
{
    ch_msg_t *msg = ch_msg_new (CH_SHELL, type, NULL, &content, "client");
    json_t *meta = json_pack ("{s:s}", "m", "meta");
    ch_msg_set_metadata (msg, &meta);
    for (int i = 0; i < nbuf; i++) {
        uint8_t *b = (uint8_t *) strdup (i ? "second" : "first");
        assert_int_equal (ch_msg_add_buffer (msg, &b, strlen (i ? "second" : "first")), 0);
    }
    json_t *header = json_deep_copy (ch_msg_header (msg));
    assert_int_equal (kn_chan_send (f->dchan, &msg), 0);
    return header;
}

static void
test_kn_comm_message_reaches_the_interpreter_whole (void **state)
{
    s_fixture_t *f = *state;
    json_t *req = s_send (f, "comm_msg", json_pack ("{s:s, s:{}}", "comm_id", "c1", "data"), 2);
    s_expect_status (f, "busy", req);
    ch_msg_t *m = s_expect (f, "comm_msg", req);
    assert_int_equal (ch_msg_channel (m), CH_IOPUB);
    assert_int_equal (json_integer_value (json_object_get (ch_msg_metadata (m), "k")), 2);
    assert_int_equal (json_integer_value (json_object_get (
        json_object_get (ch_msg_content (m), "data"), "echo")), 1);
    size_t len = 0;
    assert_int_equal (ch_msg_nbuffers (m), 1);
    assert_memory_equal (ch_msg_buffer (m, 0, &len), "\x00\x01\x02", 3);
    assert_int_equal (len, 3);
    ch_msg_destroy (&m);
    s_expect_status (f, "idle", req);       //  and no reply before it
    assert_int_equal (f->comms, 1);
    assert_string_equal (f->comm_type, "comm_msg");
    assert_string_equal (f->comm_msg_id, json_string_value (json_object_get (req, "msg_id")));
    assert_int_equal (f->nbuffers, 2);
    assert_string_equal (f->buffer1, "second");
    assert_string_equal (f->meta, "meta");
    json_decref (req);
    //  comm_info_request is a request: the interpreter answers it.
    req = s_send (f, "comm_info_request", json_object (), 0);
    s_expect_status (f, "busy", req);
    m = s_expect (f, "comm_info_reply", req);
    ch_msg_destroy (&m);
    s_expect_status (f, "idle", req);
    assert_int_equal (f->comms, 1);
    json_decref (req);
}

//  Explicit parents: another request's goes out even from a silent one; the
//  silent request's own (implicit or named) does not. Bad input is refused.
static void
s_check_publish (s_fixture_t *f, bool silent)
{
    json_t *c = json_pack ("{s:s, s:b}", "code", "pub", "silent", silent);
    json_t *req = s_send (f, "execute_request", c, 0);
    s_expect_status (f, "busy", req);
    for (int n = silent ? 3 : 1; n <= 3; n++) {
        json_t *other = json_pack ("{s:s}", "msg_id", "other");
        ch_msg_t *m = s_expect (f, "comm_msg", n == 3 ? other : req);
        assert_int_equal (json_integer_value (json_object_get (ch_msg_content (m), "n")), n);
        ch_msg_destroy (&m);
        json_decref (other);
    }
    ch_msg_t *m = s_expect (f, "execute_reply", req);
    ch_msg_destroy (&m);
    s_expect_status (f, "idle", req);
    json_decref (req);
    assert_int_equal (f->rc_bad [0], -EINVAL);
    assert_int_equal (f->rc_bad [1], -EINVAL);
    assert_int_equal (f->rc_bad [2], -EINVAL);
    assert_int_equal (f->rc_bad [3], -E2BIG);
}

static void
test_kn_comm_publish_msg_parents_and_silence (void **state)
{
    s_fixture_t *f = *state;
    s_check_publish (f, false);
    s_check_publish (f, true);
}

static void
test_kn_comm_without_comms_comm_open_is_closed (void **state)
{
    s_fixture_t *f = *state;
    json_t *req = s_send (f, "comm_open", json_pack ("{s:s, s:s, s:{}}", "comm_id", "c9",
                                                     "target_name", "t", "data"), 0);
    s_expect_status (f, "busy", req);
    ch_msg_t *m = s_expect (f, "comm_close", req);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "comm_id")),
                         "c9");
    ch_msg_destroy (&m);
    s_expect_status (f, "idle", req);
    json_decref (req);
    req = s_send (f, "comm_msg", json_pack ("{s:s, s:{}}", "comm_id", "c9", "data"), 1);
    s_expect_status (f, "busy", req);
    s_expect_status (f, "idle", req);
    json_decref (req);
    assert_int_equal (f->comms, 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_kn_comm_message_reaches_the_interpreter_whole, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_comm_publish_msg_parents_and_silence, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_comm_without_comms_comm_open_is_closed, s_setup_no_comms, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
