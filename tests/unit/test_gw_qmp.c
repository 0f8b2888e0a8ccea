/*  test_gw_qmp - the QMP client against a fake QEMU on a socketpair.

    Most tests are single-threaded: the fake's lines are written into the
    socketpair before the client call (ids are predictable: 1 for
    qmp_capabilities, then 2, 3, ...), and what the client sent is read back
    afterwards. A forked fake covers replies that arrive in pieces.
*/
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "vm/gw_qmp.h"

#define GREETING "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, " \
                 "\"major\": 7}, \"package\": \"Debian\"}, \"capabilities\": [\"oob\"]}}\r\n"
#define OK(id) "{\"return\": {}, \"id\": " #id "}\r\n"

typedef struct {
    gw_qmp_t *qmp;                              //  client under test
    int peer;                                   //  the fake QEMU's end
    char err [256];
    int events;                                 //  events seen by s_on_event
    char last_event [32];
} fixture_t;

static void
s_put (fixture_t *f, const char *text)
{
    size_t len = strlen (text);
    assert_int_equal (write (f->peer, text, len), (ssize_t) len);
}

//  What the client sent since the last call, as text (static buffer).
static const char *
s_sent (fixture_t *f)
{
    static char buf [4096];
    ssize_t n = recv (f->peer, buf, sizeof buf - 1, MSG_DONTWAIT);
    buf [n > 0 ? n : 0] = 0;
    return buf;
}

static void
s_on_event (void *arg, const char *event, json_t *data)
{
    fixture_t *f = (fixture_t *) arg;
    (void) data;
    f->events++;
    snprintf (f->last_event, sizeof f->last_event, "%s", event);
}

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    f->qmp = gw_qmp_new (sv [0], 4096);
    f->peer = sv [1];
    gw_qmp_set_event_fn (f->qmp, s_on_event, f);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gw_qmp_destroy (&f->qmp);
    assert_null (f->qmp);
    close (f->peer);
    free (f);
    return 0;
}

//  Greeting and capabilities already done.
static int
s_setup_ready (void **state)
{
    s_setup (state);
    fixture_t *f = (fixture_t *) *state;
    s_put (f, GREETING OK (1));
    assert_int_equal (gw_qmp_handshake (f->qmp, 1000, f->err, sizeof f->err), 0);
    s_sent (f);
    return 0;
}

static void
test_gw_qmp_handshake_negotiates_capabilities (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, GREETING OK (1));
    assert_int_equal (gw_qmp_handshake (f->qmp, 1000, f->err, sizeof f->err), 0);
    assert_string_equal (s_sent (f), "{\"execute\":\"qmp_capabilities\",\"id\":1}\n");
}

static void
test_gw_qmp_handshake_rejects_a_non_greeting (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, OK (1));
    assert_int_equal (gw_qmp_handshake (f->qmp, 1000, f->err, sizeof f->err), -EPROTO);
    assert_non_null (strstr (f->err, "not a greeting"));
    //  The connection is done for: later calls fail at once.
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1000, f->err, sizeof f->err),
                      -EPROTO);
}

static void
test_gw_qmp_query_status_reads_the_run_state (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, "{\"return\": {\"status\": \"running\", \"singlestep\": false, "
              "\"running\": true}, \"id\": 2}\r\n");
    char status [16];
    bool running = false;
    assert_int_equal (gw_qmp_query_status (f->qmp, status, sizeof status, &running, 1000,
                                           f->err, sizeof f->err), 0);
    assert_string_equal (status, "running");
    assert_true (running);
    assert_string_equal (s_sent (f), "{\"execute\":\"query-status\",\"id\":2}\n");
}

static void
test_gw_qmp_execute_sends_arguments_and_returns_the_value (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, "{\"return\": [1, 2], \"id\": 2}\r\n");
    json_t *args = json_pack ("{s:[{s:s, s:b}]}", "capabilities", "capability",
                              "x-ignore-shared", "state", 1);
    json_t *ret = NULL;
    assert_int_equal (gw_qmp_execute (f->qmp, "migrate-set-capabilities", args, &ret, 1000,
                                      f->err, sizeof f->err), 0);
    assert_int_equal (json_array_size (ret), 2);
    assert_int_equal (args->refcount, 1);       //  borrowed, not stolen
    json_decref (ret);
    json_decref (args);
    json_t *sent = json_loads (s_sent (f), 0, NULL);
    assert_string_equal (json_string_value (json_object_get (sent, "execute")),
                         "migrate-set-capabilities");
    assert_non_null (json_object_get (sent, "arguments"));
    json_decref (sent);
}

static void
test_gw_qmp_events_go_to_the_callback (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"STOP\"}\r\n"
              OK (2));
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1000, f->err, sizeof f->err),
                      0);
    assert_int_equal (f->events, 1);
    assert_string_equal (f->last_event, "STOP");
    //  And outside any command, through poll.
    s_put (f, "{\"event\": \"RESUME\", \"data\": {}}\r\n");
    assert_int_equal (gw_qmp_poll (f->qmp, 0), 0);
    assert_int_equal (f->events, 2);
    assert_string_equal (f->last_event, "RESUME");
    assert_int_equal (gw_qmp_poll (f->qmp, 0), 0);  //  nothing there: no wait
}

