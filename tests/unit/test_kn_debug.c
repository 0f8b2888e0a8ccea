/*  test_kn_debug - debug_request in the kernel core, with a mock
 *  interpreter: busy, the interpreter's reply (as a debug_reply on control),
 *  idle; while one debug request waits in the interpreter, the reader still
 *  answers other control requests; without the debug seam, and when the
 *  interpreter gives no object, a failed DAP response.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
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
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool release;           //  the blocking mock may return
} s_fixture_t;

//  command "block" waits until released; "none" gives no object; others echo.
static json_t *
s_mock_debug (void *ctx, const json_t *header, const json_t *content)
{
    s_fixture_t *f = ctx;
    const char *cmd = json_string_value (json_object_get (content, "command"));
    if (cmd && strcmp (cmd, "block") == 0) {
        pthread_mutex_lock (&f->lock);
        while (!f->release)
            pthread_cond_wait (&f->cond, &f->lock);
        pthread_mutex_unlock (&f->lock);
    }
    if (cmd && strcmp (cmd, "none") == 0)
        return NULL;
    return json_pack ("{s:s, s:O, s:b, s:s?, s:O}", "type", "response", "request_seq",
                      json_object_get (content, "seq"), "success", 1, "command", cmd,
                      "msg_id", json_object_get (header, "msg_id"));
}

static json_t *
s_mock_handle (void *ctx, const char *type, const json_t *content)
{
    (void) ctx; (void) type; (void) content;
    return json_pack ("{s:s}", "status", "ok");
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
s_setup_with (void **state, bool debug)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    pthread_mutex_init (&f->lock, NULL);
    pthread_cond_init (&f->cond, NULL);
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, f->fds), 0);
    f->kchan = kn_chan_new (f->fds [1], 1 << 20);
    f->dchan = kn_chan_new (f->fds [0], 1 << 20);
    kn_kernel_config_t cfg = { NULL, "t" };
    f->kernel = kn_kernel_new (f->kchan, &cfg);
    assert_non_null (f->kernel);
    kn_interp_t interp = { .ctx = f, .handle = s_mock_handle, .info = s_mock_info,
                           .debug = debug ? s_mock_debug : NULL };
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
s_setup_no_debug (void **state)
{
    return s_setup_with (state, false);
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    pthread_mutex_lock (&f->lock);
    f->release = true;
    pthread_cond_broadcast (&f->cond);
    pthread_mutex_unlock (&f->lock);
    shutdown (f->fds [0], SHUT_RDWR);   //  EOF: the kernel's run returns
    pthread_join (f->thread, NULL);
    kn_kernel_destroy (&f->kernel);
    kn_chan_destroy (&f->kchan);
    kn_chan_destroy (&f->dchan);
    close (f->fds [0]);
    close (f->fds [1]);
    pthread_mutex_destroy (&f->lock);
    pthread_cond_destroy (&f->cond);
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

//  The next message: its type, its parent's msg_id, and (status) its state.
static void
s_expect (s_fixture_t *f, const char *type, const char *parent_id, const char *state)
{
    ch_msg_t *m = s_recv (f);
    assert_string_equal (ch_msg_type (m), type);
    assert_string_equal (json_string_value (json_object_get (ch_msg_parent (m), "msg_id")),
                         parent_id);
    if (state)
        assert_string_equal (json_string_value (json_object_get (ch_msg_content (m),
                                                                 "execution_state")), state);
    ch_msg_destroy (&m);
}

//  Send on control; the request's msg_id (caller frees).
static char *
s_control (s_fixture_t *f, const char *type, json_t *content)
{
    ch_msg_t *msg = ch_msg_new (CH_CONTROL, type, NULL, &content, "client");
    char *id = strdup (ch_msg_id (msg));
    assert_int_equal (kn_chan_send (f->dchan, &msg), 0);
    return id;
}

static void
test_kn_debug_reply_comes_from_the_interpreter (void **state)
{
    s_fixture_t *f = *state;
    char *id = s_control (f, "debug_request", json_pack ("{s:s, s:i, s:s}", "type", "request",
                                                         "seq", 7, "command", "debugInfo"));
    s_expect (f, "status", id, "busy");
    ch_msg_t *r = s_recv (f);
    assert_string_equal (ch_msg_type (r), "debug_reply");
    assert_int_equal (ch_msg_channel (r), CH_CONTROL);
    json_t *c = ch_msg_content (r);
    assert_true (json_is_true (json_object_get (c, "success")));
    assert_int_equal (json_integer_value (json_object_get (c, "request_seq")), 7);
    assert_string_equal (json_string_value (json_object_get (c, "msg_id")), id);
    ch_msg_destroy (&r);
    s_expect (f, "status", id, "idle");
    free (id);
}

static void
test_kn_debug_waits_but_control_goes_on (void **state)
{
    s_fixture_t *f = *state;
    char *slow = s_control (f, "debug_request", json_pack ("{s:s, s:i, s:s}", "type",
                                                           "request", "seq", 1, "command",
                                                           "block"));
    s_expect (f, "status", slow, "busy");
    char *info = s_control (f, "kernel_info_request", json_object ());
    s_expect (f, "status", info, "busy");
    s_expect (f, "kernel_info_reply", info, NULL);
    s_expect (f, "status", info, "idle");
    pthread_mutex_lock (&f->lock);
    f->release = true;
    pthread_cond_broadcast (&f->cond);
    pthread_mutex_unlock (&f->lock);
    s_expect (f, "debug_reply", slow, NULL);
    s_expect (f, "status", slow, "idle");
    free (slow);
    free (info);
}

static void
s_expect_failed (s_fixture_t *f, const char *command)
{
    char *id = s_control (f, "debug_request", json_pack ("{s:s, s:i, s:s}", "type", "request",
                                                         "seq", 3, "command", command));
    s_expect (f, "status", id, "busy");
    ch_msg_t *r = s_recv (f);
    assert_string_equal (ch_msg_type (r), "debug_reply");
    json_t *c = ch_msg_content (r);
    assert_true (json_is_false (json_object_get (c, "success")));
    assert_int_equal (json_integer_value (json_object_get (c, "request_seq")), 3);
    assert_string_equal (json_string_value (json_object_get (c, "command")), command);
    assert_non_null (json_string_value (json_object_get (c, "message")));
    ch_msg_destroy (&r);
    s_expect (f, "status", id, "idle");
    free (id);
}

static void
test_kn_debug_no_object_fails (void **state)
{
    s_expect_failed (*state, "none");
}

static void
test_kn_debug_without_the_seam_fails (void **state)
{
    s_expect_failed (*state, "initialize");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_kn_debug_reply_comes_from_the_interpreter,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_debug_waits_but_control_goes_on,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_debug_no_object_fails, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_debug_without_the_seam_fails,
                                         s_setup_no_debug, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
