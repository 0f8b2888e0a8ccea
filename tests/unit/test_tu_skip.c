/*  test_tu_skip - the test helpers' skips (tu.h): an undeclared skip fails
    a CI run, a declared-expected one skips there, both say which test and
    why, and outside CI both skip.

    Each case runs this binary again as a child (--child NAME), with CI set
    as the case needs, and reads its cmocka output and exit status (the
    number of failed tests).
*/
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tu.h"

//  --------------------------------------------------------------------------
//  The children's tests.

static void
test_child_undeclared (void **state)
{
    (void) state;
    tu_skip ("reason %d", 42);
}

static void
test_child_expected (void **state)
{
    (void) state;
    tu_skip_expected ("a condition CI may %s", "have");
}

static int
s_child (const char *name)
{
    const struct CMUnitTest undeclared [] = { cmocka_unit_test (test_child_undeclared) };
    const struct CMUnitTest expected [] = { cmocka_unit_test (test_child_expected) };
    if (strcmp (name, "undeclared") == 0)
        return cmocka_run_group_tests (undeclared, NULL, NULL);
    if (strcmp (name, "expected") == 0)
        return cmocka_run_group_tests (expected, NULL, NULL);
    return 99;
}

//  --------------------------------------------------------------------------
//  Running one.

typedef struct {
    int status;                                 //  exit status: failed tests
    char out [8192];                            //  stdout and stderr
} s_run_t;

//  This binary as the child case, with CI=ci (NULL: unset).
static void
s_run (s_run_t *r, const char *child, const char *ci)
{
    int pipe_fds [2];
    assert_int_equal (pipe (pipe_fds), 0);
    fflush (NULL);
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        dup2 (pipe_fds [1], 1);
        dup2 (pipe_fds [1], 2);
        close (pipe_fds [0]);
        close (pipe_fds [1]);
        if (ci)
            setenv ("CI", ci, 1);
        else
            unsetenv ("CI");
        execl ("/proc/self/exe", "test_tu_skip", "--child", child, (char *) NULL);
        _exit (127);
    }
    close (pipe_fds [1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read (pipe_fds [0], r->out + len, sizeof r->out - 1 - len)) > 0)
        len += (size_t) n;
    r->out [len] = 0;
    close (pipe_fds [0]);
    int wstatus = 0;
    assert_int_equal (waitpid (pid, &wstatus, 0), pid);
    assert_true (WIFEXITED (wstatus));
    r->status = WEXITSTATUS (wstatus);
}

static void
s_has (const s_run_t *r, const char *text)
{
    if (!strstr (r->out, text))
        fail_msg ("no \"%s\" in the child's output:\n%s", text, r->out);
}

//  --------------------------------------------------------------------------
//  The cases.

static void
test_tu_skip_undeclared_fails_under_ci (void **state)
{
    (void) state;
    s_run_t r;
    s_run (&r, "undeclared", "true");
    assert_int_equal (r.status, 1);             //  one failed test
    s_has (&r, "tu: skip test_child_undeclared: reason 42 (CI=true: this skip is not declared "
               "expected, so the test fails)\n");
    s_has (&r, "[  FAILED  ] test_child_undeclared");
    assert_null (strstr (r.out, "SKIPPED"));
}

static void
test_tu_skip_undeclared_skips_outside_ci (void **state)
{
    (void) state;
    const char *cis [] = { NULL, "false", "" };
    for (size_t i = 0; i < sizeof cis / sizeof cis [0]; i++) {
        s_run_t r;
        s_run (&r, "undeclared", cis [i]);
        assert_int_equal (r.status, 0);
        s_has (&r, "tu: skip test_child_undeclared: reason 42\n");
        s_has (&r, "[  SKIPPED ] test_child_undeclared");
        assert_null (strstr (r.out, "FAILED"));
    }
}

static void
test_tu_skip_expected_skips_under_ci_too (void **state)
{
    (void) state;
    const char *cis [] = { "true", NULL };
    for (size_t i = 0; i < sizeof cis / sizeof cis [0]; i++) {
        s_run_t r;
        s_run (&r, "expected", cis [i]);
        assert_int_equal (r.status, 0);
        s_has (&r, "tu: skip test_child_expected: a condition CI may have (expected)\n");
        s_has (&r, "[  SKIPPED ] test_child_expected");
        assert_null (strstr (r.out, "FAILED"));
    }
}

int
main (int argc, char **argv)
{
    if (argc == 3 && strcmp (argv [1], "--child") == 0)
        return s_child (argv [2]);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_tu_skip_undeclared_fails_under_ci),
        cmocka_unit_test (test_tu_skip_undeclared_skips_outside_ci),
        cmocka_unit_test (test_tu_skip_expected_skips_under_ci_too),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
