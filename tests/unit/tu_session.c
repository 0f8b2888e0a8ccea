/*  tu_session - the session tests' share of the test helpers (tu_session.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tu_session.h"
#include "ch_frame.h"
#include "ch_clock.h"

//  --------------------------------------------------------------------------
//  Mock backend.

static int
s_mock_start (void *ctx, int *fd_p, char *err, size_t errlen)
{
    tu_session_mock_t *m = ctx;
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
s_mock_connect (void *ctx, int *fd_p, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    tu_session_mock_t *m = ctx;
    if (m->connect_after-- > 1)
        return -EAGAIN;
    *fd_p = m->pending_fd;
    m->pending_fd = -1;
    return 0;
}

int
tu_session_mock_kill (void *ctx)
{
    tu_session_mock_t *m = ctx;
    m->kills++;
    if (!m->exited)
        m->exit = (gw_exit_t) { .exit_code = -1, .signal = SIGKILL };
    m->exited = true;
    return 0;
}

static int
s_mock_reap (void *ctx, gw_exit_t *exit_p)
{
    tu_session_mock_t *m = ctx;
    if (m->starts == 0)
        return -ECHILD;
    if (!m->exited)
        return -EAGAIN;
    *exit_p = m->exit;
    m->exited = false;
    return 0;
}

static int s_mock_pid (void *ctx) { (void) ctx; return 4242; }

//  The backend's event: the VM says the kernel died, in its own words.
static int s_mock_event_fd (void *ctx) { (void) ctx; return 0; }

static int
s_mock_on_event (void *ctx)
{
    tu_session_mock_t *m = ctx;
    m->exit = (gw_exit_t) { .exit_code = -1, .vm_died = true };
    snprintf (m->exit.detail, sizeof m->exit.detail,
              "The session's virtual machine itself stopped; /workspace is gone. "
              "A new VM is starting");
    m->exited = true;
    return 1;
}
static void s_mock_destroy (void *ctx) { (void) ctx; }

//  --------------------------------------------------------------------------
//  Capture of what clients receive.

static void
s_on_emit (void *arg, ch_channel_t ch, const gw_frames_t *ids, ch_msg_t *msg)
{
    tu_session_t *f = arg;
    assert_true (f->nseen < TU_SESSION_MAX_SEEN);
    tu_session_seen_t *s = &f->seen [f->nseen++];
    s->channel = ch;
    const gw_frame_t *id = gw_frames_get (ids, 0);
    snprintf (s->ids, sizeof s->ids, "%.*s", id ? (int) id->size : 0, id ? (char *) id->data : "");
    snprintf (s->type, sizeof s->type, "%s", ch_msg_type (msg));
    s->header = json_deep_copy (ch_msg_header (msg));
    s->parent = json_deep_copy (ch_msg_parent (msg));
    //  Content kept raw (a stream text) goes out as it is: read it as a client would.
    size_t rawlen = 0;
    const uint8_t *raw = ch_msg_raw_content (msg, &rawlen);
    s->content = raw ? json_loadb ((const char *) raw, rawlen, 0, NULL)
                     : json_deep_copy (ch_msg_content (msg));
    assert_non_null (s->content);
}

//  The first captured message of this type at or after index from (NULL if none).
tu_session_seen_t *
tu_session_find_seen (tu_session_t *f, const char *type, size_t from)
{
    for (size_t i = from; i < f->nseen; i++)
        if (strcmp (f->seen [i].type, type) == 0)
            return &f->seen [i];
    return NULL;
}

const char *
tu_session_status_of (const tu_session_seen_t *s)
{
    return json_string_value (json_object_get (s->content, "execution_state"));
}

//  --------------------------------------------------------------------------
//  Playing the kernel.

void
tu_session_kernel_send_raw (tu_session_t *f, const void *data, size_t len)
{
    assert_int_equal (write (f->mock.kernel_fd, data, len), (ssize_t) len);
}

void
tu_session_kernel_send (tu_session_t *f, ch_channel_t ch, const char *type,
                        const json_t *parent, json_t *content)
{
    ch_msg_t *msg = ch_msg_new (ch, type, parent, &content, "kernel-session");
    size_t len = 0;
    char *json = ch_msg_encode (msg, &len);
    tu_session_kernel_send_frame (f, json, len);
    free (json);
    ch_msg_destroy (&msg);
}

void
tu_session_kernel_send_frame (tu_session_t *f, const void *data, size_t len)
{
    uint8_t hdr [CH_FRAME_HDR];
    ch_frame_encode_header (hdr, len, CH_FRAME_MAX_DEFAULT);
    tu_session_kernel_send_raw (f, hdr, sizeof hdr);
    tu_session_kernel_send_raw (f, data, len);
}

void
tu_session_kernel_hello (tu_session_t *f)
{
    tu_session_kernel_send (f, CH_CELLVM, "hello", NULL,
                            json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-channel",
                                       "version", 1, "role", "kernel"));
}

//  Next message the session sent to the kernel, or NULL after timeout_ms.
ch_msg_t *
tu_session_kernel_recv (tu_session_t *f, int timeout_ms)
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
void
tu_session_pump (tu_session_t *f, int ms)
{
    int64_t until = ch_clock_mono_ms () + ms;
    do {
        int fd = gw_session_fd (f->session);
        struct pollfd p = { fd, POLLIN, 0 };
        if (fd >= 0 && poll (&p, 1, 5) == 1)
            gw_session_readable (f->session);
        else if (fd < 0)
            poll (NULL, 0, 5);
        gw_session_tick (f->session);
    } while (ch_clock_mono_ms () < until && !gw_session_finished (f->session));
}

//  --------------------------------------------------------------------------
//  Playing the client.

json_t *
tu_session_client_request (tu_session_t *f, ch_channel_t ch, const char *type,
                           const char *msg_id, json_t *content, int expect_rc)
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

json_t *
tu_session_execute (tu_session_t *f, const char *msg_id, const char *code)
{
    return tu_session_client_request (f, CH_SHELL, "execute_request", msg_id,
                                      json_pack ("{s:s, s:b, s:b}", "code", code, "silent", 0,
                                                 "allow_stdin", 1), 0);
}

//  Receive the next request at the kernel and check it is msg_id.
ch_msg_t *
tu_session_expect_at_kernel (tu_session_t *f, const char *msg_id)
{
    ch_msg_t *msg = tu_session_kernel_recv (f, 1000);
    assert_non_null (msg);
    assert_string_equal (ch_msg_id (msg), msg_id);
    return msg;
}

//  --------------------------------------------------------------------------
//  Fixture.

int
tu_session_setup (void **state)
{
    tu_session_t *f = calloc (1, sizeof *f);
    f->mock.kernel_fd = -1;
    f->mock.pending_fd = -1;
    *state = f;
    return 0;
}

void
tu_session_start (tu_session_t *f, const gw_session_opts_t *opts)
{
    gw_backend_t *backend = calloc (1, sizeof *backend);
    *backend = (gw_backend_t) { .name = "mock", .start = s_mock_start,
                                .connect = s_mock_connect, .kill = tu_session_mock_kill,
                                .reap = s_mock_reap, .pid = s_mock_pid,
                                .event_fd = s_mock_event_fd, .on_event = s_mock_on_event,
                                .destroy = s_mock_destroy, .ctx = &f->mock,
                                .sync_markers = f->mock.sync_markers,
                                .keep_live = f->mock.keep_live };
    f->session = gw_session_new (&backend, opts, s_on_emit, f);
    assert_null (backend);
    char err [256];
    assert_int_equal (gw_session_start (f->session, err, sizeof err), 0);
}

//  Start, read the driver hello, answer it: the kernel is ready.
void
tu_session_start_ready (tu_session_t *f)
{
    tu_session_start_ready_with (f, NULL);
}

void
tu_session_start_ready_with (tu_session_t *f, const gw_session_opts_t *opts)
{
    tu_session_start (f, opts);
    ch_msg_t *hello = tu_session_kernel_recv (f, 1000);
    assert_non_null (hello);
    ch_msg_destroy (&hello);
    tu_session_kernel_hello (f);
    tu_session_pump (f, 20);
}

int
tu_session_teardown (void **state)
{
    tu_session_t *f = *state;
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
