/*  test_gw_readlease - a read lease on a file this test made: a child that
    opens it for writing, or truncates it, waits until the lease is let go;
    the break comes through the signalfd first, marks only its own lease and
    calls its callback once; files it cannot be taken on are refused with
    words. Every child is a forked writer that reports when its call
    returned, killed and reaped by the teardown whatever happened.

    The lease signal is blocked in main, before cmocka runs anything: the
    module needs it blocked in every thread before the first lease.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/gw_readlease.h"
#include "tu.h"

#define S_WAIT_MS 5000                          //  for what must come: a signal, a child's report
#define S_HELD_MS 300                           //  a writer must still be waiting this long after
#define S_LEASES 2

typedef enum { OP_OPEN_WRITE, OP_OPEN_READ, OP_TRUNCATE } op_t;

//  What a writer child says once its call returned.
typedef struct {
    int64_t start_ns, done_ns;                  //  CLOCK_MONOTONIC, comparable across processes
    int err;                                    //  0, or the call's errno
} report_t;

typedef struct {
    char dir [TU_DIR_MAX];                      //  tu_fixture_new's scratch dir
    char path [S_LEASES][TU_DIR_MAX + 16];
    gw_readlease_t *lease [S_LEASES];
    int calls [S_LEASES];                       //  each lease's callback, counted
    pid_t child;                                //  the writer, 0: none
    int report_fd;                              //  its report's pipe, -1: none
    char err [512];
} fx_t;

static int64_t
s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
s_count (void *arg)
{
    (*(int *) arg)++;
}

//  Whether fd becomes readable within ms (all of them: poll's own rounding
//  and an EINTR never cut the wait short).
static bool
s_readable (int fd, int ms)
{
    int64_t deadline = s_now_ns () + (int64_t) ms * 1000000, left;
    while ((left = deadline - s_now_ns ()) > 0) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int n = poll (&p, 1, (int) ((left + 999999) / 1000000));
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            fail_msg ("poll: %s", strerror (errno));
    }
    return false;
}

static int
s_setup (void **state)
{
    fx_t *fx = tu_fixture_new (sizeof *fx, "test_gw_readlease");
    fx->report_fd = -1;
    for (int i = 0; i < S_LEASES; i++) {
        char name [16];
        snprintf (name, sizeof name, "file%d", i);
        tu_path (fx->path [i], sizeof fx->path [i], fx->dir, name);
        tu_write_file (fx->dir, name, "guest memory, as it was saved\n");
    }
    //  Signals an earlier test left queued name no lease alive: read them dry.
    assert_true (gw_readlease_signal_fd () >= 0);
    gw_readlease_dispatch ();
    *state = fx;
    return 0;
}

//  The child first (a writer blocked in the kernel dies of SIGKILL), then the leases.
static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    if (fx->child > 0) {
        kill (fx->child, SIGKILL);
        waitpid (fx->child, NULL, 0);
    }
    if (fx->report_fd >= 0)
        close (fx->report_fd);
    for (int i = 0; i < S_LEASES; i++)
        gw_readlease_destroy (&fx->lease [i]);
    gw_readlease_dispatch ();
    return tu_fixture_teardown (state);
}

//  Lease i on path [i], its callback counting into calls [i] (unless quiet).
static void
s_lease (fx_t *fx, int i, bool quiet)
{
    int rc = 1;
    fx->lease [i] = gw_readlease_new (fx->path [i], &rc, fx->err, sizeof fx->err);
    if (!fx->lease [i])
        fail_msg ("no lease on %s: rc %d, %s", fx->path [i], rc, fx->err);
    assert_int_equal (rc, 0);
    if (!quiet)
        gw_readlease_on_break (fx->lease [i], s_count, &fx->calls [i]);
}

//  The child's side: the call, timed, reported, and out. Never returns.
static void
s_child (const char *path, op_t op, int wfd, pid_t parent)
{
    prctl (PR_SET_PDEATHSIG, SIGKILL);          //  gone with the test, even when it fails
    if (getppid () != parent)
        _exit (2);
    report_t r = { .start_ns = s_now_ns () };
    int rc = op == OP_TRUNCATE ? truncate (path, 0)
           : open (path, (op == OP_OPEN_WRITE ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    r.err = rc < 0 ? errno : 0;
    r.done_ns = s_now_ns ();
    if (rc >= 0 && op != OP_TRUNCATE)
        close (rc);
    _exit (write (wfd, &r, sizeof r) == (ssize_t) sizeof r ? 0 : 1);
}

static void
s_start_child (fx_t *fx, const char *path, op_t op)
{
    assert_int_equal (fx->child, 0);
    int p [2];
    assert_int_equal (pipe2 (p, O_CLOEXEC), 0);
    pid_t parent = getpid (), pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        close (p [0]);
        s_child (path, op, p [1], parent);
    }
    close (p [1]);
    fx->child = pid;
    fx->report_fd = p [0];
}

//  The child's report (within S_WAIT_MS), and the child reaped: it exited 0.
static report_t
s_child_done (fx_t *fx)
{
    report_t r;
    if (!s_readable (fx->report_fd, S_WAIT_MS))
        fail_msg ("the child's call has not returned in %d ms", S_WAIT_MS);
    assert_int_equal (read (fx->report_fd, &r, sizeof r), (ssize_t) sizeof r);
    int status = 0;
    assert_int_equal (waitpid (fx->child, &status, 0), fx->child);
    fx->child = 0;
    close (fx->report_fd);
    fx->report_fd = -1;
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    return r;
}

//  The child has not got through its call in ms.
static void
s_child_still_waits (fx_t *fx, int ms)
{
    if (s_readable (fx->report_fd, ms))
        fail_msg ("the child's call returned with the lease still held");
}

//  The break of lease i heard: the signalfd polled and dispatched until it is marked.
static void
s_await_break (fx_t *fx, int i)
{
    int sigfd = gw_readlease_signal_fd ();
    assert_true (sigfd >= 0);
    int64_t deadline = s_now_ns () + (int64_t) S_WAIT_MS * 1000000;
    while (!gw_readlease_broken (fx->lease [i])) {
        int left = (int) ((deadline - s_now_ns ()) / 1000000);
        if (!s_readable (sigfd, left))
            fail_msg ("no break of lease %d on the signalfd in %d ms", i, S_WAIT_MS);
        gw_readlease_dispatch ();
    }
}

//  A writer's call (op) on lease 0's file: it breaks the lease, the callback
//  runs once, the call waits while the lease is held and returns, with
//  success, only once the lease is destroyed.
static void
s_writer_waits_for_destroy (fx_t *fx, op_t op)
{
    s_lease (fx, 0, false);
    assert_false (gw_readlease_broken (fx->lease [0]));
    s_start_child (fx, fx->path [0], op);
    s_await_break (fx, 0);
    assert_int_equal (fx->calls [0], 1);
    s_child_still_waits (fx, S_HELD_MS);
    gw_readlease_dispatch ();                   //  one break, one call
    assert_int_equal (fx->calls [0], 1);
    assert_true (gw_readlease_broken (fx->lease [0]));
    int64_t let_go = s_now_ns ();
    gw_readlease_destroy (&fx->lease [0]);
    assert_null (fx->lease [0]);
    report_t r = s_child_done (fx);
    assert_int_equal (r.err, 0);
    assert_true (r.done_ns >= let_go);
    assert_true (r.done_ns - r.start_ns >= (int64_t) S_HELD_MS * 1000000);
    assert_int_equal (fx->calls [0], 1);
}

static void
test_an_open_for_writing_waits_for_the_lease (void **state)
{
    s_writer_waits_for_destroy (*state, OP_OPEN_WRITE);
}

static void
test_a_truncate_waits_for_the_lease (void **state)
{
    fx_t *fx = *state;
    s_writer_waits_for_destroy (fx, OP_TRUNCATE);
    struct stat st;
    assert_int_equal (stat (fx->path [0], &st), 0);
    assert_int_equal (st.st_size, 0);           //  the truncate did happen, after
}

//  The lease is held on a read-only fd of the file; readers do not break it.
static void
test_a_reader_does_not_break_the_lease (void **state)
{
    fx_t *fx = *state;
    s_lease (fx, 0, false);
    int fd = gw_readlease_fd (fx->lease [0]);
    assert_true (fd >= 0);
    assert_int_equal (fcntl (fd, F_GETFL) & O_ACCMODE, O_RDONLY);
    assert_int_equal (fcntl (fd, F_GETLEASE), F_RDLCK);
    s_start_child (fx, fx->path [0], OP_OPEN_READ);
    report_t r = s_child_done (fx);
    assert_int_equal (r.err, 0);
    assert_false (s_readable (gw_readlease_signal_fd (), 100));
    gw_readlease_dispatch ();
    assert_false (gw_readlease_broken (fx->lease [0]));
    assert_int_equal (fx->calls [0], 0);
}

static void
test_a_file_open_for_writing_is_refused (void **state)
{
    fx_t *fx = *state;
    int fd = open (fx->path [0], O_RDWR | O_CLOEXEC);
    assert_true (fd >= 0);
    int rc = 0;
    fx->err [0] = '\0';
    fx->lease [0] = gw_readlease_new (fx->path [0], &rc, fx->err, sizeof fx->err);
    close (fd);
    assert_null (fx->lease [0]);
    assert_int_equal (rc, -EAGAIN);
    if (!strstr (fx->err, "open for writing"))
        fail_msg ("err \"%s\" does not say \"open for writing\"", fx->err);
    //  Closed again, it can be leased.
    s_lease (fx, 0, false);
}

static void
test_a_missing_file_is_refused_by_name (void **state)
{
    fx_t *fx = *state;
    char path [TU_DIR_MAX + 16];
    tu_path (path, sizeof path, fx->dir, "missing");
    int rc = 0;
    fx->err [0] = '\0';
    fx->lease [0] = gw_readlease_new (path, &rc, fx->err, sizeof fx->err);
    assert_null (fx->lease [0]);
    assert_int_equal (rc, -ENOENT);
    if (!strstr (fx->err, path))
        fail_msg ("err \"%s\" does not name %s", fx->err, path);
}

//  Without the signal blocked, no break could be heard: refused, with words.
//  No lease exists, so no lease signal can come while it is unblocked here.
static void
test_a_lease_without_the_signal_blocked_is_refused (void **state)
{
    fx_t *fx = *state;
    sigset_t set;
    sigemptyset (&set);
    sigaddset (&set, SIGRTMIN + 3);
    int rc = 0;
    fx->err [0] = '\0';
    pthread_sigmask (SIG_UNBLOCK, &set, NULL);
    fx->lease [0] = gw_readlease_new (fx->path [0], &rc, fx->err, sizeof fx->err);
    pthread_sigmask (SIG_BLOCK, &set, NULL);
    assert_null (fx->lease [0]);
    assert_int_equal (rc, -ENOTSUP);
    if (!strstr (fx->err, "not blocked") || !strstr (fx->err, fx->path [0]))
        fail_msg ("err \"%s\" says neither the signal nor the path", fx->err);
}

//  A break before anyone listens is kept: the callback set after it runs at once.
static void
test_a_break_before_the_callback_is_reported_at_once (void **state)
{
    fx_t *fx = *state;
    s_lease (fx, 0, true);
    s_start_child (fx, fx->path [0], OP_OPEN_WRITE);
    s_await_break (fx, 0);
    assert_int_equal (fx->calls [0], 0);
    gw_readlease_on_break (fx->lease [0], s_count, &fx->calls [0]);
    assert_int_equal (fx->calls [0], 1);
    gw_readlease_dispatch ();
    assert_int_equal (fx->calls [0], 1);
    s_child_still_waits (fx, 50);
    gw_readlease_destroy (&fx->lease [0]);
    assert_int_equal (s_child_done (fx).err, 0);
    assert_int_equal (fx->calls [0], 1);
}

//  Two leases: a writer of one file breaks that lease alone; then the
//  other's. The older lease goes first, so a dispatch that marked whichever
//  lease it met first (the newest) would be seen.
static void
test_a_break_marks_only_its_own_lease (void **state)
{
    fx_t *fx = *state;
    s_lease (fx, 0, false);
    s_lease (fx, 1, false);
    s_start_child (fx, fx->path [0], OP_OPEN_WRITE);
    s_await_break (fx, 0);
    assert_false (gw_readlease_broken (fx->lease [1]));
    assert_int_equal (fx->calls [0], 1);
    assert_int_equal (fx->calls [1], 0);
    s_child_still_waits (fx, 50);
    gw_readlease_destroy (&fx->lease [0]);
    assert_int_equal (s_child_done (fx).err, 0);
    assert_false (gw_readlease_broken (fx->lease [1]));
    assert_int_equal (fx->calls [1], 0);
    s_start_child (fx, fx->path [1], OP_TRUNCATE);
    s_await_break (fx, 1);
    assert_int_equal (fx->calls [0], 1);
    assert_int_equal (fx->calls [1], 1);
    s_child_still_waits (fx, 50);
    gw_readlease_destroy (&fx->lease [1]);
    assert_int_equal (s_child_done (fx).err, 0);
}

int
main (void)
{
    gw_readlease_block_signal ();               //  before anything: no thread exists yet
    sigset_t cur;
    if (pthread_sigmask (SIG_BLOCK, NULL, &cur) != 0 || sigismember (&cur, SIGRTMIN + 3) != 1) {
        fprintf (stderr, "gw_readlease_block_signal did not block SIGRTMIN+3\n");
        return 1;
    }
#define T(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        T (test_an_open_for_writing_waits_for_the_lease),
        T (test_a_truncate_waits_for_the_lease),
        T (test_a_reader_does_not_break_the_lease),
        T (test_a_file_open_for_writing_is_refused),
        T (test_a_missing_file_is_refused_by_name),
        T (test_a_lease_without_the_signal_blocked_is_refused),
        T (test_a_break_before_the_callback_is_reported_at_once),
        T (test_a_break_marks_only_its_own_lease),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
