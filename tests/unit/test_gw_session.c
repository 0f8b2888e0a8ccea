/*  test_gw_session - the session with a mock backend and a scripted kernel.

    The mock backend's start hands the session one end of a socketpair; the
    test plays the kernel on the other end with the same ch_frame/ch_msg
    codecs the real kernel uses. What the session sends to clients is
    captured from its emit callback.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_log.h"
#include "gw_session.h"
#include "ch_frame.h"
#include "ch_msg.h"

//  --------------------------------------------------------------------------
//  Mock backend.

typedef struct {
    int kernel_fd;                              //  the test's end, -1 when none
    int starts, kills, interrupts;
    int fail_starts;                            //  this many starts fail first
    int connect_after;                          //  start returns no fd; connect gives it after n tries
    int pending_fd;                             //  the session's end, until connect hands it out
    bool sync_markers;                          //  a virtio port: markers before hellos
    bool exited;                                //  reap reports this exit
    gw_exit_t exit;
} mock_t;

static int
mock_start (void *ctx, int *fd_p, char *err, size_t errlen)
{
    mock_t *m = ctx;
    if (m->fail_starts > 0) {
        m->fail_starts--;
        snprintf (err, errlen, "mock start failure");
        return -ENOEXEC;
    }
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sv), 0);
    if (m->kernel_fd >= 0)
        close (m->kernel_fd);
    m->kernel_fd = sv [1];
    m->exited = false;
    m->starts++;
    *fd_p = m->connect_after ? -1 : sv [0];
    m->pending_fd = m->connect_after ? sv [0] : -1;
    return 0;
}

static int
mock_connect (void *ctx, int *fd_p, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    mock_t *m = ctx;
    if (m->connect_after-- > 1)
        return -EAGAIN;
    *fd_p = m->pending_fd;
    m->pending_fd = -1;
    return 0;
}


static int
mock_kill (void *ctx)
{
    mock_t *m = ctx;
    m->kills++;
    if (!m->exited)
        m->exit = (gw_exit_t) { .exit_code = -1, .signal = SIGKILL };
    m->exited = true;
    return 0;
}

static int
mock_reap (void *ctx, gw_exit_t *exit_p)
{
    mock_t *m = ctx;
    if (m->starts == 0)
        return -ECHILD;
    if (!m->exited)
        return -EAGAIN;
    *exit_p = m->exit;
    m->exited = false;
    return 0;
}

static int mock_pid (void *ctx) { (void) ctx; return 4242; }

//  The backend's event: the VM says the kernel died, in its own words.
static int mock_event_fd (void *ctx) { (void) ctx; return 0; }

static int
mock_on_event (void *ctx)
{
    mock_t *m = ctx;
    m->exit = (gw_exit_t) { .exit_code = -1, .vm_died = true };
    snprintf (m->exit.detail, sizeof m->exit.detail,
              "The session's virtual machine itself stopped; /workspace is gone. "
              "A new VM is starting");
    m->exited = true;
    return 1;
}
static void mock_destroy (void *ctx) { (void) ctx; }

//  --------------------------------------------------------------------------
//  Capture of what clients receive.

#define MAX_SEEN 64
typedef struct {
    ch_channel_t channel;
    char ids [64];                              //  first identity / topic frame
    char type [64];
    json_t *header, *parent, *content;
} seen_t;

typedef struct {
    mock_t mock;
    gw_session_t *session;
    seen_t seen [MAX_SEEN];
    size_t nseen;
} fixture_t;

static void
on_emit (void *arg, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    fixture_t *f = arg;
    assert_true (f->nseen < MAX_SEEN);
    seen_t *s = &f->seen [f->nseen++];
    s->channel = ch;
    const gw_frame_t *id = gw_frames_get (ids, 0);
    snprintf (s->ids, sizeof s->ids, "%.*s", id ? (int) id->size : 0, id ? (char *) id->data : "");
    snprintf (s->type, sizeof s->type, "%s", ch_msg_type (msg));
    s->header = json_deep_copy (ch_msg_header (msg));
    s->parent = json_deep_copy (ch_msg_parent (msg));
    s->content = json_deep_copy (ch_msg_content (msg));
}

//  The first captured message of this type at or after *from (NULL if none).
static seen_t *
find_seen (fixture_t *f, const char *type, size_t from)
{
    for (size_t i = from; i < f->nseen; i++)
        if (strcmp (f->seen [i].type, type) == 0)
            return &f->seen [i];
    return NULL;
}

static const char *
status_of (const seen_t *s)
{
    return json_string_value (json_object_get (s->content, "execution_state"));
}

//  --------------------------------------------------------------------------
//  Playing the kernel.

static void
kernel_send_raw (fixture_t *f, const void *data, size_t len)
{
    assert_int_equal (write (f->mock.kernel_fd, data, len), (ssize_t) len);
}

static void
kernel_send (fixture_t *f, ch_channel_t ch, const char *type, const json_t *parent,
             json_t *content)
{
    ch_msg_t *msg = ch_msg_new (ch, type, parent, &content, "kernel-session");
    size_t len = 0;
    char *json = ch_msg_encode (msg, &len);
    uint8_t hdr [CH_FRAME_HDR];
    ch_frame_encode_header (hdr, len, CH_FRAME_MAX_DEFAULT);
    kernel_send_raw (f, hdr, sizeof hdr);
    kernel_send_raw (f, json, len);
    free (json);
    ch_msg_destroy (&msg);
}

static void
kernel_hello (fixture_t *f)
{
    kernel_send (f, CH_CELLVM, "hello", NULL,
                 json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-channel", "version", 1,
                            "role", "kernel"));
}

//  Next message the session sent to the kernel, or NULL after timeout_ms.
static ch_msg_t *
kernel_recv (fixture_t *f, int timeout_ms)
{
    ch_frame_dec_t *dec = ch_frame_dec_new (CH_FRAME_MAX_DEFAULT);
    ch_msg_t *msg = NULL;
    struct pollfd p = { f->mock.kernel_fd, POLLIN, 0 };
    while (!ch_frame_dec_ready (dec) && poll (&p, 1, timeout_ms) == 1) {
        uint8_t byte;
        if (read (f->mock.kernel_fd, &byte, 1) != 1)
            break;
        assert_true (ch_frame_dec_feed (dec, &byte, 1) == 1);
    }
    size_t len = 0;
    uint8_t *frame = ch_frame_dec_take (dec, &len);
    if (frame)
        assert_int_equal (ch_msg_decode (frame, len, &msg, NULL, 0), 0);
    free (frame);
    ch_frame_dec_destroy (&dec);
    return msg;
}

//  Let the session read what the kernel wrote and run its timers.
static void
pump (fixture_t *f, int ms)
{
    int64_t until = zclock_mono () + ms;
    do {
        int fd = gw_session_fd (f->session);
        struct pollfd p = { fd, POLLIN, 0 };
        if (fd >= 0 && poll (&p, 1, 5) == 1)
            gw_session_readable (f->session);
        else if (fd < 0)
            zclock_sleep (5);
        gw_session_tick (f->session);
    } while (zclock_mono () < until && !gw_session_finished (f->session));
}

//  --------------------------------------------------------------------------
//  Playing the client.

static json_t *
client_request (fixture_t *f, ch_channel_t ch, const char *type, const char *msg_id,
                json_t *content, int expect_rc)
{
    json_t *header = json_pack ("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id,
                                "session", "client-session", "username", "tester",
                                "date", "2026-11-29T10:00:00.000000Z", "msg_type", type,
                                "version", "5.3");
    json_t *kept = json_deep_copy (header);
    if (!content)
        content = json_object ();
    ch_msg_t *msg = ch_msg_from_parts (ch, &header, NULL, NULL, &content);
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, "client-id", 9);
    assert_int_equal (gw_session_request (f->session, &ids, &msg), expect_rc);
    assert_null (msg);
    assert_null (ids);
    return kept;
}

static json_t *
execute (fixture_t *f, const char *msg_id, const char *code)
{
    return client_request (f, CH_SHELL, "execute_request", msg_id,
                           json_pack ("{s:s, s:b, s:b}", "code", code, "silent", 0,
                                      "allow_stdin", 1), 0);
}

//  Receive the next request at the kernel and check it is msg_id.
static ch_msg_t *
expect_at_kernel (fixture_t *f, const char *msg_id)
{
    ch_msg_t *msg = kernel_recv (f, 1000);
    assert_non_null (msg);
    assert_string_equal (ch_msg_id (msg), msg_id);
    return msg;
}

//  --------------------------------------------------------------------------
//  Fixture.

static int
setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    f->mock.kernel_fd = -1;
    f->mock.pending_fd = -1;
    *state = f;
    return 0;
}

static void
start_session (fixture_t *f, const gw_session_opts_t *opts)
{
    gw_backend_t *backend = calloc (1, sizeof *backend);
    *backend = (gw_backend_t) { .name = "mock", .start = mock_start, .connect = mock_connect,
                                .kill = mock_kill, .reap = mock_reap, .pid = mock_pid,
                                .event_fd = mock_event_fd, .on_event = mock_on_event,
                                .destroy = mock_destroy, .ctx = &f->mock,
                                .sync_markers = f->mock.sync_markers };
    f->session = gw_session_new (&backend, opts, on_emit, f);
    assert_null (backend);
    char err [256];
    assert_int_equal (gw_session_start (f->session, err, sizeof err), 0);
}

//  Start, read the driver hello, answer it: the kernel is ready.
static void
start_ready (fixture_t *f)
{
    start_session (f, NULL);
    ch_msg_t *hello = kernel_recv (f, 1000);
    assert_non_null (hello);
    ch_msg_destroy (&hello);
    kernel_hello (f);
    pump (f, 20);
}

static int
teardown (void **state)
{
    fixture_t *f = *state;
    gw_session_destroy (&f->session);
    for (size_t i = 0; i < f->nseen; i++) {
        json_decref (f->seen [i].header);
        json_decref (f->seen [i].parent);
        json_decref (f->seen [i].content);
    }
    if (f->mock.kernel_fd >= 0)
        close (f->mock.kernel_fd);
    if (f->mock.pending_fd >= 0)
        close (f->mock.pending_fd);
    free (f);
    return 0;
}

//  --------------------------------------------------------------------------
//  Tests.

static void
test_gw_session_publishes_starting_and_says_hello (void **state)
{
    fixture_t *f = *state;
    start_session (f, NULL);
    seen_t *s = find_seen (f, "status", 0);
    assert_non_null (s);
    assert_string_equal (status_of (s), "starting");
    assert_int_equal (json_object_size (s->parent), 0);
    assert_int_equal (strncmp (s->ids, "kernel.", 7), 0);
    ch_msg_t *hello = kernel_recv (f, 1000);
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
    fixture_t *f = *state;
    f->mock.connect_after = 3;
    start_session (f, NULL);
    assert_int_equal (gw_session_fd (f->session), -1);
    json_t *h = client_request (f, CH_SHELL, "kernel_info_request", "ki-c", NULL, 0);
    pump (f, 50);                               //  ticks: -EAGAIN, -EAGAIN, fd
    assert_true (gw_session_fd (f->session) >= 0);
    ch_msg_t *hello = kernel_recv (f, 1000);
    assert_non_null (hello);
    assert_string_equal (ch_msg_type (hello), "hello");
    ch_msg_destroy (&hello);
    kernel_hello (f);
    pump (f, 20);
    ch_msg_t *msg = expect_at_kernel (f, "ki-c");
    ch_msg_destroy (&msg);
    json_decref (h);
}

//  A port: a dead kernel's half frame, then the new kernel's marker and hello.
static void
test_gw_session_hunts_for_the_sync_marker_on_a_port (void **state)
{
    fixture_t *f = *state;
    f->mock.sync_markers = true;
    start_session (f, NULL);
    ch_msg_t *hello = kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    uint8_t junk [] = { 0, 0, 0x10, 0, '{', '"', 'c', 'h' };    //  cut mid-frame
    kernel_send_raw (f, junk, sizeof junk);
    kernel_send_raw (f, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    kernel_hello (f);
    pump (f, 50);
    assert_int_equal (f->mock.kills, 0);
    json_t *h = client_request (f, CH_SHELL, "kernel_info_request", "ki-p", NULL, 0);
    ch_msg_t *msg = expect_at_kernel (f, "ki-p");   //  ready: sent at once
    ch_msg_destroy (&msg);
    json_decref (h);
}

static void
test_gw_session_holds_requests_until_hello (void **state)
{
    fixture_t *f = *state;
    start_session (f, NULL);
    ch_msg_t *hello = kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    json_t *h = client_request (f, CH_SHELL, "kernel_info_request", "ki-1", NULL, 0);
    assert_null (kernel_recv (f, 100));         //  held: no hello yet
    kernel_hello (f);
    pump (f, 20);
    ch_msg_t *msg = expect_at_kernel (f, "ki-1");
    assert_true (json_equal (ch_msg_header (msg), h));  //  header exactly as sent
    ch_msg_destroy (&msg);
    json_decref (h);
}

static void
test_gw_session_restamps_and_routes_reply (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = execute (f, "ex-1", "1+1");
    ch_msg_t *req = expect_at_kernel (f, "ex-1");
    //  The kernel's parent_header carries junk: the client must get its own.
    json_t *forged = json_pack ("{s:s, s:s}", "msg_id", "ex-1", "evil", "yes");
    kernel_send (f, CH_IOPUB, "status", forged, json_pack ("{s:s}", "execution_state", "busy"));
    kernel_send (f, CH_SHELL, "execute_reply", forged,
                 json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    kernel_send (f, CH_IOPUB, "status", forged, json_pack ("{s:s}", "execution_state", "idle"));
    pump (f, 50);
    seen_t *reply = find_seen (f, "execute_reply", 0);
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
    seen_t *busy = find_seen (f, "status", 1);
    assert_string_equal (status_of (busy), "busy");
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
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = execute (f, "ex-in", "input()");
    ch_msg_t *req = expect_at_kernel (f, "ex-in");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    kernel_send (f, CH_STDIN, "input_request", h,
                 json_pack ("{s:s, s:b}", "prompt", "name? ", "password", 0));
    pump (f, 50);
    seen_t *s = find_seen (f, "input_request", 0);
    assert_non_null (s);
    assert_int_equal (s->channel, CH_STDIN);
    assert_string_equal (s->ids, "client-id");
    assert_true (json_equal (s->parent, h));
    //  The answer goes straight to the kernel.
    json_t *r = client_request (f, CH_STDIN, "input_reply", "in-1",
                                json_pack ("{s:s}", "value", "ada"), 0);
    ch_msg_t *answer = expect_at_kernel (f, "in-1");
    assert_int_equal (ch_msg_channel (answer), CH_STDIN);
    ch_msg_destroy (&answer);
    ch_msg_destroy (&req);
    json_decref (r);
    json_decref (h);
}

static void
test_gw_session_control_is_not_held_behind_a_running_cell (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = execute (f, "ex-long", "import time; time.sleep(100)");
    ch_msg_t *req = expect_at_kernel (f, "ex-long");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    pump (f, 20);
    json_t *i = client_request (f, CH_CONTROL, "interrupt_request", "int-1", NULL, 0);
    ch_msg_t *intr = expect_at_kernel (f, "int-1");
    assert_int_equal (ch_msg_channel (intr), CH_CONTROL);
    ch_msg_destroy (&intr);
    ch_msg_destroy (&req);
    json_decref (i);
    json_decref (h);
}

static void
test_gw_session_drops_bad_client_requests (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *a = client_request (f, CH_SHELL, "nonsense_request", "bad-1", NULL,
                                -EPROTONOSUPPORT);
    json_t *b = client_request (f, CH_SHELL, "input_reply", "bad-2", NULL, -EPROTONOSUPPORT);
    json_t *c = client_request (f, CH_SHELL, "kernel_info_request", "", NULL, -EINVAL);
    json_t *d = client_request (f, CH_SHELL, "kernel_info_request", "dup", NULL, 0);
    json_t *e = client_request (f, CH_SHELL, "kernel_info_request", "dup", NULL, -EEXIST);
    ch_msg_t *msg = expect_at_kernel (f, "dup");    //  only the good one got through
    assert_null (kernel_recv (f, 50));
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
    fixture_t *f = *state;
    start_ready (f);
    json_t *h1 = execute (f, "ex-a", "boom()");
    json_t *h2 = execute (f, "ex-b", "after()");
    ch_msg_t *r1 = expect_at_kernel (f, "ex-a");
    ch_msg_t *r2 = expect_at_kernel (f, "ex-b");
    kernel_send (f, CH_IOPUB, "status", h1, json_pack ("{s:s}", "execution_state", "busy"));
    pump (f, 20);
    f->mock.exit = (gw_exit_t) { .exit_code = -1, .signal = SIGSEGV };
    f->mock.exited = true;
    close (f->mock.kernel_fd);
    f->mock.kernel_fd = -1;
    pump (f, 100);
    seen_t *err = find_seen (f, "error", 0);
    assert_non_null (err);
    assert_true (json_equal (err->parent, h1));
    const char *evalue = json_string_value (json_object_get (err->content, "evalue"));
    assert_non_null (strstr (evalue, "SIGSEGV"));
    assert_non_null (strstr (evalue, "re-run"));
    seen_t *reply = find_seen (f, "execute_reply", 0);
    assert_true (json_equal (reply->parent, h1));
    assert_string_equal (json_string_value (json_object_get (reply->content, "status")), "error");
    seen_t *reply2 = find_seen (f, "execute_reply", (size_t) (reply - f->seen) + 1);
    assert_non_null (reply2);
    assert_true (json_equal (reply2->parent, h2));
    assert_null (find_seen (f, "error", (size_t) (err - f->seen) + 1));  //  one error only
    //  The last two: restarting, then starting for the new kernel.
    assert_true (f->nseen >= 2);
    assert_string_equal (status_of (&f->seen [f->nseen - 2]), "restarting");
    assert_string_equal (status_of (&f->seen [f->nseen - 1]), "starting");
    assert_int_equal (f->mock.starts, 2);
    ch_msg_destroy (&r1);
    ch_msg_destroy (&r2);
    json_decref (h1);
    json_decref (h2);
}

static void
test_gw_session_uses_the_backends_own_words (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    assert_int_equal (gw_session_backend_fd (f->session), 0);
    json_t *h = execute (f, "ex-vm", "x");
    ch_msg_t *req = expect_at_kernel (f, "ex-vm");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    pump (f, 20);
    gw_session_backend_event (f->session);     //  reaps at once
    seen_t *err = find_seen (f, "error", 0);
    assert_non_null (err);
    const char *evalue = json_string_value (json_object_get (err->content, "evalue"));
    assert_string_equal (evalue, "The session's virtual machine itself stopped; /workspace "
                         "is gone. A new VM is starting. Re-run the cells this one depends on.");
    assert_int_equal (f->mock.starts, 2);
    ch_msg_destroy (&req);
    json_decref (h);
}

//  Hostile output: each ends the kernel (kill), never the session.
static void
s_hostile (fixture_t *f, void (*misbehave) (fixture_t *, const json_t *))
{
    start_ready (f);
    json_t *h = execute (f, "ex-h", "x");
    ch_msg_t *req = expect_at_kernel (f, "ex-h");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    misbehave (f, h);
    pump (f, 100);
    assert_int_equal (f->mock.kills, 1);
    seen_t *err = find_seen (f, "error", 0);
    assert_non_null (err);
    assert_non_null (strstr (json_string_value (json_object_get (err->content, "evalue")),
                             "broke the channel protocol"));
    assert_non_null (find_seen (f, "execute_reply", 0));
    assert_false (gw_session_finished (f->session));
    assert_int_equal (f->mock.starts, 2);       //  restarted
    ch_msg_destroy (&req);
    json_decref (h);
}

static void
s_oversize (fixture_t *f, const json_t *h)
{
    (void) h;
    uint8_t hdr [4] = { 0xff, 0xff, 0xff, 0xff };
    kernel_send_raw (f, hdr, 4);
}

static void
s_garbage (fixture_t *f, const json_t *h)
{
    (void) h;
    uint8_t frame [] = { 0, 0, 0, 5, 'n', 'o', 'p', 'e', '{' };
    kernel_send_raw (f, frame, sizeof frame);
}

static void
s_bogus_type (fixture_t *f, const json_t *h)
{
    kernel_send (f, CH_IOPUB, "bogus_type", h, NULL);
}

static void
s_unknown_parent (fixture_t *f, const json_t *h)
{
    (void) h;
    json_t *parent = json_pack ("{s:s}", "msg_id", "never-sent");
    kernel_send (f, CH_SHELL, "execute_reply", parent,
                 json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    json_decref (parent);
}

static void
s_bad_content (fixture_t *f, const json_t *h)
{
    kernel_send (f, CH_IOPUB, "stream", h, json_pack ("{s:s}", "name", "stdout"));
}

static void test_gw_session_oversize_frame_ends_kernel (void **state) { s_hostile (*state, s_oversize); }
static void test_gw_session_garbage_json_ends_kernel (void **state) { s_hostile (*state, s_garbage); }
static void test_gw_session_bogus_msg_type_ends_kernel (void **state) { s_hostile (*state, s_bogus_type); }
static void test_gw_session_unknown_parent_ends_kernel (void **state) { s_hostile (*state, s_unknown_parent); }
static void test_gw_session_bad_content_ends_kernel (void **state) { s_hostile (*state, s_bad_content); }

static void
test_gw_session_shutdown_request_completes (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = client_request (f, CH_CONTROL, "shutdown_request", "sd-1",
                                json_pack ("{s:b}", "restart", 0), 0);
    ch_msg_t *req = expect_at_kernel (f, "sd-1");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    kernel_send (f, CH_CONTROL, "shutdown_reply", h,
                 json_pack ("{s:s, s:b}", "status", "ok", "restart", 0));
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "idle"));
    kernel_send (f, CH_CELLVM, "exiting", NULL, json_pack ("{s:s}", "reason", "shutdown_request"));
    pump (f, 20);
    json_t *late = client_request (f, CH_SHELL, "kernel_info_request", "late-1", NULL,
                                   -ESHUTDOWN);
    f->mock.exit = (gw_exit_t) { .exit_code = 0 };
    f->mock.exited = true;
    close (f->mock.kernel_fd);
    f->mock.kernel_fd = -1;
    pump (f, 200);
    assert_true (gw_session_finished (f->session));
    assert_int_equal (gw_session_exit_code (f->session), 0);
    seen_t *reply = find_seen (f, "shutdown_reply", 0);
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
    fixture_t *f = *state;
    start_ready (f);
    int64_t t0 = zclock_mono ();
    gw_session_shutdown (f->session);
    ch_msg_t *req = kernel_recv (f, 1000);
    assert_non_null (req);
    assert_string_equal (ch_msg_type (req), "shutdown_request");
    pump (f, 2000);
    assert_true (gw_session_finished (f->session));
    assert_true (zclock_mono () - t0 < 1500);
    assert_int_equal (f->mock.kills, 1);
    assert_null (find_seen (f, "shutdown_reply", 0));   //  nobody asked: nobody told
    ch_msg_destroy (&req);
}

//  A client's shutdown_request the kernel never answers still gets a reply.
static void
test_gw_session_shutdown_reply_is_synthesized (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = client_request (f, CH_CONTROL, "shutdown_request", "sd-2",
                                json_pack ("{s:b}", "restart", 1), 0);
    pump (f, 2000);
    assert_true (gw_session_finished (f->session));
    seen_t *reply = find_seen (f, "shutdown_reply", 0);
    assert_non_null (reply);
    assert_true (json_is_true (json_object_get (reply->content, "restart")));
    assert_true (json_equal (reply->parent, h));
    json_decref (h);
}

static void
test_gw_session_gives_up_after_failed_starts (void **state)
{
    fixture_t *f = *state;
    gw_session_opts_t opts = { .restart_limit = 2 };
    start_session (f, &opts);
    ch_msg_t *hello = kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    json_t *h = execute (f, "ex-held", "1");      //  held: no hello yet
    f->mock.fail_starts = 10;
    mock_kill (&f->mock);                       //  dies before its hello
    pump (f, 1500);
    assert_true (gw_session_finished (f->session));
    assert_int_equal (gw_session_exit_code (f->session), 1);
    seen_t *reply = find_seen (f, "execute_reply", 0);
    assert_non_null (reply);
    assert_true (json_equal (reply->parent, h));
    assert_non_null (strstr (json_string_value (json_object_get (reply->content, "evalue")),
                             "could not be started"));
    json_decref (h);
}

static void
test_gw_session_late_output_keeps_its_parent (void **state)
{
    fixture_t *f = *state;
    start_ready (f);
    json_t *h = execute (f, "ex-late", "thread");
    ch_msg_t *req = expect_at_kernel (f, "ex-late");
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "busy"));
    kernel_send (f, CH_SHELL, "execute_reply", h,
                 json_pack ("{s:s, s:i}", "status", "ok", "execution_count", 1));
    kernel_send (f, CH_IOPUB, "status", h, json_pack ("{s:s}", "execution_state", "idle"));
    kernel_send (f, CH_IOPUB, "stream", h, json_pack ("{s:s, s:s}", "name", "stdout",
                                                          "text", "late\n"));
    pump (f, 50);
    seen_t *s = find_seen (f, "stream", 0);
    assert_non_null (s);
    assert_true (json_equal (s->parent, h));
    assert_string_equal (s->ids, "stream.stdout");
    assert_int_equal (f->mock.kills, 0);
    ch_msg_destroy (&req);
    json_decref (h);
}

static void
test_gw_session_oversize_kernel_message_ends_kernel (void **state)
{
    fixture_t *f = *state;
    gw_session_opts_t opts = { .max_msg = 1000 };
    start_session (f, &opts);
    ch_msg_t *hello = kernel_recv (f, 1000);
    ch_msg_destroy (&hello);
    kernel_hello (f);
    pump (f, 20);
    json_t *h = execute (f, "ex-big", "big");
    ch_msg_t *req = expect_at_kernel (f, "ex-big");
    char text [2000];
    memset (text, 'x', sizeof text - 1);
    text [sizeof text - 1] = 0;
    kernel_send (f, CH_IOPUB, "stream", h, json_pack ("{s:s, s:s}", "name", "stdout",
                                                          "text", text));
    pump (f, 100);
    assert_int_equal (f->mock.kills, 1);
    assert_null (find_seen (f, "stream", 0));
    ch_msg_destroy (&req);
    json_decref (h);
}

int
main (void)
{
    gw_log_init (getenv ("VERBOSE") ? GW_LOG_DEBUG : GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_session_publishes_starting_and_says_hello, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_connects_when_the_backend_is_ready, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_hunts_for_the_sync_marker_on_a_port, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_holds_requests_until_hello, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_restamps_and_routes_reply, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_routes_input_request_to_the_execute_identity, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_control_is_not_held_behind_a_running_cell, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_drops_bad_client_requests, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_kernel_death_fails_the_running_cell, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_uses_the_backends_own_words, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_oversize_frame_ends_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_garbage_json_ends_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_bogus_msg_type_ends_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_unknown_parent_ends_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_bad_content_ends_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_shutdown_request_completes, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_shutdown_stops_a_stuck_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_shutdown_reply_is_synthesized, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_gives_up_after_failed_starts, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_late_output_keeps_its_parent, setup, teardown),
        cmocka_unit_test_setup_teardown (test_gw_session_oversize_kernel_message_ends_kernel, setup, teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
