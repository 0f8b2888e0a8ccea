/*  test_kn_kernel - the protocol core driven over a socketpair, with a mock
 *  interpreter behind the seam: ordering, parents, stop_on_error, bad input,
 *  the deferred reseed after an entropy hello, the chdir into /workspace on
 *  each driver hello (in a chroot of our own, as root).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kn_chan.h"
#include "ch_frame.h"
#include "kn_kernel.h"
#include "tu.h"

typedef struct {
    int fds [2];            //  [0] driver side, [1] kernel side
    kn_chan_t *kchan, *dchan;
    kn_kernel_t *kernel;
    pthread_t thread;
    int handled;            //  requests the mock saw
    pthread_mutex_t mu;     //  guards the rest, written by the kernel's thread
    pthread_cond_t cv;
    char calls [16][32];    //  msg_types the mock saw, in order
    int ncalls;
    char entropy [64];      //  of the last reseed
    int unread_at_reseed;   //  bytes the driver had not read at the last reseed
    char code [32];         //  of the last execute_request
    bool silent;            //  ... and whether it was silent
    bool blocked, release;  //  "block": the mock waits for release
} s_fixture_t;

static void
s_record (s_fixture_t *f, const char *type, const json_t *content)
{
    pthread_mutex_lock (&f->mu);
    if (f->ncalls < 16)
        snprintf (f->calls [f->ncalls++], sizeof f->calls [0], "%s", type);
    if (strcmp (type, "cellvm_reseed_request") == 0) {
        const char *e = json_string_value (json_object_get (content, "entropy"));
        snprintf (f->entropy, sizeof f->entropy, "%s", e ? e : "");
        ioctl (f->fds [0], FIONREAD, &f->unread_at_reseed);
    }
    if (strcmp (type, "execute_request") == 0) {
        const char *code = json_string_value (json_object_get (content, "code"));
        snprintf (f->code, sizeof f->code, "%s", code ? code : "");
        f->silent = json_is_true (json_object_get (content, "silent"));
    }
    pthread_mutex_unlock (&f->mu);
}

static void
s_block (s_fixture_t *f)
{
    pthread_mutex_lock (&f->mu);
    f->blocked = true;
    pthread_cond_broadcast (&f->cv);
    while (!f->release)
        pthread_cond_wait (&f->cv, &f->mu);
    pthread_mutex_unlock (&f->mu);
}

//  The mock: "fail" errors, "print" publishes a stream, "slow" sleeps first,
//  "block" waits for the test to release it.
static json_t *
s_mock_handle (void *ctx, const char *type, const json_t *content)
{
    s_fixture_t *f = ctx;
    f->handled++;
    s_record (f, type, content);
    const char *code = json_string_value (json_object_get (content, "code"));
    if (strcmp (type, "execute_request") != 0)
        return json_pack ("{s:s, s:s}", "status", "ok", "echo", type);
    if (code && strstr (code, "block"))
        s_block (f);
    if (code && strstr (code, "slow"))
        usleep (100 * 1000);
    if (code && strstr (code, "print")) {
        json_t *c = json_pack ("{s:s, s:s}", "name", "stdout", "text", "hi\n");
        kn_kernel_publish (f->kernel, "stream", &c);
    }
    if (code && strstr (code, "spliced")) {
        //  What the capture sends (escaped text) and _cellvm.publish (JSON text).
        kn_kernel_stream (f->kernel, "stderr", "q\\\"\\n\xc3\xa9", 7);
        kn_kernel_stream_raw (f->kernel, "stdout", "raw \xff\n", 6);    //  a large write's
        const char *dd = " {\"data\": {\"text/plain\": \"'\\u00e9'\"}, \"metadata\": {}} ";
        kn_kernel_publish_json (f->kernel, "display_data", dd, strlen (dd));
        assert_int_equal (kn_kernel_publish_json (f->kernel, "display_data", "[1]", 3), -EINVAL);
    }
    if (code && strstr (code, "fail"))
        return json_pack ("{s:s, s:s, s:s, s:[], s:i}", "status", "error", "ename", "E",
                          "evalue", "boom", "traceback", "execution_count", 1);
    return json_pack ("{s:s, s:i}", "status", "ok", "execution_count", f->handled);
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
s_setup_with (void **state, const char *outdir)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    pthread_mutex_init (&f->mu, NULL);
    pthread_cond_init (&f->cv, NULL);
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, f->fds), 0);
    f->kchan = kn_chan_new (f->fds [1], 1 << 20);
    f->dchan = kn_chan_new (f->fds [0], 1 << 20);
    kn_kernel_config_t cfg = { outdir, "t" };
    f->kernel = kn_kernel_new (f->kchan, &cfg);
    assert_non_null (f->kernel);
    kn_interp_t interp = { .ctx = f, .handle = s_mock_handle, .info = s_mock_info };
    kn_kernel_set_interp (f->kernel, &interp);
    pthread_create (&f->thread, NULL, s_run, f);
    *state = f;
    return 0;
}

static int
s_setup (void **state)
{
    return s_setup_with (state, NULL);
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    pthread_mutex_lock (&f->mu);        //  a failed test may leave the mock blocked
    f->release = true;
    pthread_cond_broadcast (&f->cv);
    pthread_mutex_unlock (&f->mu);
    shutdown (f->fds [0], SHUT_RDWR);   //  EOF: the kernel's run returns
    pthread_join (f->thread, NULL);
    kn_kernel_destroy (&f->kernel);
    kn_chan_destroy (&f->kchan);
    kn_chan_destroy (&f->dchan);
    close (f->fds [0]);
    close (f->fds [1]);
    pthread_mutex_destroy (&f->mu);
    pthread_cond_destroy (&f->cv);
    free (f);
    return 0;
}

static ch_msg_t *
s_recv (s_fixture_t *f)
{
    ch_msg_t *msg = NULL;
    char err [128];
    assert_int_equal (kn_chan_recv (f->dchan, &msg, err, sizeof err), 0);
    return msg;
}

//  Receive and check type (and, for iopub status, the state). Returns it.
static ch_msg_t *
s_expect (s_fixture_t *f, const char *type, const char *state_or_null)
{
    ch_msg_t *msg = s_recv (f);
    assert_string_equal (ch_msg_type (msg), type);
    if (state_or_null)
        assert_string_equal (json_string_value (json_object_get (ch_msg_content (msg),
                             "execution_state")), state_or_null);
    return msg;
}

static json_t *
s_send (s_fixture_t *f, ch_channel_t ch, const char *type, const char *code)
{
    json_t *c = code ? json_pack ("{s:s}", "code", code) : json_object ();
    ch_msg_t *msg = ch_msg_new (ch, type, NULL, &c, "client");
    json_t *header = json_deep_copy (ch_msg_header (msg));
    assert_int_equal (kn_chan_send (f->dchan, &msg), 0);
    return header;
}

static void
s_expect_hello (s_fixture_t *f)
{
    ch_msg_t *m = s_expect (f, "hello", NULL);
    assert_int_equal (ch_msg_channel (m), CH_CELLVM);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "protocol")),
                         "cellvm-channel");
    ch_msg_destroy (&m);
}

static void
test_kn_kernel_says_hello_and_answers_hello (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *c = json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-channel", "version", 1,
                           "role", "driver");
    ch_msg_t *hello = ch_msg_new (CH_CELLVM, "hello", NULL, &c, "d");
    assert_int_equal (kn_chan_send (f->dchan, &hello), 0);
    s_expect_hello (f);
}

//  busy, <middle>, reply, idle; all with the request as parent.
static void
s_expect_bracketed (s_fixture_t *f, json_t *req, const char *middle, const char *reply)
{
    const char *seq [4] = { "status", middle, reply, "status" };
    for (int i = 0; i < 4; i++) {
        if (!seq [i])
            continue;
        ch_msg_t *m = s_expect (f, seq [i], i == 0 ? "busy" : i == 3 ? "idle" : NULL);
        assert_true (json_equal (ch_msg_parent (m), req));
        ch_msg_destroy (&m);
    }
}

static void
test_kn_kernel_brackets_requests_with_busy_idle (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *req = s_send (f, CH_SHELL, "execute_request", "print");
    s_expect_bracketed (f, req, "stream", "execute_reply");
    json_decref (req);
    req = s_send (f, CH_SHELL, "kernel_info_request", NULL);
    s_expect_bracketed (f, req, NULL, "kernel_info_reply");
    json_decref (req);
    req = s_send (f, CH_CONTROL, "kernel_info_request", NULL);
    s_expect_bracketed (f, req, NULL, "kernel_info_reply");
    json_decref (req);
}

//  Messages the kernel splices together (stream text escaped once, content
//  JSON from Python as it is) are whole envelopes with the request as parent;
//  a silent request sends none of them.
static void
test_kn_kernel_spliced_messages_are_whole_envelopes (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *req = s_send (f, CH_SHELL, "execute_request", "spliced");
    ch_msg_t *m = s_expect (f, "status", "busy");
    ch_msg_destroy (&m);
    m = s_expect (f, "stream", NULL);
    assert_int_equal (ch_msg_channel (m), CH_IOPUB);
    assert_true (json_equal (ch_msg_parent (m), req));
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "name")), "stderr");
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "text")),
                         "q\"\n\xc3\xa9");
    assert_string_equal (json_string_value (json_object_get (ch_msg_header (m), "session")),
                         kn_kernel_session (f->kernel));
    ch_msg_destroy (&m);
    //  A raw text: content {"name"}, the bytes as its one buffer, as written.
    m = s_expect (f, "stream", NULL);
    assert_true (json_equal (ch_msg_parent (m), req));
    json_t *name_only = json_pack ("{s:s}", "name", "stdout");
    assert_true (json_equal (ch_msg_content (m), name_only));
    json_decref (name_only);
    size_t blen = 0;
    const uint8_t *b = ch_msg_buffer (m, 0, &blen);
    assert_int_equal (ch_msg_nbuffers (m), 1);
    assert_int_equal (blen, 6);
    assert_memory_equal (b, "raw \xff\n", 6);
    ch_msg_destroy (&m);
    m = s_expect (f, "display_data", NULL);
    assert_true (json_equal (ch_msg_parent (m), req));
    json_t *data = json_object_get (ch_msg_content (m), "data");
    assert_string_equal (json_string_value (json_object_get (data, "text/plain")), "'\xc3\xa9'");
    ch_msg_destroy (&m);
    m = s_expect (f, "execute_reply", NULL);
    ch_msg_destroy (&m);
    m = s_expect (f, "status", "idle");
    ch_msg_destroy (&m);
    json_decref (req);
    //  Silent: busy, reply, idle and nothing else.
    json_t *c = json_pack ("{s:s, s:b}", "code", "spliced", "silent", 1);
    ch_msg_t *msg = ch_msg_new (CH_SHELL, "execute_request", NULL, &c, "client");
    assert_int_equal (kn_chan_send (f->dchan, &msg), 0);
    const char *want [] = { "status", "execute_reply", "status" };
    for (int i = 0; i < 3; i++) {
        m = s_expect (f, want [i], NULL);
        ch_msg_destroy (&m);
    }
}

static void
test_kn_kernel_stop_on_error_aborts_only_queued_executes (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *r1 = s_send (f, CH_SHELL, "execute_request", "slow fail");
    json_t *r2 = s_send (f, CH_SHELL, "execute_request", "ok");
    json_t *r3 = s_send (f, CH_SHELL, "complete_request", "ok");
    s_expect_bracketed (f, r1, NULL, "execute_reply");
    //  r2 was queued: aborted without reaching the interpreter. r3 runs.
    ch_msg_t *m = s_expect (f, "status", "busy");
    ch_msg_destroy (&m);
    m = s_expect (f, "execute_reply", NULL);
    assert_true (json_equal (ch_msg_parent (m), r2));
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "status")), "error");
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "ename")),
                         "ExecutionAborted");
    ch_msg_destroy (&m);
    m = s_expect (f, "status", "idle");
    ch_msg_destroy (&m);
    s_expect_bracketed (f, r3, NULL, "complete_reply");
    assert_int_equal (f->handled, 2);
    json_t *r4 = s_send (f, CH_SHELL, "execute_request", "ok");
    s_expect_bracketed (f, r4, NULL, "execute_reply");
    assert_int_equal (f->handled, 3);
    json_decref (r1); json_decref (r2); json_decref (r3); json_decref (r4);
}

static void
test_kn_kernel_unknown_control_type_gets_error_reply (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *req = s_send (f, CH_CONTROL, "frobnicate_request", NULL);
    ch_msg_t *m = s_expect (f, "status", "busy");
    ch_msg_destroy (&m);
    m = s_expect (f, "frobnicate_reply", NULL);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m), "ename")),
                         "UnknownMessageType");
    ch_msg_destroy (&m);
    m = s_expect (f, "status", "idle");
    ch_msg_destroy (&m);
    json_decref (req);
}

static void
test_kn_kernel_drops_bad_json_and_keeps_serving (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    uint8_t wire [4 + 8];
    ch_frame_encode_header (wire, 8, 1 << 20);
    memcpy (wire + 4, "{garbage", 8);
    assert_int_equal (write (f->fds [0], wire, sizeof wire), (ssize_t) sizeof wire);
    ch_msg_t *m = s_expect (f, "protocol_error", NULL);
    assert_false (json_is_true (json_object_get (ch_msg_content (m), "fatal")));
    ch_msg_destroy (&m);
    json_t *req = s_send (f, CH_SHELL, "execute_request", "ok");
    s_expect_bracketed (f, req, NULL, "execute_reply");
    json_decref (req);
}

//  ---------------------------------------------------------------------------
//  The reseed a driver hello with entropy asks for, deferred

static void
s_send_driver_hello (s_fixture_t *f, const char *entropy_or_null)
{
    json_t *c = json_pack ("{s:s, s:i, s:s, s:s?}", "protocol", "cellvm-channel", "version", 1,
                           "role", "driver", "entropy", entropy_or_null);
    ch_msg_t *hello = ch_msg_new (CH_CELLVM, "hello", NULL, &c, "d");
    assert_int_equal (kn_chan_send (f->dchan, &hello), 0);
}

//  How many times the mock saw type.
static int
s_count (s_fixture_t *f, const char *type)
{
    pthread_mutex_lock (&f->mu);
    int n = 0;
    for (int i = 0; i < f->ncalls; i++)
        n += strcmp (f->calls [i], type) == 0;
    pthread_mutex_unlock (&f->mu);
    return n;
}

//  Wait up to 2 s for the mock to have seen type n times.
static bool
s_await_count (s_fixture_t *f, const char *type, int n)
{
    for (int i = 0; i < 400 && s_count (f, type) < n; i++)
        usleep (5 * 1000);
    return s_count (f, type) >= n;
}

static void
s_assert_calls (s_fixture_t *f, int n, const char *first, const char *second)
{
    pthread_mutex_lock (&f->mu);
    assert_int_equal (f->ncalls, n);
    if (n > 0)
        assert_string_equal (f->calls [0], first);
    if (n > 1)
        assert_string_equal (f->calls [1], second);
    pthread_mutex_unlock (&f->mu);
}

static void
test_kn_kernel_reseed_waits_behind_kernel_info (void **state)
{
    s_fixture_t *f = *state;
    s_send_driver_hello (f, "AAAA");
    json_t *req = s_send (f, CH_SHELL, "kernel_info_request", NULL);
    //  Read nothing until the idle reseed ran: all the kernel sent must
    //  already have been unread then, i.e. the reply went out before it.
    assert_true (s_await_count (f, "cellvm_reseed_request", 1));
    int unread = 0;
    assert_int_equal (ioctl (f->fds [0], FIONREAD, &unread), 0);
    pthread_mutex_lock (&f->mu);
    assert_int_equal (f->unread_at_reseed, unread);
    pthread_mutex_unlock (&f->mu);
    s_expect_hello (f);     //  at start
    s_expect_hello (f);     //  the answer to ours
    s_expect_bracketed (f, req, NULL, "kernel_info_reply");
    assert_true (s_await_count (f, "execute_request", 1));     //  the warm-up
    s_assert_calls (f, 2, "cellvm_reseed_request", "execute_request");
    json_decref (req);
}

static void
test_kn_kernel_reseed_runs_once_before_execute (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    s_send_driver_hello (f, "AAAA");
    json_t *req = s_send (f, CH_SHELL, "execute_request", "ok");
    s_expect_hello (f);
    s_expect_bracketed (f, req, NULL, "execute_reply");
    usleep (300 * 1000);    //  past the idle delay: no second reseed
    s_assert_calls (f, 2, "cellvm_reseed_request", "execute_request");
    json_decref (req);
}

static void
test_kn_kernel_reseed_runs_when_idle (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    s_send_driver_hello (f, "QUJD");
    s_expect_hello (f);
    assert_true (s_await_count (f, "cellvm_reseed_request", 1));
    //  Then a warm-up: a silent `pass` that publishes nothing, counts nothing.
    assert_true (s_await_count (f, "execute_request", 1));
    usleep (100 * 1000);
    int unread = -1;
    assert_int_equal (ioctl (f->fds [0], FIONREAD, &unread), 0);
    assert_int_equal (unread, 0);
    pthread_mutex_lock (&f->mu);
    assert_string_equal (f->entropy, "QUJD");
    assert_string_equal (f->code, "pass");
    assert_true (f->silent);
    pthread_mutex_unlock (&f->mu);
    s_assert_calls (f, 2, "cellvm_reseed_request", "execute_request");
}

//  Two entropy hellos queued behind a running cell: one reseed, the newer.
static void
test_kn_kernel_newer_entropy_hello_replaces_pending (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    json_t *r1 = s_send (f, CH_SHELL, "execute_request", "block");
    pthread_mutex_lock (&f->mu);
    while (!f->blocked)
        pthread_cond_wait (&f->cv, &f->mu);
    pthread_mutex_unlock (&f->mu);
    s_send_driver_hello (f, "T0xE");
    s_send_driver_hello (f, "TkVX");
    json_t *r2 = s_send (f, CH_SHELL, "execute_request", "ok");
    ch_msg_t *m = s_expect (f, "status", "busy");
    ch_msg_destroy (&m);
    s_expect_hello (f);
    s_expect_hello (f);
    pthread_mutex_lock (&f->mu);
    f->release = true;
    pthread_cond_broadcast (&f->cv);
    pthread_mutex_unlock (&f->mu);
    m = s_expect (f, "execute_reply", NULL);
    ch_msg_destroy (&m);
    m = s_expect (f, "status", "idle");
    ch_msg_destroy (&m);
    s_expect_bracketed (f, r2, NULL, "execute_reply");
    pthread_mutex_lock (&f->mu);
    assert_int_equal (f->ncalls, 3);
    assert_string_equal (f->calls [1], "cellvm_reseed_request");
    assert_string_equal (f->entropy, "TkVX");
    pthread_mutex_unlock (&f->mu);
    json_decref (r1);
    json_decref (r2);
}

static void
test_kn_kernel_hello_without_entropy_does_not_reseed (void **state)
{
    s_fixture_t *f = *state;
    s_expect_hello (f);
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    usleep (300 * 1000);    //  past the idle delay
    json_t *req = s_send (f, CH_SHELL, "execute_request", "ok");
    s_expect_bracketed (f, req, NULL, "execute_reply");
    s_assert_calls (f, 1, "execute_request", NULL);
    json_decref (req);
}

//  ---------------------------------------------------------------------------
//  Into /workspace on each driver hello. The kernel runs in this process, so
//  these tests give it a root of its own (chroot: root only, else skipped)
//  with a /workspace in it, and leave through a saved fd of the real root.

static struct {
    char dir [TU_DIR_MAX];      //  the chroot, as the real root sees it
    int root_fd, cwd_fd;        //  the real root and cwd, to go back
    bool in;                    //  chrooted: the test may run
    int why;                    //  else chroot's errno
} s_jail;

static int
s_setup_jail (void **state, const char *outdir)
{
    char ws [PATH_MAX];
    tu_tmpdir (s_jail.dir, sizeof s_jail.dir, "test_kn_kernel");
    assert_int_equal (mkdir (tu_path (ws, sizeof ws, s_jail.dir, "workspace"), 0755), 0);
    s_jail.root_fd = open ("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    s_jail.cwd_fd = open (".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true (s_jail.root_fd >= 0 && s_jail.cwd_fd >= 0);
    s_jail.in = chroot (s_jail.dir) == 0;
    s_jail.why = s_jail.in ? 0 : errno;
    assert_int_equal (chdir ("/"), 0);
    return s_setup_with (state, s_jail.in ? outdir : NULL);
}

//  The guest's layout: outdir /workspace/out.
static int
s_setup_guest (void **state)
{
    return s_setup_jail (state, "/workspace/out");
}

//  The local backend's: a private workspace elsewhere.
static int
s_setup_local (void **state)
{
    return s_setup_jail (state, "/run/session/workspace/out");
}

static int
s_teardown_jail (void **state)
{
    s_teardown (state);
    if (s_jail.in) {
        assert_int_equal (fchdir (s_jail.root_fd), 0);
        assert_int_equal (chroot ("."), 0);
    }
    assert_int_equal (fchdir (s_jail.cwd_fd), 0);
    close (s_jail.root_fd);
    close (s_jail.cwd_fd);
    tu_rmtree (s_jail.dir);
    return 0;
}

static const char *
s_cwd (char *buf, size_t len)
{
    assert_non_null (getcwd (buf, len));
    return buf;
}

static void
test_kn_kernel_driver_hello_enters_the_workspace (void **state)
{
    s_fixture_t *f = *state;
    if (!s_jail.in)
        tu_skip ("no chroot of its own (%s): not root", strerror (s_jail.why));
    char cwd [PATH_MAX];
    s_expect_hello (f);                 //  its own hello moves nothing
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/");
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/workspace");
    //  A re-hello (after a restore) goes back there from wherever it is.
    assert_int_equal (chdir ("/"), 0);
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/workspace");
}

//  Not deferred with the reseed: in /workspace while the main thread is
//  still busy and has not reseeded.
static void
test_kn_kernel_entropy_hello_enters_the_workspace_at_once (void **state)
{
    s_fixture_t *f = *state;
    if (!s_jail.in)
        tu_skip ("no chroot of its own (%s): not root", strerror (s_jail.why));
    s_expect_hello (f);
    json_t *r1 = s_send (f, CH_SHELL, "execute_request", "block");
    pthread_mutex_lock (&f->mu);
    while (!f->blocked)
        pthread_cond_wait (&f->cv, &f->mu);
    pthread_mutex_unlock (&f->mu);
    ch_msg_t *m = s_expect (f, "status", "busy");
    ch_msg_destroy (&m);
    s_send_driver_hello (f, "QUJD");
    s_expect_hello (f);
    char cwd [PATH_MAX];
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/workspace");
    assert_int_equal (s_count (f, "cellvm_reseed_request"), 0);
    pthread_mutex_lock (&f->mu);
    f->release = true;
    pthread_cond_broadcast (&f->cv);
    pthread_mutex_unlock (&f->mu);
    m = s_expect (f, "execute_reply", NULL);
    ch_msg_destroy (&m);
    m = s_expect (f, "status", "idle");
    ch_msg_destroy (&m);
    assert_true (s_await_count (f, "cellvm_reseed_request", 1));
    json_decref (r1);
}

//  No /workspace (ENOENT), or not a directory (ENOTDIR): the hello is
//  answered, the cwd kept, and cells still run.
static void
test_kn_kernel_hello_without_a_workspace_keeps_the_cwd (void **state)
{
    s_fixture_t *f = *state;
    if (!s_jail.in)
        tu_skip ("no chroot of its own (%s): not root", strerror (s_jail.why));
    s_expect_hello (f);
    tu_rmtree ("/workspace");
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    char cwd [PATH_MAX];
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/");
    tu_write_file ("/", "workspace", "a file");
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/");
    json_t *req = s_send (f, CH_SHELL, "execute_request", "ok");
    s_expect_bracketed (f, req, NULL, "execute_reply");
    json_decref (req);
}

//  A kernel whose outdir is not under /workspace (the local backend's) keeps
//  its cwd: a host's /workspace is not its own.
static void
test_kn_kernel_local_kernel_keeps_its_cwd_on_hello (void **state)
{
    s_fixture_t *f = *state;
    if (!s_jail.in)
        tu_skip ("no chroot of its own (%s): not root", strerror (s_jail.why));
    s_expect_hello (f);
    assert_int_equal (chdir ("/run"), 0);
    s_send_driver_hello (f, NULL);
    s_expect_hello (f);
    char cwd [PATH_MAX];
    assert_string_equal (s_cwd (cwd, sizeof cwd), "/run");
}

int
main (void)
{
    signal (SIGPIPE, SIG_IGN);          //  as cellvm-kernel: a failed test may leave replies unread
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_kn_kernel_says_hello_and_answers_hello, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_brackets_requests_with_busy_idle, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_spliced_messages_are_whole_envelopes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_stop_on_error_aborts_only_queued_executes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_unknown_control_type_gets_error_reply, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_drops_bad_json_and_keeps_serving, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_reseed_waits_behind_kernel_info, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_reseed_runs_once_before_execute, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_reseed_runs_when_idle, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_newer_entropy_hello_replaces_pending, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_hello_without_entropy_does_not_reseed, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_kernel_driver_hello_enters_the_workspace, s_setup_guest, s_teardown_jail),
        cmocka_unit_test_setup_teardown (test_kn_kernel_entropy_hello_enters_the_workspace_at_once, s_setup_guest, s_teardown_jail),
        cmocka_unit_test_setup_teardown (test_kn_kernel_hello_without_a_workspace_keeps_the_cwd, s_setup_guest, s_teardown_jail),
        cmocka_unit_test_setup_teardown (test_kn_kernel_local_kernel_keeps_its_cwd_on_hello, s_setup_local, s_teardown_jail),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
