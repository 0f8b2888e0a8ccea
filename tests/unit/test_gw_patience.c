/*  test_gw_patience - a deadline that measures a process's progress: past
    it, a process kept off the CPU waits on, and an idle one does not. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_patience.h"

//  A child on CPU 0 that spins at `nice` (or sleeps, when spin is false).
static pid_t
s_child (bool spin, int nice_value)
{
    pid_t pid = fork ();
    if (pid == 0) {
        cpu_set_t one;
        CPU_ZERO (&one);
        CPU_SET (0, &one);
        sched_setaffinity (0, sizeof one, &one);
        setpriority (PRIO_PROCESS, 0, nice_value);
        for (volatile unsigned long i = 0; ; i++)
            if (!spin)
                pause ();
    }
    assert_true (pid > 0);
    return pid;
}

static void
s_end (pid_t pid)
{
    kill (pid, SIGKILL);
    waitpid (pid, NULL, 0);
}

static void
test_gw_patience_without_a_process_is_the_wall (void **state)
{
    (void) state;
    gw_patience_t *p = gw_patience_new (0, 100);
    int left = gw_patience_left_ms (p);
    assert_true (left > 0 && left <= 100);
    usleep (150 * 1000);
    assert_int_equal (gw_patience_left_ms (p), 0);
    gw_patience_reset (p, 100);
    assert_true (gw_patience_left_ms (p) > 0);
    gw_patience_destroy (&p);
    assert_null (p);
}

//  A process that spins at nice 19 beside one at nice 0 on the same CPU
//  gets about 1.5% of it: past the deadline it is short of CPU, and the
//  wait goes on; a sleeping one waits for no CPU, and the wait ends.
static void
test_gw_patience_waits_on_for_a_starved_process_only (void **state)
{
    (void) state;
    pid_t hog = s_child (true, 0), starved = s_child (true, 19), idle = s_child (false, 0);
    usleep (50 * 1000);                         //  all three on their way
    gw_patience_t *p = gw_patience_new (starved, 100), *q = gw_patience_new (idle, 100);
    usleep (500 * 1000);
    int left = gw_patience_left_ms (p);
    assert_true (left > 0 && left <= 250);
    assert_int_equal (gw_patience_left_ms (q), 0);
    gw_patience_destroy (&p);
    gw_patience_destroy (&q);
    s_end (hog);
    s_end (starved);
    s_end (idle);
}

//  A process that is gone has no progress to wait for.
static void
test_gw_patience_a_process_that_is_gone_ends_the_wait (void **state)
{
    (void) state;
    pid_t pid = s_child (false, 0);
    gw_patience_t *p = gw_patience_new (pid, 50);
    s_end (pid);
    usleep (100 * 1000);
    assert_int_equal (gw_patience_left_ms (p), 0);
    gw_patience_destroy (&p);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_patience_without_a_process_is_the_wall),
        cmocka_unit_test (test_gw_patience_waits_on_for_a_starved_process_only),
        cmocka_unit_test (test_gw_patience_a_process_that_is_gone_ends_the_wait),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