static void
test_gw_qmp_error_reply_is_eio_with_the_reason (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no migration\"}, "
              "\"id\": 2}\r\n");
    json_t *ret = json_true ();
    assert_int_equal (gw_qmp_execute (f->qmp, "migrate-incoming", NULL, &ret, 1000,
                                      f->err, sizeof f->err), -EIO);
    assert_null (ret);
    assert_string_equal (f->err, "QMP migrate-incoming failed: GenericError: no migration");
    //  Still usable.
    s_put (f, OK (3));
    assert_int_equal (gw_qmp_execute (f->qmp, "cont", NULL, NULL, 1000, f->err, sizeof f->err),
                      0);
}

static void
test_gw_qmp_times_out_and_drops_the_late_reply (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    struct timespec t0, t1;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 50, f->err, sizeof f->err),
                      -ETIMEDOUT);
    clock_gettime (CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true (ms >= 45 && ms < 1000);
    assert_non_null (strstr (f->err, "no answer within 50 ms"));
    //  The answer to 2 arrives late, before the answer to 3.
    s_put (f, "{\"return\": {\"status\": \"paused\", \"running\": false}, \"id\": 2}\r\n"
              "{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": 3}\r\n");
    char status [16];
    assert_int_equal (gw_qmp_query_status (f->qmp, status, sizeof status, NULL, 1000,
                                           f->err, sizeof f->err), 0);
    assert_string_equal (status, "running");
}

static void
test_gw_qmp_peer_closing_is_epipe (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, OK (2));
    shutdown (f->peer, SHUT_WR);
    assert_int_equal (gw_qmp_quit (f->qmp, 1000, f->err, sizeof f->err), 0);
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1000, f->err, sizeof f->err),
                      -EPIPE);
    assert_non_null (strstr (f->err, "closed"));
    assert_int_equal (gw_qmp_poll (f->qmp, 0), -EPIPE);
}

static void
test_gw_qmp_bounds_the_line_length (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char *big = malloc (5000);
    memset (big, ' ', 4999);                    //  the client's limit is 4096
    big [0] = '{';
    big [4999] = 0;
    s_put (f, big);
    free (big);
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1000, f->err, sizeof f->err),
                      -EPROTO);
    assert_non_null (strstr (f->err, "over the length limit"));
}

//  A QEMU that floods events and replies to commands never sent cannot keep
//  a command waiting past its deadline (a QEMU the guest took over is
//  hostile too): the socket is
//  filled with far more than can be read before a 1 ms deadline, and the
//  command gives up without reading it all.
static void
test_gw_qmp_a_flood_cannot_outlast_the_deadline (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    const char *one = "{\"event\": \"JUNK\", \"data\": {}}\r\n"
                      "{\"return\": {}, \"id\": 99999}\r\n\r\n";
    int big = 8 << 20;
    setsockopt (f->peer, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    fcntl (f->peer, F_SETFL, fcntl (f->peer, F_GETFL) | O_NONBLOCK);
    long sent = 0;
    while (write (f->peer, one, strlen (one)) == (ssize_t) strlen (one))
        sent++;
    assert_true (sent > 2000);                  //  the probe: a flood is waiting
    assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1, f->err, sizeof f->err),
                      -ETIMEDOUT);
    assert_non_null (strstr (f->err, "no answer within 1 ms"));
    assert_true (f->events > 0 && f->events < sent / 2);
}

static void
test_gw_qmp_rejects_what_is_not_qmp (void **state)
{
    const char *bad [] = { "not json\r\n", "[1, 2]\r\n", "\"text\"\r\n",
                           "{\"hello\": 1}\r\n", "{\"error\": \"flat\", \"id\": 2}\r\n",
                           "{\"return\": {}, \"id\": 2\r\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        fixture_t *f = (fixture_t *) *state;
        s_put (f, bad [i]);
        assert_int_equal (gw_qmp_execute (f->qmp, "stop", NULL, NULL, 1000,
                                          f->err, sizeof f->err), -EPROTO);
        s_teardown (state);
        s_setup_ready (state);
    }
}

