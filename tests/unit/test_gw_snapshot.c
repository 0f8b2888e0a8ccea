/*  test_gw_snapshot - the QMP steps of a snapshot against a fake QEMU: a
    forked child that listens on run_dir/qmp.sock, writes its whole script
    at once (ids are predictable: 1 for qmp_capabilities, then 2, 3, ...),
    and keeps what the client sent in run_dir/sent.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "snap/gw_snapshot.h"
#include "ch_util.h"
#include "tu.h"

#define GREETING "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n"
#define OK(id) "{\"return\": {}, \"id\": " #id "}\r\n"
#define STATUS(s, id) "{\"return\": {\"status\": \"" s "\"}, \"id\": " #id "}\r\n"

typedef struct {
    char dir [TU_DIR_MAX];
    pid_t fake;
} fixture_t;

static int
s_setup (void **state)
{
    *state = tu_fixture_new (sizeof (fixture_t), "test_gw_snapshot");
    return 0;
}

//  The fake QEMU: one client, the script, then what it sent into dir/sent.
static void
s_fake (fixture_t *f, const char *script)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    snprintf (addr.sun_path, sizeof addr.sun_path, "%s/qmp.sock", f->dir);
    int lfd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal (bind (lfd, (struct sockaddr *) &addr, sizeof addr), 0);
    assert_int_equal (listen (lfd, 1), 0);
    f->fake = fork ();
    assert_true (f->fake >= 0);
    if (f->fake > 0) {
        close (lfd);
        return;
    }
    int fd = accept (lfd, NULL, NULL);
    char sent [8192], path [PATH_MAX];
    size_t len = 0;
    ssize_t n = write (fd, script, strlen (script));
    while (n >= 0 && len < sizeof sent - 1
       &&  (n = read (fd, sent + len, sizeof sent - 1 - len)) > 0)
        len += (size_t) n;
    FILE *out = fopen (tu_path (path, sizeof path, f->dir, "sent"), "w");
    fwrite (sent, 1, len, out);
    fclose (out);
    _exit (0);
}

//  What the client sent, once the fake has ended (static buffer).
static const char *
s_sent (fixture_t *f)
{
    static char text [8192];
    char path [PATH_MAX];
    assert_int_equal (waitpid (f->fake, NULL, 0), f->fake);
    ssize_t n = ch_read_small (tu_path (path, sizeof path, f->dir, "sent"), text, sizeof text);
    assert_true (n >= 0);
    return text;
}

//  Connect, hand over the state file, migrate, wait through "active".
static void
test_gw_snapshot_migrates_through_fd_state (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256] = "", path [PATH_MAX];
    s_fake (f, GREETING OK (1) OK (2) OK (3) STATUS ("active", 4) STATUS ("completed", 5));
    gw_qmp_t *qmp = gw_snapshot_qmp_at (f->dir, err, sizeof err);
    assert_non_null (qmp);
    tu_path (path, sizeof path, f->dir, "state");
    assert_int_equal (gw_snapshot_migrate_fd (qmp, "migrate", path, O_WRONLY | O_CREAT, err,
                                              sizeof err), 0);
    gw_patience_t *wall = gw_patience_new (0, 5000);
    assert_int_equal (gw_snapshot_wait (qmp, "completed", wall, err, sizeof err), 0);
    gw_patience_destroy (&wall);
    gw_qmp_destroy (&qmp);
    const char *sent = s_sent (f);
    assert_non_null (strstr (sent, "\"execute\":\"getfd\""));
    assert_non_null (strstr (sent, "\"fdname\":\"state\""));
    assert_non_null (strstr (sent, "\"migrate\",\"id\":3,\"arguments\":{\"uri\":\"fd:state\"}"));
    assert_non_null (strstr (sent, "\"id\":5"));
}

//  A failed migration is -EIO with QEMU's own reason; the deadline is
//  -ETIMEDOUT; a link where the state file should be is refused.
static void
test_gw_snapshot_wait_says_why_it_failed (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256] = "", path [PATH_MAX];
    s_fake (f, GREETING OK (1) "{\"return\": {\"status\": \"failed\", \"error-desc\": "
            "\"disk full\"}, \"id\": 2}\r\n");
    gw_qmp_t *qmp = gw_snapshot_qmp_at (f->dir, err, sizeof err);
    assert_non_null (qmp);
    gw_patience_t *wall = gw_patience_new (0, 5000), *none = gw_patience_new (0, 0);
    assert_int_equal (gw_snapshot_wait (qmp, "completed", wall, err, sizeof err), -EIO);
    assert_non_null (strstr (err, "failed: disk full"));
    assert_int_equal (gw_snapshot_wait (qmp, "completed", none, err, sizeof err), -ETIMEDOUT);
    gw_patience_destroy (&wall);
    gw_patience_destroy (&none);
    assert_non_null (strstr (err, "at the deadline"));
    assert_int_equal (symlink ("/dev/null", tu_path (path, sizeof path, f->dir, "link")), 0);
    assert_int_equal (gw_snapshot_migrate_fd (qmp, "migrate", path, O_WRONLY, err, sizeof err),
                      -ELOOP);
    gw_qmp_destroy (&qmp);
    s_sent (f);
}

//  No QEMU listening: NULL, and the reason names the run dir.
static void
test_gw_snapshot_qmp_at_without_qemu (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256] = "";
    assert_null (gw_snapshot_qmp_at (f->dir, err, sizeof err));
    assert_non_null (strstr (err, f->dir));
}

int
main (void)
{
    signal (SIGPIPE, SIG_IGN);
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_snapshot_migrates_through_fd_state),
        S_TEST (test_gw_snapshot_wait_says_why_it_failed),
        S_TEST (test_gw_snapshot_qmp_at_without_qemu),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
