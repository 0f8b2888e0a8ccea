/*  test_ch_child - a child's set-up between fork and exec. The child side
    runs in forked children that answer through their exit code (no cmocka
    there). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_child.h"

static int
s_exit_code (pid_t pid)
{
    int status = -1;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_true (WIFEXITED (status));
    return WEXITSTATUS (status);
}

static size_t
s_read (int fd, char *buf, size_t cap)
{
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read (fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t) n;
    buf [len] = 0;
    return len;
}

//  The child of test_ch_child_fds_*: x's write end sits on 3, y's on 4;
//  then 1 <- 4, 2 <- 3, 3 <- 3 (a source on a target), the rest closed or
//  close-on-exec. Exit 0 when each fd is where it should be.
static int
s_child_fds (int x, int y, bool cloexec_rest)
{
    if (dup2 (x, 3) < 0 || dup2 (y, 4) < 0)
        return 10;
    if (ch_child_fds ((const int []) { -1, 4, 3, 3 }, 4, cloexec_rest) < 0)
        return 11;
    if (write (1, "1", 1) != 1 || write (2, "2", 1) != 1 || write (3, "3", 1) != 1)
        return 12;
    for (int fd = 1; fd < 4; fd++)
        if (fcntl (fd, F_GETFD) != 0)           //  open, and not close-on-exec
            return 13;
    int rest = fcntl (4, F_GETFD);
    if (cloexec_rest ? rest != FD_CLOEXEC : !(rest < 0 && errno == EBADF))
        return 14;
    return 0;
}

static void
s_fds_case (bool cloexec_rest)
{
    int x [2], y [2];
    assert_int_equal (pipe (x), 0);
    assert_int_equal (pipe (y), 0);
    pid_t pid = fork ();
    if (pid == 0) {
        close (x [0]);
        close (y [0]);
        _exit (s_child_fds (x [1], y [1], cloexec_rest));
    }
    close (x [1]);
    close (y [1]);
    char got [16];
    s_read (x [0], got, sizeof got);
    assert_string_equal (got, "23");
    s_read (y [0], got, sizeof got);
    assert_string_equal (got, "1");
    assert_int_equal (s_exit_code (pid), 0);
    close (x [0]);
    close (y [0]);
}

static void
test_ch_child_fds_moves_and_closes (void **state)
{
    (void) state;
    s_fds_case (false);
}

static void
test_ch_child_fds_can_leave_the_rest_for_exec (void **state)
{
    (void) state;
    s_fds_case (true);
    assert_int_equal (ch_child_fds ((const int []) { 0 }, CH_CHILD_FDS_MAX + 1, false), -EINVAL);
}

//  The tie: the death signal set; a parent that is not ours is -ESRCH.
static void
test_ch_child_tie_checks_the_parent (void **state)
{
    (void) state;
    pid_t parent = getpid (), pid = fork ();
    if (pid == 0) {
        int sig = 0;
        if (ch_child_tie (parent, SIGTERM) != 0 || prctl (PR_GET_PDEATHSIG, &sig) != 0
        ||  sig != SIGTERM)
            _exit (1);
        _exit (ch_child_tie (parent + 100000, SIGKILL) == -ESRCH && ch_child_tie (0, SIGKILL) == 0
               ? 0 : 2);
    }
    assert_int_equal (s_exit_code (pid), 0);
}

//  The report pipe: empty when the exec worked, the errno when it failed.
static void
test_ch_child_reports_the_exec (void **state)
{
    (void) state;
    const char *paths [] = { "/bin/true", "/nonexistent/program" };
    int want [] = { 0, -ENOENT };
    for (int i = 0; i < 2; i++) {
        int report [2];
        assert_int_equal (pipe2 (report, O_CLOEXEC), 0);
        pid_t pid = fork ();
        if (pid == 0) {
            char *argv [] = { (char *) paths [i], NULL };
            execv (argv [0], argv);
            ch_child_exec_failed (report [1]);
        }
        close (report [1]);
        assert_int_equal (ch_child_wait_exec (report [0]), want [i]);
        close (report [0]);
        assert_int_equal (s_exit_code (pid), i == 0 ? 0 : 127);
    }
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_child_fds_moves_and_closes),
        cmocka_unit_test (test_ch_child_fds_can_leave_the_rest_for_exec),
        cmocka_unit_test (test_ch_child_tie_checks_the_parent),
        cmocka_unit_test (test_ch_child_reports_the_exec),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