static void
test_gw_qmp_getfd_passes_the_descriptor (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    int fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    s_put (f, OK (2));
    assert_int_equal (gw_qmp_getfd (f->qmp, "state", fd, 1000, f->err, sizeof f->err), 0);
    char buf [256] = "";
    union { struct cmsghdr h; char b [CMSG_SPACE (sizeof (int))]; } ctl;
    struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                         .msg_controllen = sizeof ctl.b };
    assert_true (recvmsg (f->peer, &mh, MSG_CMSG_CLOEXEC) > 0);
    assert_string_equal (buf, "{\"execute\":\"getfd\",\"id\":2,"
                              "\"arguments\":{\"fdname\":\"state\"}}\n");
    struct cmsghdr *cm = CMSG_FIRSTHDR (&mh);
    assert_non_null (cm);
    assert_int_equal (cm->cmsg_type, SCM_RIGHTS);
    int got = -1;
    memcpy (&got, CMSG_DATA (cm), sizeof got);
    struct stat a, b;
    assert_int_equal (fstat (fd, &a), 0);
    assert_int_equal (fstat (got, &b), 0);
    assert_true (a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    close (got);
    close (fd);
}

static void
test_gw_qmp_query_migrate_before_any_migration_is_none (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    s_put (f, "{\"return\": {}, \"id\": 2}\r\n"
              "{\"return\": {\"status\": \"completed\", \"total-time\": 29}, \"id\": 3}\r\n");
    char status [16];
    assert_int_equal (gw_qmp_query_migrate (f->qmp, status, sizeof status, 1000,
                                            f->err, sizeof f->err), 0);
    assert_string_equal (status, "none");
    assert_int_equal (gw_qmp_query_migrate (f->qmp, status, sizeof status, 1000,
                                            f->err, sizeof f->err), 0);
    assert_string_equal (status, "completed");
}

//  A fake that dribbles its answers a few bytes at a time.
static void
test_gw_qmp_reassembles_split_lines (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    const char *script = GREETING OK (1) "{\"return\": {\"status\": \"paused\", "
                         "\"running\": false}, \"id\": 2}\r\n";
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        for (size_t off = 0, len = strlen (script); off < len; off += 7) {
            size_t n = len - off < 7 ? len - off : 7;
            if (write (f->peer, script + off, n) != (ssize_t) n)
                _exit (1);
            struct timespec ts = { 0, 200 * 1000 };
            nanosleep (&ts, NULL);
        }
        _exit (0);
    }
    assert_int_equal (gw_qmp_handshake (f->qmp, 5000, f->err, sizeof f->err), 0);
    char status [16];
    bool running = true;
    assert_int_equal (gw_qmp_query_status (f->qmp, status, sizeof status, &running, 5000,
                                           f->err, sizeof f->err), 0);
    assert_string_equal (status, "paused");
    assert_false (running);
    int wstatus = 0;
    assert_int_equal (waitpid (pid, &wstatus, 0), pid);
    assert_int_equal (wstatus, 0);
}

//  Blank lines cost what they weigh: up to 2 MiB of them, waiting on the
//  socket as one read's worth, then the reply, read well within the deadline.
//  (Moving the rest of the buffer after each line made that read's lines
//  cost the square of its size: minutes.)
static void
test_gw_qmp_blank_lines_cost_linear_time (void **state)
{
    (void) state;
    int sv [2], big = 8 << 20;
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    if (setsockopt (sv [1], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
        setsockopt (sv [1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    gw_qmp_t *qmp = gw_qmp_new (sv [0], 4 << 20);
    static char blank [64 << 10];
    memset (blank, '\n', sizeof blank);
    size_t queued = 0;
    ssize_t n;
    while (queued < (2u << 20)
           && (n = send (sv [1], blank, sizeof blank, MSG_DONTWAIT | MSG_NOSIGNAL)) > 0)
        queued += (size_t) n;
    assert_true (queued >= sizeof blank);
    pid_t pid = fork ();                        //  the reply, once there is room for it
    assert_true (pid >= 0);
    if (pid == 0) {
        close (sv [0]);
        const char *reply = OK (1);
        _exit (send (sv [1], reply, strlen (reply), MSG_NOSIGNAL) == (ssize_t) strlen (reply)
               ? 0 : 1);
    }
    char err [256] = "";
    int rc = gw_qmp_execute (qmp, "stop", NULL, NULL, 3000, err, sizeof err);
    gw_qmp_destroy (&qmp);
    close (sv [1]);
    int wstatus = 0;
    assert_int_equal (waitpid (pid, &wstatus, 0), pid);
    if (rc != 0)
        fail_msg ("%zu bytes of blank lines: rc %d: %s", queued, rc, err);
    assert_int_equal (wstatus, 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_qmp_handshake_negotiates_capabilities,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_handshake_rejects_a_non_greeting,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_query_status_reads_the_run_state,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_execute_sends_arguments_and_returns_the_value,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_events_go_to_the_callback,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_error_reply_is_eio_with_the_reason,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_times_out_and_drops_the_late_reply,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_peer_closing_is_epipe,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_bounds_the_line_length,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_a_flood_cannot_outlast_the_deadline,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_rejects_what_is_not_qmp,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_getfd_passes_the_descriptor,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_query_migrate_before_any_migration_is_none,
                                         s_setup_ready, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_qmp_reassembles_split_lines,
                                         s_setup, s_teardown),
        cmocka_unit_test (test_gw_qmp_blank_lines_cost_linear_time),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
