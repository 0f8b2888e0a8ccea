/*  test_gw_pool - the warm pool's daemon, holders and hand-outs, with a
    mock in the VM seam (gw_poold_ops_t): no QEMU. The daemon runs in a
    child process and forks its holders as it does for real; each mock
    clone is a fake QEMU (a child that waits to be killed) and two
    socketpairs for ports. Mock operations append to an events file, since
    they run in the holders' processes.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_log.h"
#include "snap/gw_pool.h"
#include "snap/gw_poold.h"
#include "tu.h"

#define S_SERIALS 16

typedef struct {
    char events [96];                           //  one line per mock operation
    int delay_ms [S_SERIALS];                   //  a restore's time, per serial
    unsigned fail_warm;                         //  serials (bits) whose warm-up fails
    long pss_mib;                               //  each ready clone's
} mock_t;

typedef struct {
    mock_t *mock;
    unsigned serial;
    pid_t qemu;                                 //  the fake
    int kernel [2], init [2];                   //  [1] goes to the gateway
    char run_dir [32];
} mock_clone_t;

typedef struct {
    char dir [TU_DIR_MAX], sock [96], log [96];
    mock_t mock;
    pid_t daemon;
} fixture_t;

//  ==========================================================================
//  The mock seam.

//  "WHAT SERIAL\n" into the events file.
static void
s_event (mock_t *m, const char *what, unsigned serial)
{
    char line [64];
    int n = snprintf (line, sizeof line, "%s %u\n", what, serial);
    int fd = open (m->events, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0 && write (fd, line, (size_t) n) != n)
        abort ();
    if (fd >= 0)
        close (fd);
}

static void
s_sleep_ms (int ms)
{
    struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
    nanosleep (&ts, NULL);
}

static int
m_restore (void *ctx, unsigned serial, void **clone_p, char *err, size_t errlen)
{
    mock_t *m = ctx;
    (void) err, (void) errlen;
    s_sleep_ms (m->delay_ms [serial % S_SERIALS]);
    mock_clone_t *c = calloc (1, sizeof *c);
    c->mock = m;
    c->serial = serial;
    snprintf (c->run_dir, sizeof c->run_dir, "mock-%u", serial);
    socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c->kernel);
    socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c->init);
    c->qemu = fork ();
    if (c->qemu == 0) {                         //  the fake QEMU: dies with its holder
        prctl (PR_SET_PDEATHSIG, SIGKILL);
        while (true)
            pause ();
    }
    s_event (m, "restore", serial);
    *clone_p = c;
    return 0;
}

static int
m_warm (void *ctx, void *clone, char *err, size_t errlen)
{
    mock_t *m = ctx;
    mock_clone_t *c = clone;
    if (m->fail_warm & (1u << c->serial)) {
        snprintf (err, errlen, "mock warm-up failed");
        return -EIO;
    }
    s_event (m, "warm", c->serial);
    return 0;
}

static void
m_describe (void *ctx, void *clone, gw_poold_info_t *info)
{
    (void) ctx;
    mock_clone_t *c = clone;
    *info = (gw_poold_info_t) { .pid = c->qemu, .run_dir = c->run_dir,
                                .console = "mock-console" };
}

static int
m_take_ports (void *ctx, void *clone, int *kernel_fd, int *init_fd)
{
    (void) ctx;
    mock_clone_t *c = clone;
    *kernel_fd = c->kernel [1];
    *init_fd = c->init [1];
    c->kernel [1] = c->init [1] = -1;
    return 0;
}

static int
m_kill (void *ctx, void *clone)
{
    (void) ctx;
    return kill (((mock_clone_t *) clone)->qemu, SIGKILL) == 0 ? 0 : -errno;
}

static int
m_reap (void *ctx, void *clone, int *wstatus)
{
    (void) ctx;
    mock_clone_t *c = clone;
    pid_t pid = c->qemu > 0 ? waitpid (c->qemu, wstatus, WNOHANG) : -1;
    if (pid == 0)
        return -EAGAIN;
    c->qemu = -1;
    return pid > 0 ? 0 : -ECHILD;
}

static void
m_destroy (void *ctx, void **clone_p)
{
    mock_clone_t *c = *clone_p;
    if (c->qemu > 0) {
        kill (c->qemu, SIGKILL);
        waitpid (c->qemu, NULL, 0);
    }
    for (int i = 0; i < 2; i++) {
        if (c->kernel [i] >= 0)
            close (c->kernel [i]);
        if (c->init [i] >= 0)
            close (c->init [i]);
    }
    s_event (ctx, "destroy", c->serial);
    free (c);
    *clone_p = NULL;
}

static long
m_pss_mib (void *ctx, int pid)
{
    (void) pid;
    return ((mock_t *) ctx)->pss_mib;
}

//  ==========================================================================
//  Helpers.

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gw_pool");
    tu_path (f->sock, sizeof f->sock, f->dir, "pool.sock");
    tu_path (f->log, sizeof f->log, f->dir, "daemon.log");
    tu_path (f->mock.events, sizeof f->mock.events, f->dir, "events");
    f->mock.pss_mib = 10;
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    if (f->daemon > 0) {
        kill (f->daemon, SIGTERM);
        waitpid (f->daemon, NULL, 0);
    }
    return tu_fixture_teardown (state);
}

static void
s_start (fixture_t *f, unsigned size, unsigned budget_mib, unsigned idle_s)
{
    f->daemon = fork ();
    assert_true (f->daemon >= 0);
    if (f->daemon == 0) {
        int fd = open (f->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2 (fd, 2);
        gw_log_init (GW_LOG_INFO, NULL);
        gw_poold_opts_t opts = { .socket_path = f->sock, .size = size,
                                 .budget_mib = budget_mib, .idle_s = idle_s };
        gw_poold_ops_t ops = { .ctx = &f->mock, .restore = m_restore, .warm = m_warm,
                               .describe = m_describe, .take_ports = m_take_ports,
                               .kill = m_kill, .reap = m_reap, .destroy = m_destroy,
                               .pss_mib = m_pss_mib };
        _exit (gw_poold_run (&opts, &ops));
    }
}

//  How often needle occurs in the file at path.
static int
s_count (const char *path, const char *needle)
{
    char buf [65536] = "";
    FILE *f = fopen (path, "r");
    size_t n = f ? fread (buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose (f);
    buf [n] = 0;
    int count = 0;
    for (const char *p = buf; (p = strstr (p, needle)); p += strlen (needle))
        count++;
    return count;
}

//  Wait up to 10 s until needle occurs count times in path.
static void
s_wait_for (const char *path, const char *needle, int count)
{
    for (int i = 0; i < 500 && s_count (path, needle) < count; i++)
        s_sleep_ms (20);
    assert_int_equal (s_count (path, needle), count);
}

static int
s_take (fixture_t *f, gw_pool_lease_t **lease_p, char *err, size_t errlen)
{
    err [0] = 0;
    int rc = -ENOENT;
    for (int i = 0; i < 250 && (rc == -ENOENT || rc == -ECONNREFUSED); i++) {
        rc = gw_pool_take (f->sock, 2000, lease_p, err, errlen);
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            s_sleep_ms (20);                    //  the daemon is still starting
    }
    return rc;
}

static gw_pool_lease_t *
s_take_ok (fixture_t *f, const char *want_run_dir)
{
    char err [256];
    gw_pool_lease_t *lease = NULL;
    assert_int_equal (s_take (f, &lease, err, sizeof err), 0);
    if (want_run_dir)
        assert_string_equal (gw_pool_lease_run_dir (lease), want_run_dir);
    assert_string_equal (gw_pool_lease_console (lease), "mock-console");
    assert_true (gw_pool_lease_pid (lease) > 1);
    int kfd = gw_pool_lease_take_kernel_fd (lease), ifd = gw_pool_lease_take_init_fd (lease);
    assert_true (kfd >= 0 && ifd >= 0 && fcntl (kfd, F_GETFD) >= 0);
    assert_int_equal (gw_pool_lease_take_kernel_fd (lease), -1);   //  once
    close (kfd);
    close (ifd);
    return lease;
}

//  ==========================================================================
//  Tests.

static void
test_take_without_a_daemon (void **state)
{
    fixture_t *f = *state;
    char err [256] = "";
    gw_pool_lease_t *lease = NULL;
    assert_int_equal (gw_pool_take (f->sock, 500, &lease, err, sizeof err), -ENOENT);
    assert_null (lease);
}

static void
test_take_when_empty_then_ready (void **state)
{
    fixture_t *f = *state;
    f->mock.delay_ms [0] = 800;
    s_start (f, 1, 4096, 0);
    char err [256];
    gw_pool_lease_t *lease = NULL;
    assert_int_equal (s_take (f, &lease, err, sizeof err), -EAGAIN);
    assert_non_null (strstr (err, "no clone ready"));
    assert_null (lease);
    s_wait_for (f->log, "event=pool.clone_ready", 1);
    lease = s_take_ok (f, "mock-0");
    gw_pool_lease_destroy (&lease);
    s_wait_for (f->mock.events, "destroy 0", 1);    //  the lifeline closed: clone gone
}

static void
test_hand_out_takes_the_longest_ready_first (void **state)
{
    fixture_t *f = *state;
    int delays [S_SERIALS] = { 400, 0, 200, 600, 600, 600 };
    memcpy (f->mock.delay_ms, delays, sizeof delays);
    s_start (f, 3, 4096, 0);
    s_wait_for (f->log, "event=pool.clone_ready", 3);
    gw_pool_lease_t *a = s_take_ok (f, "mock-1");
    gw_pool_lease_t *b = s_take_ok (f, "mock-2");
    gw_pool_lease_t *c = s_take_ok (f, "mock-0");
    //  The lifeline: a kill through it, then the wait status back.
    int status = 0, rc = -EAGAIN;
    assert_int_equal (gw_pool_lease_kill (a), 0);
    for (int i = 0; i < 250 && (rc = gw_pool_lease_reap (a, &status)) == -EAGAIN; i++)
        s_sleep_ms (20);
    assert_int_equal (rc, 0);
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    s_wait_for (f->log, "event=pool.clone_ready", 6);   //  refilled
    assert_int_equal (s_count (f->log, "event=pool.handed_out"), 3);
    gw_pool_lease_destroy (&a);
    gw_pool_lease_destroy (&b);
    gw_pool_lease_destroy (&c);
    s_wait_for (f->mock.events, "destroy", 3);
}

static void
test_a_clone_whose_warm_up_fails_is_dropped_and_replaced (void **state)
{
    fixture_t *f = *state;
    f->mock.fail_warm = 1u << 0;
    s_start (f, 1, 4096, 0);
    s_wait_for (f->log, "event=pool.clone_failed", 1);
    assert_int_equal (s_count (f->log, "mock warm-up failed\""), 1);
    s_wait_for (f->log, "event=pool.clone_ready", 1);
    assert_int_equal (s_count (f->mock.events, "restore"), 2);
    assert_int_equal (s_count (f->mock.events, "warm 0"), 0);
    gw_pool_lease_t *lease = s_take_ok (f, "mock-1");
    gw_pool_lease_destroy (&lease);
}

static void
test_the_budget_caps_the_pool (void **state)
{
    fixture_t *f = *state;
    f->mock.pss_mib = 90;                       //  3 x 64 MiB (starting) fit in 200, 4 not
    s_start (f, 4, 200, 0);
    s_wait_for (f->log, "event=pool.clone_ready", 3);
    s_sleep_ms (300);
    assert_int_equal (s_count (f->mock.events, "restore"), 3);
    gw_pool_lease_t *a = s_take_ok (f, NULL);   //  2 x 90 + 64 > 200: no refill
    s_sleep_ms (300);
    assert_int_equal (s_count (f->mock.events, "restore"), 3);
    gw_pool_lease_t *b = s_take_ok (f, NULL);   //  90 + 64 fits: one more
    s_wait_for (f->log, "event=pool.clone_ready", 4);
    s_sleep_ms (300);
    assert_int_equal (s_count (f->mock.events, "restore"), 4);
    gw_pool_lease_destroy (&a);
    gw_pool_lease_destroy (&b);
}

static void
test_an_idle_daemon_exits_with_its_clones (void **state)
{
    fixture_t *f = *state;
    s_start (f, 2, 4096, 1);
    s_wait_for (f->log, "event=pool.clone_ready", 2);
    int status = -1;
    pid_t pid = 0;
    for (int i = 0; i < 250 && (pid = waitpid (f->daemon, &status, WNOHANG)) == 0; i++)
        s_sleep_ms (20);
    assert_int_equal (pid, f->daemon);
    f->daemon = 0;
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    assert_int_equal (s_count (f->log, "event=pool.idle"), 1);
    assert_int_equal (s_count (f->log, "event=pool.stopped"), 1);
    assert_int_equal (access (f->sock, F_OK), -1);      //  unlinked
    s_wait_for (f->mock.events, "destroy", 2);          //  unused clones went too
}

int
main (void)
{
    gw_log_init (GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_take_without_a_daemon, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_take_when_empty_then_ready, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_hand_out_takes_the_longest_ready_first,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (
            test_a_clone_whose_warm_up_fails_is_dropped_and_replaced, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_the_budget_caps_the_pool, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_an_idle_daemon_exits_with_its_clones,
                                         s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
